//! The load generator against the in-process null server: both protocols, TCP and Unix sockets, closed
//! and open loop.
use std::io::{Read, Write};
use std::time::Duration;

use fallow_bench::nullserver::{NullProtocol, NullServer, NullServerArgs};
use fallow_bench::options::{HumanDuration, Protocol, Ratio, ServerAddr};
use fallow_bench::{run, RunOptions, RunResults};

fn unix_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "fallow-bench-test-{}-{name}.sock",
        std::process::id()
    ))
}

fn server(protocol: NullProtocol, unix: Option<&str>) -> NullServer {
    NullServer::start(&NullServerArgs {
        unix: unix.map(unix_path),
        protocol,
        threads: 2,
        ..NullServerArgs::default()
    })
    .expect("null server starts")
}

fn options(server: &NullServer, protocol: Protocol) -> RunOptions {
    let mut o = RunOptions::defaults();
    o.server = server.addr().clone();
    o.protocol = protocol;
    o.threads = 2;
    o.connections = 3;
    o.keys = 1000;
    o.quiet = true;
    o
}

/// Checks what holds for every clean run: no errors, answered requests split into GETs and SETs, and
/// ordered latency figures.
fn assert_sane(results: &RunResults) {
    assert_eq!(results.errors, 0, "{results:?}");
    assert_eq!(results.connections_dropped, 0);
    assert_eq!(results.requests, results.gets + results.sets);
    assert!(results.duration_s > 0.0);
    assert!(results.ops_per_sec > 0.0);
    let l = &results.latency_us;
    assert!(l.p50 > 0.0, "{l:?}");
    assert!(
        l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max,
        "{l:?}"
    );
    assert!(l.mean > 0.0 && l.mean <= l.max);
    assert!(results.bytes_sent > 0 && results.bytes_received > 0);
}

fn closed_loop(protocol: NullProtocol, client: Protocol, unix: Option<&str>) -> RunResults {
    let server = server(protocol, unix);
    let mut o = options(&server, client);
    o.requests = Some(3000);
    o.pipeline = 8;
    o.ratio = Ratio { sets: 1, gets: 2 };
    o.value_size = "10-100".parse().unwrap();
    let results = run(&o).expect("run");
    assert_sane(&results);
    assert_eq!(results.requests, 3000);
    results
}

#[test]
fn resp_closed_loop_over_tcp_answers_every_request() {
    let results = closed_loop(NullProtocol::Resp, Protocol::Resp2, None);
    // +OK answers a GET with neither a hit nor a miss.
    assert_eq!(results.hits + results.misses, 0);
    assert!(results.sets > 500 && results.gets > 1500, "{results:?}");
}

#[test]
fn resp3_closed_loop_over_unix_answers_every_request() {
    closed_loop(NullProtocol::Resp, Protocol::Resp3, Some("resp3"));
}

#[test]
fn memcache_text_closed_loop_over_unix_counts_misses() {
    let results = closed_loop(NullProtocol::Memcache, Protocol::MemcacheText, Some("text"));
    // END alone answers a GET: a miss.
    assert_eq!(results.misses, results.gets);
}

#[test]
fn memcache_meta_closed_loop_over_tcp_answers_every_request() {
    closed_loop(NullProtocol::Memcache, Protocol::MemcacheMeta, None);
}

fn open_loop(protocol: NullProtocol, client: Protocol, unix: Option<&str>) {
    let server = server(protocol, unix);
    let mut o = options(&server, client);
    o.rate = 4000.0;
    o.duration = Some(HumanDuration(Duration::from_secs(1)));
    o.warmup = HumanDuration(Duration::from_millis(200));
    o.pipeline = 4;
    let results = run(&o).expect("run");
    assert_sane(&results);
    // The schedule sends rate x duration requests in the window, never more; replies in the window may
    // also answer requests still in flight when the warm-up ended (at most pipeline per connection),
    // which a starved client (tests run in parallel on few CPUs) can leave there. Fewer are answered
    // in the window when the client is starved, so the lower bound is loose.
    let expected = 4000.0 * results.duration_s;
    let in_flight_max = (o.threads * o.connections * o.pipeline) as f64;
    let answered = results.requests as f64;
    assert!(
        answered <= expected + in_flight_max && answered > expected * 0.75,
        "{answered} requests, expected about {expected}"
    );
    // An idle null server answers within milliseconds, not the whole schedule late.
    assert!(
        results.latency_us.p50 < 50_000.0,
        "{:?}",
        results.latency_us
    );
}

#[test]
fn open_loop_keeps_its_rate_over_tcp_and_unix() {
    open_loop(NullProtocol::Resp, Protocol::Resp2, None);
    open_loop(NullProtocol::Memcache, Protocol::MemcacheText, Some("open"));
}

#[test]
fn timeline_covers_a_timed_run() {
    let server = server(NullProtocol::Resp, None);
    let mut o = options(&server, Protocol::Resp2);
    o.duration = Some(HumanDuration(Duration::from_millis(2500)));
    let results = run(&o).expect("run");
    assert_sane(&results);
    assert!(
        (results.duration_s - 2.5).abs() < 0.01,
        "{}",
        results.duration_s
    );
    assert!(results.timeline.len() >= 2, "{:?}", results.timeline);
    let last = results.timeline.last().unwrap();
    assert!(last.t_s <= 2.5 + 1e-6);
    let counted: f64 = results
        .timeline
        .windows(2)
        .map(|w| (w[1].t_s - w[0].t_s) * w[1].ops_per_sec)
        .sum::<f64>()
        + results.timeline[0].t_s * results.timeline[0].ops_per_sec;
    let ratio = counted / results.requests as f64;
    assert!(
        (ratio - 1.0).abs() < 0.02,
        "timeline sums to {counted}, requests {}",
        results.requests
    );
}

#[test]
fn prefill_sets_every_key_before_the_run() {
    let server = server(NullProtocol::Resp, None);
    let mut o = options(&server, Protocol::Resp2);
    o.prefill = true;
    o.requests = Some(100);
    assert_sane(&run(&o).expect("run with prefill"));
}

#[test]
fn probe_measures_a_rate() {
    use fallow_model::calibrate::{NullProbeSpec, Transport};
    for transport in [Transport::Tcp, Transport::Unix] {
        let spec = NullProbeSpec {
            transport,
            protocol: "resp".into(),
            connections: 5,
            pipeline: 4,
            server_threads: 1,
            duration_ms: 300,
        };
        let rate = fallow_bench::nullserver::probe(&spec).expect("probe");
        assert!(rate > 1000.0, "{transport:?}: {rate} requests/s");
    }
    let bad = NullProbeSpec {
        transport: Transport::Tcp,
        protocol: "http".into(),
        connections: 5,
        pipeline: 1,
        server_threads: 1,
        duration_ms: 100,
    };
    assert!(fallow_bench::nullserver::probe(&bad).is_err());
}

/// A server whose first reply announces 100 MB: the client drops the connection and counts an error.
#[test]
fn an_oversized_reply_drops_the_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 64];
        let _ = stream.read(&mut request);
        stream.write_all(b"$100000000\r\n").unwrap();
        // Hold the socket open until the client gives up on it.
        let _ = stream.read(&mut request);
    });
    let mut o = RunOptions::defaults();
    o.server = ServerAddr::Tcp(format!("127.0.0.1:{port}"));
    o.threads = 1;
    o.connections = 1;
    o.quiet = true;
    o.duration = Some(HumanDuration(Duration::from_secs(5)));
    let results = run(&o).expect("run");
    accept.join().unwrap();
    assert_eq!(results.connections_dropped, 1);
    assert_eq!(results.errors, 1);
    assert_eq!(results.requests, 0);
    assert!(
        results
            .drop_reason
            .as_deref()
            .unwrap_or("")
            .contains("reply of"),
        "{:?}",
        results.drop_reason
    );
    // The run ends when its last connection is gone, not at the end of the duration.
    assert!(results.duration_s < 4.0);
}

#[test]
fn connecting_to_nothing_fails_clearly() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut o = RunOptions::defaults();
    o.server = ServerAddr::Tcp(format!("127.0.0.1:{port}"));
    o.quiet = true;
    let error = run(&o).unwrap_err();
    assert!(format!("{error:#}").contains("connecting to"), "{error:#}");
}
