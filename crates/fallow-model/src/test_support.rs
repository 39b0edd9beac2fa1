//! A calibration with round numbers, so ceilings can be checked by hand.
use crate::calibrate::{
    CacheDrop, Calibration, DiskCalibration, LoopbackCalibration, MachineInfo, MemoryCalibration,
    NullServerPoint, Transport, CALIBRATION_VERSION,
};

fn point(
    transport: Transport,
    protocol: &str,
    pipeline: usize,
    threads: usize,
    rate: Option<f64>,
) -> NullServerPoint {
    NullServerPoint {
        transport,
        protocol: protocol.to_string(),
        connections: 50,
        pipeline,
        server_threads: threads,
        requests_per_sec: rate,
        error: rate.is_none().then(|| "probe failed".to_string()),
    }
}

/// memcpy 10 GB/s (STREAM copy 20 GB/s), disk read 500 MB/s and write 250 MB/s, TCP 4 GB/s, Unix 8 GB/s;
/// null server (C50): TCP RESP P1 150k (2 threads; 100k on 1), P16 1.2M; Unix RESP P1 200k, P16 missing;
/// TCP memcache P1 90k.
pub fn synthetic_calibration() -> Calibration {
    Calibration {
        version: CALIBRATION_VERSION,
        machine: MachineInfo {
            hostname: "test".to_string(),
            kernel: "6.0".to_string(),
            cpus: 2,
            cpu_model: "synthetic".to_string(),
            mem_total_bytes: 1 << 34,
            date_utc: "2026-01-01T00:00:00Z".to_string(),
        },
        memory: MemoryCalibration {
            copy_bytes_per_sec: 20e9,
            triad_bytes_per_sec: 21e9,
            array_bytes: 128 << 20,
            llc_bytes: 32 << 20,
            trials: 10,
            threads: 2,
            copy_single_thread_bytes_per_sec: 15e9,
            triad_single_thread_bytes_per_sec: 16e9,
            copy_all_threads_bytes_per_sec: 20e9,
            triad_all_threads_bytes_per_sec: 21e9,
            note: String::new(),
        },
        disk: DiskCalibration {
            dir: "/tmp".to_string(),
            file_bytes: 1 << 30,
            block_bytes: 8 << 20,
            seq_read_bytes_per_sec: 500e6,
            seq_write_bytes_per_sec: 250e6,
            cache_drop: CacheDrop::FadviseDontneed,
            resident_fraction_before_read: Some(0.0),
            note: String::new(),
        },
        loopback: LoopbackCalibration {
            tcp_stream_bytes_per_sec: 4e9,
            unix_stream_bytes_per_sec: 8e9,
            write_bytes: 1 << 20,
            duration_ms: 2000,
            trials: 3,
        },
        null_server: vec![
            point(Transport::Tcp, "resp", 1, 1, Some(100e3)),
            point(Transport::Tcp, "resp", 1, 2, Some(150e3)),
            point(Transport::Tcp, "resp", 16, 1, Some(800e3)),
            point(Transport::Tcp, "resp", 16, 2, Some(1.2e6)),
            point(Transport::Unix, "resp", 1, 1, Some(200e3)),
            point(Transport::Unix, "resp", 16, 1, None),
            point(Transport::Tcp, "memcache", 1, 1, Some(90e3)),
        ],
    }
}
