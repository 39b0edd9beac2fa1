//! fallow's own cost of a GET, in process: no socket, no ring, no event loop. What is timed, per GET:
//! parsing the request bytes with `fallow_proto::parse_request` (as a connection does), then
//! `fallow_server::command::dispatch::execute` on an in-process `Server` (command lookup, ACL and arity
//! checks, the shard lock, the store's lookup of a 64-byte string value, the bulk reply written into a
//! `ReplyWriter`, the statistics every command updates). The mean of a batch, best of several batches.
use std::time::Instant;

use anyhow::bail;
use fallow_proto::{parse_request, Parsed, ReplyWriter, RespLimits};
use fallow_server::clients::ClientKind;
use fallow_server::command::dispatch::execute;
use fallow_server::config::Config;
use fallow_server::connection::ConnState;
use fallow_server::server::Server;

use super::wire::request;

/// Batches timed, alternating the two measurements; the fastest mean of each is kept (the machine is
/// shared and noisy: short batches make one that no other process interrupted likely).
const BATCHES: usize = 40;

/// The in-process cost of one GET of a `value_bytes` value, in nanoseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct InprocCost {
    /// Parse + dispatch + reply, as described in the module comment.
    pub get_ns: f64,
    /// The same without the parse: `execute` on pre-split arguments.
    pub get_dispatch_only_ns: f64,
    /// GETs per batch (of each measurement).
    pub iterations_per_batch: usize,
    pub batches: usize,
}

fn one_call(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    bytes: &[u8],
    args: &mut Vec<std::ops::Range<usize>>,
    limits: &RespLimits,
) {
    let Parsed::Multibulk { consumed } = parse_request(bytes, limits, args) else {
        unreachable!("a well-formed request parses");
    };
    debug_assert_eq!(consumed, bytes.len());
    let refs: [&[u8]; 2] = [&bytes[args[0].clone()], &bytes[args[1].clone()]];
    out.buf.clear();
    execute(server, conn, out, &refs);
}

/// Times GET on an in-process server holding `key` with a `value_bytes` value.
pub fn measure(value_bytes: usize, iterations: usize) -> anyhow::Result<InprocCost> {
    let iterations_per_batch = (iterations / BATCHES).max(1);
    // As `fallow` shards by default: four per worker thread (one per core), at most 64.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let server = Server::new(Config {
        threads: cores,
        shards: (4 * cores).min(64),
        ..Config::default()
    });
    let Some(handle) = server.register_client(ClientKind::Resp, "bench".into(), "bench".into())
    else {
        bail!("the in-process server has no room for a client");
    };
    let (sender, _receiver) = tokio::sync::mpsc::channel(1);
    let mut conn = ConnState::new(handle, true, sender);
    let mut out = ReplyWriter::new(false);
    let key = b"bench:inproc";
    let value = vec![b'v'; value_bytes];
    execute(&server, &mut conn, &mut out, &[b"SET", key, &value]);
    if out.buf != b"+OK\r\n" {
        bail!("in-process SET: {:?}", String::from_utf8_lossy(&out.buf));
    }
    let bytes = request(&[b"GET", key]);
    let limits = RespLimits::default();
    let mut args = Vec::new();
    let mut get_ns = f64::INFINITY;
    let mut dispatch_ns = f64::INFINITY;
    for _ in 0..BATCHES {
        let started = Instant::now();
        for _ in 0..iterations_per_batch {
            one_call(&server, &mut conn, &mut out, &bytes, &mut args, &limits);
        }
        get_ns = get_ns.min(started.elapsed().as_nanos() as f64 / iterations_per_batch as f64);
        let started = Instant::now();
        for _ in 0..iterations_per_batch {
            out.buf.clear();
            execute(&server, &mut conn, &mut out, &[b"GET", key]);
        }
        dispatch_ns =
            dispatch_ns.min(started.elapsed().as_nanos() as f64 / iterations_per_batch as f64);
    }
    if out.buf.len() != value_bytes + format!("${value_bytes}\r\n\r\n").len() {
        bail!("in-process GET: {:?}", String::from_utf8_lossy(&out.buf));
    }
    Ok(InprocCost {
        get_ns,
        get_dispatch_only_ns: dispatch_ns,
        iterations_per_batch,
        batches: BATCHES,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_in_process_get_costs_something_finite() {
        let cost = super::measure(64, 4000).unwrap();
        assert!(cost.get_ns > 0.0 && cost.get_ns.is_finite(), "{cost:?}");
        assert!(cost.get_dispatch_only_ns > 0.0 && cost.get_dispatch_only_ns.is_finite());
    }
}
