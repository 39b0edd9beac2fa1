//! The optimum of a bulk load (`fallow load`) and of a sorted dump (`fallow dump --sorted`) on this machine.
//!
//! Like the paper's phases, the stages are pipelined, so the slowest resource sets the time:
//! - load: read the file sequentially from disk, send its wire bytes over loopback, copy the data into
//!   the store (one memcpy of the file's bytes);
//! - dump: copy the data out of the store, receive its wire bytes over loopback, write the file
//!   sequentially to disk.
//!
//! optimum = max of the resource times; efficiency = optimum / measured. CPU work (parsing, sorting) is
//! left out, as in the paper (PDS spent ~3% of its time sorting).
use crate::calibrate::{Calibration, Transport};
use crate::kv::{wire_bytes, KvOp, KvProtocol};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BulkDirection {
    Load,
    Dump,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkJob {
    pub direction: BulkDirection,
    /// Bytes of the record file read (load) or written (dump).
    pub file_bytes: u64,
    pub records: Option<u64>,
    /// Bytes on the wire in both directions; estimated from `records` when not given.
    pub wire_bytes: Option<u64>,
    /// Key length used for the wire estimate (10 in the sort-benchmark format).
    pub key_bytes: u64,
    pub transport: Transport,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkResource {
    DiskRead,
    DiskWrite,
    Loopback,
    Memory,
}

impl BulkResource {
    pub fn name(self) -> &'static str {
        match self {
            BulkResource::DiskRead => "disk read",
            BulkResource::DiskWrite => "disk write",
            BulkResource::Loopback => "loopback",
            BulkResource::Memory => "memory copy",
        }
    }
}

impl BulkDirection {
    pub fn name(self) -> &'static str {
        match self {
            BulkDirection::Load => "load",
            BulkDirection::Dump => "dump",
        }
    }
}

/// One resource's share: the bytes it must move, its calibrated bandwidth, and the time that takes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkBound {
    pub resource: BulkResource,
    pub bytes: u64,
    pub bytes_per_sec: f64,
    pub time_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkOptimum {
    pub job: BulkJob,
    pub wire_bytes: u64,
    /// How the wire bytes were found (given, or estimated and how).
    pub wire_note: String,
    pub bounds: Vec<BulkBound>,
    pub bottleneck: BulkResource,
    pub optimum_s: f64,
}

/// Wire bytes for a job when only the record count is known: the file's bytes plus RESP framing per
/// record, for SET key value / +OK (load) or GET key / bulk reply (dump), with the mean value length
/// `file_bytes / records - key_bytes`. Exact for the sort-benchmark format (100-byte records, 10-byte key);
/// for key<TAB>value or CSV the separators are counted as value bytes, which overstates the wire by at
/// most 2 bytes per record.
pub fn estimated_wire_bytes(
    direction: BulkDirection,
    file_bytes: u64,
    records: u64,
    key_bytes: u64,
) -> u64 {
    if records == 0 {
        return file_bytes;
    }
    let value_bytes = (file_bytes / records).saturating_sub(key_bytes);
    let op = match direction {
        BulkDirection::Load => KvOp::Set,
        BulkDirection::Dump => KvOp::Get,
    };
    let per_record = wire_bytes(op, KvProtocol::Resp, key_bytes, value_bytes).total();
    let framing = per_record.saturating_sub(key_bytes + value_bytes);
    file_bytes.saturating_add(records.saturating_mul(framing))
}

fn wire_for(job: &BulkJob) -> (u64, String) {
    match (job.wire_bytes, job.records) {
        (Some(bytes), _) => (bytes, "given".to_string()),
        (None, Some(records)) => (
            estimated_wire_bytes(job.direction, job.file_bytes, records, job.key_bytes),
            format!(
                "estimated: file bytes + RESP framing for {records} records with {}-byte keys",
                job.key_bytes
            ),
        ),
        (None, None) => (
            job.file_bytes,
            "estimated as the file bytes alone (no --records): a lower bound, framing left out"
                .to_string(),
        ),
    }
}

fn bound(resource: BulkResource, bytes: u64, bytes_per_sec: f64) -> BulkBound {
    BulkBound {
        resource,
        bytes,
        bytes_per_sec,
        time_s: bytes as f64 / bytes_per_sec,
    }
}

/// The optimum of a bulk job on the calibrated machine.
pub fn optimum(calibration: &Calibration, job: &BulkJob) -> Result<BulkOptimum> {
    if job.file_bytes == 0 {
        bail!("the file size must be more than 0 bytes");
    }
    let (wire_bytes, wire_note) = wire_for(job);
    let loopback = calibration.loopback.stream_bytes_per_sec(job.transport);
    let memcpy = calibration.memory.memcpy_bytes_per_sec();
    let disk = match job.direction {
        BulkDirection::Load => bound(
            BulkResource::DiskRead,
            job.file_bytes,
            calibration.disk.seq_read_bytes_per_sec,
        ),
        BulkDirection::Dump => bound(
            BulkResource::DiskWrite,
            job.file_bytes,
            calibration.disk.seq_write_bytes_per_sec,
        ),
    };
    let bounds = vec![
        disk,
        bound(BulkResource::Loopback, wire_bytes, loopback),
        bound(BulkResource::Memory, job.file_bytes, memcpy),
    ];
    for bound in &bounds {
        if !(bound.bytes_per_sec.is_finite() && bound.bytes_per_sec > 0.0) {
            bail!(
                "the calibration's {} bandwidth is not a positive number: re-run `fallow model calibrate`",
                bound.resource.name()
            );
        }
    }
    let slowest = bounds
        .iter()
        .max_by(|a, b| a.time_s.total_cmp(&b.time_s))
        .expect("three bounds");
    assert!(
        slowest.time_s > 0.0,
        "a bulk job moves at least one byte at a finite rate: its optimum is a positive time ({} s)",
        slowest.time_s
    );
    Ok(BulkOptimum {
        job: job.clone(),
        wire_bytes,
        wire_note,
        bottleneck: slowest.resource,
        optimum_s: slowest.time_s,
        bounds,
    })
}

/// optimum / measured.
pub fn efficiency(optimum: &BulkOptimum, measured_s: f64) -> Result<f64> {
    assert!(
        optimum.optimum_s > 0.0,
        "an optimum is a positive time: {} s",
        optimum.optimum_s
    );
    if !(measured_s.is_finite() && measured_s > 0.0) {
        bail!("the measured time must be a positive number of seconds, got {measured_s}");
    }
    Ok(optimum.optimum_s / measured_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::synthetic_calibration;

    fn job(direction: BulkDirection, file_bytes: u64, records: Option<u64>) -> BulkJob {
        BulkJob {
            direction,
            file_bytes,
            records,
            wire_bytes: None,
            key_bytes: 10,
            transport: Transport::Tcp,
        }
    }

    #[test]
    fn sort_benchmark_records_have_32_bytes_of_framing() {
        // SET: "*3\r\n$3\r\nSET\r\n" 13 + "$10\r\n" 5 + 10 + 2 + "$90\r\n" 5 + 90 + 2 + "+OK\r\n" 5 = 132 = 100 + 32.
        assert_eq!(estimated_wire_bytes(BulkDirection::Load, 100, 1, 10), 132);
        // GET: 13 + 5 + 10 + 2 = 30; reply "$90\r\n" + 90 + 2 = 97; 127 = 100 + 27.
        assert_eq!(
            estimated_wire_bytes(BulkDirection::Dump, 1_000_000_000, 10_000_000, 10),
            1_270_000_000
        );
    }

    #[test]
    fn load_of_1_gb_is_disk_bound() {
        // Disk read 1e9 / 500e6 = 2 s; loopback 1.32e9 / 4e9 = 0.33 s; memcpy 1e9 / 10e9 = 0.1 s.
        let result = optimum(
            &synthetic_calibration(),
            &job(BulkDirection::Load, 1_000_000_000, Some(10_000_000)),
        )
        .unwrap();
        assert_eq!(result.bottleneck, BulkResource::DiskRead);
        assert_eq!(result.optimum_s, 2.0);
        assert_eq!(result.wire_bytes, 1_320_000_000);
        assert!((result.bounds[1].time_s - 0.33).abs() < 1e-12);
        assert_eq!(efficiency(&result, 8.0).unwrap(), 0.25);
    }

    #[test]
    fn dump_is_bound_by_disk_write() {
        // Disk write 4e9 / 250e6 = 16 s.
        let result = optimum(
            &synthetic_calibration(),
            &job(BulkDirection::Dump, 4_000_000_000, None),
        )
        .unwrap();
        assert_eq!(result.bottleneck, BulkResource::DiskWrite);
        assert_eq!(result.optimum_s, 16.0);
        assert!(result.wire_note.contains("lower bound"));
    }

    #[test]
    fn given_wire_bytes_win_and_can_make_loopback_the_bottleneck() {
        let mut calibration = synthetic_calibration();
        calibration.disk.seq_read_bytes_per_sec = 50e9;
        let given = BulkJob {
            wire_bytes: Some(8_000_000_000),
            ..job(BulkDirection::Load, 1_000_000_000, Some(1))
        };
        let result = optimum(&calibration, &given).unwrap();
        assert_eq!(result.bottleneck, BulkResource::Loopback);
        assert_eq!(result.optimum_s, 2.0);
        assert_eq!(result.wire_note, "given");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        assert!(optimum(&synthetic_calibration(), &job(BulkDirection::Load, 0, None)).is_err());
        let mut calibration = synthetic_calibration();
        calibration.disk.seq_write_bytes_per_sec = 0.0;
        let error = optimum(&calibration, &job(BulkDirection::Dump, 1, None)).unwrap_err();
        assert!(error.to_string().contains("disk write"), "{error}");
        let fine = optimum(&synthetic_calibration(), &job(BulkDirection::Load, 1, None)).unwrap();
        assert!(efficiency(&fine, -1.0).is_err());
    }

    #[test]
    #[should_panic(expected = "an optimum is a positive time")]
    fn efficiency_against_a_zero_optimum_panics() {
        let mut result = optimum(
            &synthetic_calibration(),
            &job(BulkDirection::Load, 1_000, None),
        )
        .unwrap();
        result.optimum_s = 0.0;
        let _ = efficiency(&result, 1.0);
    }
}
