//! The ceiling of a key-value workload on this machine, from its calibration.
//!
//! A request/response server cannot beat, per second:
//! - the null server's request rate at the same transport, protocol, pipeline depth and connections (it
//!   does nothing but frame requests and answer them);
//! - the loopback stream bandwidth divided by the wire bytes of one operation (request + reply);
//! - the memory copy bandwidth divided by the bytes the server must copy per operation (the value from the
//!   store into the reply for a GET; key and value from the request into the store for a SET).
//!
//! The ceiling is the smallest of these; efficiency = measured / ceiling. Like the paper's model this
//! ignores CPU work beyond what the null server already pays, and a GET is assumed to hit.
use crate::calibrate::{Calibration, NullServerPoint, Transport};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvOp {
    Get,
    Set,
}

/// The wire protocol: RESP (Redis) or memcached text. Named as the null-server probes name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvProtocol {
    Resp,
    Memcache,
}

impl KvProtocol {
    pub fn name(self) -> &'static str {
        match self {
            KvProtocol::Resp => "resp",
            KvProtocol::Memcache => "memcache",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvWorkload {
    pub op: KvOp,
    pub protocol: KvProtocol,
    pub transport: Transport,
    pub pipeline: usize,
    pub connections: usize,
    pub key_bytes: u64,
    pub value_bytes: u64,
}

/// Exact bytes on the wire for one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireBytes {
    pub request_bytes: u64,
    pub reply_bytes: u64,
}

impl WireBytes {
    pub fn total(self) -> u64 {
        self.request_bytes + self.reply_bytes
    }
}

/// How the null-server rate was found in the calibration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NullMatch {
    /// Measured at exactly this pipeline and connection count.
    Exact,
    /// Between two measured pipeline depths at the same connection count, linear in log(pipeline).
    Interpolated {
        lower_pipeline: usize,
        upper_pipeline: usize,
    },
    /// Not measured here: the closest measured point (in log pipeline + log connections) stands in.
    Nearest { pipeline: usize, connections: usize },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NullRate {
    pub requests_per_sec: f64,
    pub how: NullMatch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvResource {
    NullServer,
    Loopback,
    Memory,
}

impl KvResource {
    pub fn name(self) -> &'static str {
        match self {
            KvResource::NullServer => "null server",
            KvResource::Loopback => "loopback",
            KvResource::Memory => "memory copy",
        }
    }
}

impl KvOp {
    pub fn name(self) -> &'static str {
        match self {
            KvOp::Get => "GET",
            KvOp::Set => "SET",
        }
    }
}

/// One resource's bound on operations per second.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvBound {
    pub resource: KvResource,
    pub ops_per_sec: f64,
    /// How the bound was computed, in words.
    pub detail: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KvCeiling {
    pub workload: KvWorkload,
    pub ceiling_ops_per_sec: f64,
    pub bottleneck: KvResource,
    pub bounds: Vec<KvBound>,
    pub null_server: NullRate,
    pub wire: WireBytes,
    pub bytes_copied_per_op: u64,
}

fn decimal_digits(value: u64) -> u64 {
    value.checked_ilog10().map_or(1, |log| u64::from(log) + 1)
}

/// A RESP bulk string: `$<len>\r\n<bytes>\r\n`.
fn resp_bulk(length: u64) -> u64 {
    1 + decimal_digits(length) + 2 + length + 2
}

/// Request and reply bytes of one GET (hit) or SET. RESP: `*2\r\n$3\r\nGET\r\n$K\r\nkey\r\n` answered by
/// `$V\r\nvalue\r\n`; `*3\r\n$3\r\nSET\r\n...` answered by `+OK\r\n`. memcached text: `get key\r\n` answered
/// by `VALUE key 0 V\r\nvalue\r\nEND\r\n`; `set key 0 0 V\r\nvalue\r\n` answered by `STORED\r\n`.
pub fn wire_bytes(op: KvOp, protocol: KvProtocol, key_bytes: u64, value_bytes: u64) -> WireBytes {
    let (request_bytes, reply_bytes) = match (protocol, op) {
        (KvProtocol::Resp, KvOp::Get) => (4 + 9 + resp_bulk(key_bytes), resp_bulk(value_bytes)),
        (KvProtocol::Resp, KvOp::Set) => (4 + 9 + resp_bulk(key_bytes) + resp_bulk(value_bytes), 5),
        (KvProtocol::Memcache, KvOp::Get) => (
            4 + key_bytes + 2,
            6 + key_bytes + 3 + decimal_digits(value_bytes) + 2 + value_bytes + 2 + 5,
        ),
        (KvProtocol::Memcache, KvOp::Set) => (
            4 + key_bytes + 5 + decimal_digits(value_bytes) + 2 + value_bytes + 2,
            8,
        ),
    };
    debug_assert!(
        request_bytes > key_bytes
            && request_bytes + reply_bytes > key_bytes + value_bytes
            && (op == KvOp::Get || request_bytes > key_bytes + value_bytes),
        "framing only adds bytes: the request carries the key (and a SET's value), the reply a GET's value"
    );
    WireBytes {
        request_bytes,
        reply_bytes,
    }
}

/// Bytes the server copies between its buffers and the store: GET copies the value out, SET the key and
/// value in.
pub fn bytes_copied_per_op(op: KvOp, key_bytes: u64, value_bytes: u64) -> u64 {
    match op {
        KvOp::Get => value_bytes,
        KvOp::Set => key_bytes + value_bytes,
    }
}

/// Best measured rate per (connections, pipeline) over server thread counts, for one transport/protocol.
/// Points without a positive, finite rate (failed probes) or with no connection or pipeline are left out.
fn measured_points(
    points: &[NullServerPoint],
    transport: Transport,
    protocol: &str,
) -> Vec<(usize, usize, f64)> {
    let mut best: Vec<(usize, usize, f64)> = Vec::new();
    let usable = points
        .iter()
        .filter(|point| point.transport == transport && point.protocol == protocol)
        .filter(|point| point.connections > 0 && point.pipeline > 0);
    for point in usable {
        let Some(rate) = point
            .requests_per_sec
            .filter(|rate| rate.is_finite() && *rate > 0.0)
        else {
            continue;
        };
        match best
            .iter_mut()
            .find(|(c, p, _)| *c == point.connections && *p == point.pipeline)
        {
            Some(entry) => entry.2 = entry.2.max(rate),
            None => best.push((point.connections, point.pipeline, rate)),
        }
    }
    best
}

/// The null server's rate for these settings: exact, interpolated in log(pipeline) between two measured
/// depths at the same connection count, or else the nearest measured point.
pub fn null_server_rate(
    calibration: &Calibration,
    transport: Transport,
    protocol: KvProtocol,
    pipeline: usize,
    connections: usize,
) -> Result<NullRate> {
    assert!(
        pipeline > 0 && connections > 0,
        "a workload has at least one connection and a pipeline of at least 1: P{pipeline} C{connections}"
    );
    let rate = measured_null_rate(calibration, transport, protocol, pipeline, connections)?;
    assert!(
        rate.requests_per_sec.is_finite() && rate.requests_per_sec > 0.0,
        "a null-server rate is positive and finite: {rate:?}"
    );
    Ok(rate)
}

fn measured_null_rate(
    calibration: &Calibration,
    transport: Transport,
    protocol: KvProtocol,
    pipeline: usize,
    connections: usize,
) -> Result<NullRate> {
    let points = measured_points(&calibration.null_server, transport, protocol.name());
    if points.is_empty() {
        bail!(
            "the calibration has no null-server rate for {} over {} (all probes missing?): re-run `fallow model calibrate`",
            protocol.name(),
            transport.name()
        );
    }
    if let Some(&(_, _, rate)) = points
        .iter()
        .find(|(c, p, _)| *c == connections && *p == pipeline)
    {
        return Ok(NullRate {
            requests_per_sec: rate,
            how: NullMatch::Exact,
        });
    }
    if let Some(rate) = interpolate(&points, pipeline, connections) {
        return Ok(rate);
    }
    let distance = |c: usize, p: usize| {
        (pipeline as f64 / p as f64).ln().abs() + (connections as f64 / c as f64).ln().abs()
    };
    let &(c, p, rate) = points
        .iter()
        .min_by(|a, b| distance(a.0, a.1).total_cmp(&distance(b.0, b.1)))
        .expect("points is not empty");
    Ok(NullRate {
        requests_per_sec: rate,
        how: NullMatch::Nearest {
            pipeline: p,
            connections: c,
        },
    })
}

fn interpolate(
    points: &[(usize, usize, f64)],
    pipeline: usize,
    connections: usize,
) -> Option<NullRate> {
    let same_connections = points.iter().filter(|(c, _, _)| *c == connections);
    let below = same_connections
        .clone()
        .filter(|(_, p, _)| *p < pipeline)
        .max_by_key(|(_, p, _)| *p)?;
    let above = same_connections
        .filter(|(_, p, _)| *p > pipeline)
        .min_by_key(|(_, p, _)| *p)?;
    let position = (pipeline as f64 / below.1 as f64).ln() / (above.1 as f64 / below.1 as f64).ln();
    assert!(
        (0.0..=1.0).contains(&position),
        "an interpolated pipeline lies between the measured depths: {} < {pipeline} < {} at {position}",
        below.1,
        above.1
    );
    Some(NullRate {
        requests_per_sec: below.2 + (above.2 - below.2) * position,
        how: NullMatch::Interpolated {
            lower_pipeline: below.1,
            upper_pipeline: above.1,
        },
    })
}

/// The ceiling of `workload` on the calibrated machine.
pub fn ceiling(calibration: &Calibration, workload: &KvWorkload) -> Result<KvCeiling> {
    if workload.pipeline == 0 || workload.connections == 0 {
        bail!("pipeline and connections must be at least 1");
    }
    let null_server = null_server_rate(
        calibration,
        workload.transport,
        workload.protocol,
        workload.pipeline,
        workload.connections,
    )?;
    let wire = wire_bytes(
        workload.op,
        workload.protocol,
        workload.key_bytes,
        workload.value_bytes,
    );
    let loopback_bytes_per_sec = calibration
        .loopback
        .stream_bytes_per_sec(workload.transport);
    let memcpy_bytes_per_sec = calibration.memory.memcpy_bytes_per_sec();
    let copied = bytes_copied_per_op(workload.op, workload.key_bytes, workload.value_bytes);
    let bounds = vec![
        KvBound {
            resource: KvResource::NullServer,
            ops_per_sec: null_server.requests_per_sec,
            detail: describe_null(&null_server, workload),
        },
        KvBound {
            resource: KvResource::Loopback,
            ops_per_sec: loopback_bytes_per_sec / wire.total() as f64,
            detail: format!(
                "{:.0} MB/s {} stream / {} wire bytes per op ({} request + {} reply)",
                loopback_bytes_per_sec / 1e6,
                workload.transport.name(),
                wire.total(),
                wire.request_bytes,
                wire.reply_bytes
            ),
        },
        KvBound {
            resource: KvResource::Memory,
            ops_per_sec: if copied == 0 {
                f64::INFINITY
            } else {
                memcpy_bytes_per_sec / copied as f64
            },
            detail: format!(
                "{:.0} MB/s memcpy / {copied} bytes copied per op",
                memcpy_bytes_per_sec / 1e6
            ),
        },
    ];
    for bound in &bounds {
        if bound.ops_per_sec.is_nan() || bound.ops_per_sec <= 0.0 {
            bail!(
                "the calibration's {} figure gives no positive bound ({} ops/s): re-run `fallow model calibrate`",
                bound.resource.name(),
                bound.ops_per_sec
            );
        }
    }
    let lowest = bounds
        .iter()
        .min_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
        .expect("three bounds");
    // the null server's bound is finite, so the lowest is
    assert!(
        lowest.ops_per_sec.is_finite() && lowest.ops_per_sec > 0.0,
        "a ceiling is a positive, finite rate: {} ops/s",
        lowest.ops_per_sec
    );
    Ok(KvCeiling {
        workload: workload.clone(),
        ceiling_ops_per_sec: lowest.ops_per_sec,
        bottleneck: lowest.resource,
        bounds,
        null_server,
        wire,
        bytes_copied_per_op: copied,
    })
}

fn describe_null(rate: &NullRate, workload: &KvWorkload) -> String {
    let settings = format!(
        "{} over {}, pipeline {}, {} connections",
        workload.protocol.name(),
        workload.transport.name(),
        workload.pipeline,
        workload.connections
    );
    match &rate.how {
        NullMatch::Exact => format!("null server measured at {settings}"),
        NullMatch::Interpolated { lower_pipeline, upper_pipeline } => format!(
            "null server INTERPOLATED for {settings} between measured pipelines {lower_pipeline} and {upper_pipeline}"
        ),
        NullMatch::Nearest { pipeline, connections } => format!(
            "null server not measured at {settings}: NEAREST measured point (pipeline {pipeline}, {connections} connections) used"
        ),
    }
}

/// measured / ceiling.
pub fn efficiency(ceiling: &KvCeiling, measured_ops_per_sec: f64) -> Result<f64> {
    assert!(
        ceiling.ceiling_ops_per_sec.is_finite() && ceiling.ceiling_ops_per_sec > 0.0,
        "a ceiling is a positive, finite rate: {} ops/s",
        ceiling.ceiling_ops_per_sec
    );
    if !(measured_ops_per_sec.is_finite() && measured_ops_per_sec > 0.0) {
        bail!("the measured rate must be a positive number of operations per second, got {measured_ops_per_sec}");
    }
    Ok(measured_ops_per_sec / ceiling.ceiling_ops_per_sec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::synthetic_calibration;

    fn resp_get(key: &[u8]) -> Vec<u8> {
        let mut frame = format!("*2\r\n$3\r\nGET\r\n${}\r\n", key.len()).into_bytes();
        frame.extend_from_slice(key);
        frame.extend_from_slice(b"\r\n");
        frame
    }

    #[test]
    fn wire_bytes_are_exact() {
        // Counted by hand: "*2\r\n$3\r\nGET\r\n$10\r\n" is 18 bytes, + 10 key + 2 = 30; "$32\r\n" + 32 + 2 = 39.
        assert_eq!(
            wire_bytes(KvOp::Get, KvProtocol::Resp, 10, 32),
            WireBytes {
                request_bytes: 30,
                reply_bytes: 39
            }
        );
        // SET: 30 - 0 + "$32\r\n" + 32 + "\r\n" = 30 + 39 = 69; "+OK\r\n" = 5.
        assert_eq!(
            wire_bytes(KvOp::Set, KvProtocol::Resp, 10, 32),
            WireBytes {
                request_bytes: 69,
                reply_bytes: 5
            }
        );
        // "get " + 10 + "\r\n" = 16; "VALUE " + 10 + " 0 32\r\n" + 32 + "\r\nEND\r\n" = 6+10+5+2+32+2+5 = 62.
        assert_eq!(
            wire_bytes(KvOp::Get, KvProtocol::Memcache, 10, 32),
            WireBytes {
                request_bytes: 16,
                reply_bytes: 62
            }
        );
        // "set " + 10 + " 0 0 32\r\n" + 32 + "\r\n" = 4+10+5+2+2+32+2 = 57; "STORED\r\n" = 8.
        assert_eq!(
            wire_bytes(KvOp::Set, KvProtocol::Memcache, 10, 32),
            WireBytes {
                request_bytes: 57,
                reply_bytes: 8
            }
        );
    }

    #[test]
    fn wire_bytes_match_real_frames() {
        for key_len in [1usize, 9, 10, 99, 100, 12345] {
            let key = vec![b'k'; key_len];
            assert_eq!(
                wire_bytes(KvOp::Get, KvProtocol::Resp, key_len as u64, 0).request_bytes,
                resp_get(&key).len() as u64
            );
            let memcache = format!(
                "set {} 0 0 {key_len}\r\n{}\r\n",
                "k".repeat(key_len),
                "v".repeat(key_len)
            );
            assert_eq!(
                wire_bytes(
                    KvOp::Set,
                    KvProtocol::Memcache,
                    key_len as u64,
                    key_len as u64
                )
                .request_bytes,
                memcache.len() as u64
            );
        }
        assert_eq!(
            wire_bytes(KvOp::Get, KvProtocol::Resp, 3, 0).reply_bytes,
            "$0\r\n\r\n".len() as u64
        );
    }

    fn workload(op: KvOp, pipeline: usize, value_bytes: u64) -> KvWorkload {
        KvWorkload {
            op,
            protocol: KvProtocol::Resp,
            transport: Transport::Tcp,
            pipeline,
            connections: 50,
            key_bytes: 10,
            value_bytes,
        }
    }

    #[test]
    fn small_gets_are_bound_by_the_null_server() {
        let result = ceiling(&synthetic_calibration(), &workload(KvOp::Get, 1, 32)).unwrap();
        // Best of 1 and 2 server threads at P1: 150k. Loopback 4e9 / 69 = 58M, memory 10e9 / 32 = 312M.
        assert_eq!(result.bottleneck, KvResource::NullServer);
        assert_eq!(result.ceiling_ops_per_sec, 150e3);
        assert_eq!(result.null_server.how, NullMatch::Exact);
        assert!((efficiency(&result, 127.5e3).unwrap() - 0.85).abs() < 1e-12);
    }

    #[test]
    fn large_values_are_bound_by_loopback() {
        // 1 MB GET: 4e9 / (30 + 1_000_012) = 3999.8 ops/s < memory 10e9 / 1e6 = 10000 < null 1.2M.
        let result = ceiling(
            &synthetic_calibration(),
            &workload(KvOp::Get, 16, 1_000_000),
        )
        .unwrap();
        assert_eq!(result.bottleneck, KvResource::Loopback);
        assert_eq!(result.wire.total(), 30 + 1 + 7 + 2 + 1_000_000 + 2);
        assert!((result.ceiling_ops_per_sec - 4e9 / 1_000_042.0).abs() < 1e-6);
    }

    #[test]
    fn memory_binds_when_loopback_is_fast() {
        let mut calibration = synthetic_calibration();
        calibration.loopback.tcp_stream_bytes_per_sec = 100e9;
        let result = ceiling(&calibration, &workload(KvOp::Set, 16, 1_000_000)).unwrap();
        assert_eq!(result.bottleneck, KvResource::Memory);
        assert_eq!(result.bytes_copied_per_op, 1_000_010);
        assert!((result.ceiling_ops_per_sec - 10e9 / 1_000_010.0).abs() < 1e-6);
    }

    #[test]
    fn pipeline_between_measured_depths_is_interpolated_in_log() {
        // P4 is halfway between P1 and P16 in log2: 150k + (1.2M - 150k) / 2 = 675k.
        let rate = null_server_rate(
            &synthetic_calibration(),
            Transport::Tcp,
            KvProtocol::Resp,
            4,
            50,
        )
        .unwrap();
        assert_eq!(
            rate.how,
            NullMatch::Interpolated {
                lower_pipeline: 1,
                upper_pipeline: 16
            }
        );
        assert!((rate.requests_per_sec - 675e3).abs() < 1e-6);
    }

    #[test]
    fn unmeasured_settings_use_the_nearest_point_and_say_so() {
        let calibration = synthetic_calibration();
        let deep =
            null_server_rate(&calibration, Transport::Tcp, KvProtocol::Resp, 64, 50).unwrap();
        assert_eq!(
            deep.how,
            NullMatch::Nearest {
                pipeline: 16,
                connections: 50
            }
        );
        // Unix P16 failed in the calibration; the nearest usable Unix point is P1.
        let unix = ceiling(
            &calibration,
            &KvWorkload {
                transport: Transport::Unix,
                ..workload(KvOp::Get, 16, 32)
            },
        )
        .unwrap();
        assert_eq!(
            unix.null_server.how,
            NullMatch::Nearest {
                pipeline: 1,
                connections: 50
            }
        );
        assert!(unix.bounds[0].detail.contains("NEAREST"));
    }

    #[test]
    fn missing_null_server_figures_are_a_clear_error() {
        let mut calibration = synthetic_calibration();
        calibration
            .null_server
            .retain(|point| point.protocol != "memcache");
        let memcache = KvWorkload {
            protocol: KvProtocol::Memcache,
            ..workload(KvOp::Get, 1, 32)
        };
        let error = ceiling(&calibration, &memcache).unwrap_err().to_string();
        assert!(
            error.contains("no null-server rate for memcache"),
            "{error}"
        );
        let zero = ceiling(&synthetic_calibration(), &workload(KvOp::Get, 0, 32)).unwrap_err();
        assert!(zero.to_string().contains("pipeline"));
    }

    #[test]
    fn a_calibration_without_bandwidth_is_a_clear_error() {
        let mut calibration = synthetic_calibration();
        calibration.loopback.tcp_stream_bytes_per_sec = 0.0;
        let error = ceiling(&calibration, &workload(KvOp::Get, 1, 32)).unwrap_err();
        assert!(error.to_string().contains("loopback"), "{error}");
    }

    #[test]
    fn points_without_connections_or_pipeline_are_left_out() {
        let mut calibration = synthetic_calibration();
        for point in &mut calibration.null_server {
            if point.pipeline == 1 {
                point.pipeline = 0;
            }
        }
        // only the P16 points are left: P4 takes the nearest, not an interpolation from P0
        let rate = null_server_rate(&calibration, Transport::Tcp, KvProtocol::Resp, 4, 50).unwrap();
        assert_eq!(
            rate.how,
            NullMatch::Nearest {
                pipeline: 16,
                connections: 50
            }
        );
        assert_eq!(rate.requests_per_sec, 1.2e6);
    }

    #[test]
    #[should_panic(
        expected = "a workload has at least one connection and a pipeline of at least 1"
    )]
    fn a_null_rate_for_no_pipeline_panics() {
        let _ = null_server_rate(
            &synthetic_calibration(),
            Transport::Tcp,
            KvProtocol::Resp,
            0,
            50,
        );
    }

    #[test]
    #[should_panic(expected = "a ceiling is a positive, finite rate")]
    fn efficiency_against_a_zero_ceiling_panics() {
        let mut result = ceiling(&synthetic_calibration(), &workload(KvOp::Get, 1, 32)).unwrap();
        result.ceiling_ops_per_sec = 0.0;
        let _ = efficiency(&result, 1000.0);
    }
}
