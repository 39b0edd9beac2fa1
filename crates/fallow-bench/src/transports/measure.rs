//! The measurements: round trips (item 1), throughput over connections and pipeline depth (item 2), large
//! values (item 3) and the spin policy's idle cost. Transports take turns inside every round or cell so
//! a noisy neighbour on the shared machine hits them alike.
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;

use super::servers::{self_cpu_seconds, Spawned};
use super::wire::{request, ClientSpin, Conn, Reply, Transport};
use fallow_shm::SpinPolicy;

/// Longest round trip the histograms hold (a minute, in nanoseconds).
const LATENCY_NS_MAX: u64 = 60_000_000_000;

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid histogram bounds")
}

/// GET or SET.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Get,
    Set,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Set => "SET",
        }
    }

    /// The request for `key` (SET carries `value`).
    pub fn request(self, key: &[u8], value: &[u8]) -> Vec<u8> {
        match self {
            Op::Get => request(&[b"GET", key]),
            Op::Set => request(&[b"SET", key, value]),
        }
    }

    /// The reply a correct server gives.
    pub fn expected(self, value_bytes: usize) -> Reply {
        match self {
            Op::Get => Reply::Bulk(value_bytes),
            Op::Set => Reply::Status,
        }
    }

    /// The reply bytes (for the ring echo, which answers like a server would).
    pub fn reply_bytes(self, value: &[u8]) -> Vec<u8> {
        match self {
            Op::Get => {
                let mut out = format!("${}\r\n", value.len()).into_bytes();
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
                out
            }
            Op::Set => b"+OK\r\n".to_vec(),
        }
    }
}

/// Where a transport's connections go.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub tcp_addr: String,
    pub socket: std::path::PathBuf,
    pub spin: SpinPolicy,
    /// Ring bytes asked with SHM.OPEN; None takes the server's.
    pub ring_bytes: Option<usize>,
    pub client_spin: ClientSpin,
}

impl Endpoints {
    pub fn of(
        server: &Spawned,
        spin: SpinPolicy,
        ring_bytes: Option<usize>,
        client_spin: ClientSpin,
    ) -> Endpoints {
        Endpoints {
            tcp_addr: server.tcp_addr(),
            socket: server.socket.clone(),
            spin,
            ring_bytes,
            client_spin,
        }
    }

    pub fn connect(&self, transport: Transport) -> anyhow::Result<Conn> {
        match transport {
            Transport::Tcp => Conn::tcp(&self.tcp_addr),
            Transport::Unix => Conn::unix(&self.socket),
            Transport::Shm | Transport::Ring => {
                Conn::shm(&self.socket, self.ring_bytes, self.spin, self.client_spin)
            }
        }
    }
}

/// Sends `request` and checks the reply is `expected`.
fn round_trip(conn: &mut Conn, request: &[u8], expected: &Reply) -> anyhow::Result<()> {
    conn.send(request)?;
    let reply = conn.read_reply()?;
    if reply != *expected {
        bail!("expected {expected:?}, got {reply:?}");
    }
    Ok(())
}

/// `count` timed round trips into `histogram`.
pub fn timed_round_trips(
    conn: &mut Conn,
    request: &[u8],
    expected: &Reply,
    count: usize,
    histogram: &mut Histogram<u64>,
) -> anyhow::Result<()> {
    for _ in 0..count {
        let started = Instant::now();
        round_trip(conn, request, expected)?;
        let ns = started.elapsed().as_nanos() as u64;
        histogram.record(ns.clamp(1, LATENCY_NS_MAX))?;
    }
    Ok(())
}

/// `order` turned left by `by`: each round or cell starts with another transport.
pub fn rotated<T: Copy>(order: &[T], by: usize) -> Vec<T> {
    let mut out = order.to_vec();
    if !out.is_empty() {
        let n = out.len();
        out.rotate_left(by % n);
    }
    out
}

/// One throughput cell's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThroughputCell {
    pub placement: super::Placement,
    pub transport: Transport,
    pub connections: usize,
    pub pipeline: usize,
    pub client_threads: usize,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    /// fallow's CPU (user + system) per operation, from /proc (10 ms ticks over the cell).
    pub server_cpu_us_per_op: Option<f64>,
    /// This process's CPU per operation, from getrusage (all client threads).
    pub client_cpu_us_per_op: f64,
}

/// One client thread's closed loop over its connections: `pipeline` GETs on each, then every reply.
fn drive(
    conns: &mut [Conn],
    request: &[u8],
    expected: &Reply,
    pipeline: usize,
    deadline: Instant,
) -> anyhow::Result<u64> {
    let batch: Vec<u8> = request.repeat(pipeline);
    let mut ops = 0u64;
    while Instant::now() < deadline {
        for conn in conns.iter_mut() {
            conn.send(&batch)?;
        }
        for conn in conns.iter_mut() {
            for _ in 0..pipeline {
                let reply = conn.read_reply()?;
                if reply != *expected {
                    bail!("expected {expected:?}, got {reply:?}");
                }
            }
        }
        ops += (conns.len() * pipeline) as u64;
    }
    Ok(ops)
}

/// Runs GETs of `key` over `connections` connections of `transport` for `seconds`.
#[allow(clippy::too_many_arguments)]
pub fn throughput_cell(
    endpoints: &Endpoints,
    server: &Spawned,
    transport: Transport,
    connections: usize,
    pipeline: usize,
    client_threads: usize,
    key: &[u8],
    value_bytes: usize,
    seconds: f64,
) -> anyhow::Result<ThroughputCell> {
    assert!(connections > 0 && pipeline > 0 && client_threads > 0);
    let threads = client_threads.min(connections);
    let mut groups: Vec<Vec<Conn>> = (0..threads).map(|_| Vec::new()).collect();
    for i in 0..connections {
        let conn = endpoints
            .connect(transport)
            .with_context(|| format!("connection {i} of {connections}"))?;
        groups[i % threads].push(conn);
    }
    let request = Op::Get.request(key, &[]);
    let expected = Op::Get.expected(value_bytes);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let duration = Duration::from_secs_f64(seconds);
    let handles: Vec<_> = groups
        .into_iter()
        .map(|mut conns| {
            let (barrier, request, expected) = (barrier.clone(), request.clone(), expected.clone());
            std::thread::spawn(move || -> anyhow::Result<u64> {
                barrier.wait();
                let deadline = Instant::now() + duration;
                drive(&mut conns, &request, &expected, pipeline, deadline)
            })
        })
        .collect();
    let (server_cpu_start, client_cpu_start) = (server.cpu_seconds(), self_cpu_seconds());
    let started = Instant::now();
    barrier.wait();
    let mut ops = 0;
    for handle in handles {
        ops += handle
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let client_cpu_s = self_cpu_seconds() - client_cpu_start;
    let server_cpu_s = server
        .cpu_seconds()
        .zip(server_cpu_start)
        .map(|(b, a)| b - a);
    let per_op_us = |cpu_s: f64| cpu_s * 1e6 / ops.max(1) as f64;
    Ok(ThroughputCell {
        placement: super::Placement::Free,
        transport,
        connections,
        pipeline,
        client_threads: threads,
        ops,
        seconds: elapsed_s,
        ops_per_s: ops as f64 / elapsed_s,
        server_cpu_us_per_op: server_cpu_s.map(per_op_us),
        client_cpu_us_per_op: per_op_us(client_cpu_s),
    })
}

/// A large-value cell: one connection, back-to-back round trips of one size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LargeCell {
    pub transport: Transport,
    pub op: Op,
    pub value_bytes: usize,
    pub ops: u64,
    pub seconds: f64,
    /// Value bytes moved per second (the value's bytes only, one direction).
    pub bytes_per_s: f64,
    /// bytes_per_s over the calibrated memcpy bandwidth (None without a calibration).
    pub memcpy_efficiency: Option<f64>,
}

/// Round trips of `op` with a `value`-sized value for at least `seconds` (and at least 3 of them).
pub fn large_cell(
    conn: &mut Conn,
    transport: Transport,
    op: Op,
    key: &[u8],
    value: &[u8],
    seconds: f64,
    memcpy_bytes_per_s: Option<f64>,
) -> anyhow::Result<LargeCell> {
    let request = op.request(key, value);
    let expected = op.expected(value.len());
    let started = Instant::now();
    let mut ops = 0u64;
    while ops < 3 || started.elapsed().as_secs_f64() < seconds {
        round_trip(conn, &request, &expected)?;
        ops += 1;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let bytes_per_s = (value.len() as u64 * ops) as f64 / elapsed_s;
    Ok(LargeCell {
        transport,
        op,
        value_bytes: value.len(),
        ops,
        seconds: elapsed_s,
        bytes_per_s,
        memcpy_efficiency: memcpy_bytes_per_s.map(|m| bytes_per_s / m),
    })
}

/// The spin policy's cost at one `shm-spin-us`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SpinCost {
    pub spin_us: u64,
    /// fallow's CPU with one channel open and idle, as a fraction of one core.
    pub idle_server_cores: Option<f64>,
    /// The same fallow with no client at all (the server's own background work).
    pub no_client_server_cores: Option<f64>,
    /// One GET every `sparse_interval_us` on the channel: fallow's CPU per request.
    pub sparse_server_cpu_us_per_op: Option<f64>,
    /// The client's CPU per request in that loop (it spins the same budget waiting for each reply).
    pub sparse_client_cpu_us_per_op: f64,
    pub sparse_interval_us: u64,
    pub sparse_ops: u64,
    pub seconds: f64,
}

/// Measures `server` (started with `--shm-spin-us spin_us`): no client, an idle channel, sparse GETs.
pub fn spin_cost(
    server: &Spawned,
    spin_us: u64,
    key: &[u8],
    value_bytes: usize,
    seconds: f64,
    sparse_interval: Duration,
    client_spin: ClientSpin,
) -> anyhow::Result<SpinCost> {
    let cores = |f: &dyn Fn() -> anyhow::Result<()>| -> anyhow::Result<Option<f64>> {
        let start = server.cpu_seconds();
        let started = Instant::now();
        f()?;
        let elapsed_s = started.elapsed().as_secs_f64();
        Ok(server
            .cpu_seconds()
            .zip(start)
            .map(|(b, a)| (b - a) / elapsed_s))
    };
    let no_client_server_cores = cores(&|| {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        Ok(())
    })?;
    let spin = SpinPolicy {
        spin_ns: spin_us * 1000,
    };
    let mut conn = Conn::shm(&server.socket, None, spin, client_spin)?;
    let request = Op::Get.request(key, &[]);
    let expected = Op::Get.expected(value_bytes);
    round_trip(&mut conn, &request, &expected)?;
    let idle_server_cores = cores(&|| {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        Ok(())
    })?;
    let (server_start, client_start) = (server.cpu_seconds(), self_cpu_seconds());
    let started = Instant::now();
    let mut sparse_ops = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        round_trip(&mut conn, &request, &expected)?;
        sparse_ops += 1;
        std::thread::sleep(sparse_interval);
    }
    let client_cpu_s = self_cpu_seconds() - client_start;
    let server_cpu_s = server.cpu_seconds().zip(server_start).map(|(b, a)| b - a);
    let per_op_us = |cpu_s: f64| cpu_s * 1e6 / sparse_ops.max(1) as f64;
    Ok(SpinCost {
        spin_us,
        idle_server_cores,
        no_client_server_cores,
        sparse_server_cpu_us_per_op: server_cpu_s.map(per_op_us),
        sparse_client_cpu_us_per_op: per_op_us(client_cpu_s),
        sparse_interval_us: sparse_interval.as_micros() as u64,
        sparse_ops,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_starts_each_round_elsewhere() {
        let order = [1, 2, 3];
        assert_eq!(rotated(&order, 0), vec![1, 2, 3]);
        assert_eq!(rotated(&order, 1), vec![2, 3, 1]);
        assert_eq!(rotated(&order, 4), vec![2, 3, 1]);
    }

    #[test]
    fn echo_replies_are_what_a_server_sends() {
        let value = b"abc";
        let get = Op::Get.reply_bytes(value);
        let (reply, used) = super::super::wire::parse_reply(&get).unwrap().unwrap();
        assert_eq!((reply, used), (Op::Get.expected(3), get.len()));
        let set = Op::Set.reply_bytes(value);
        let (reply, _) = super::super::wire::parse_reply(&set).unwrap().unwrap();
        assert_eq!(reply, Op::Set.expected(3));
    }
}
