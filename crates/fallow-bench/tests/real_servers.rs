//! The load generator against real redis-server and memcached, when they are installed (each test prints
//! a note and passes when its server is not on PATH).
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fallow_bench::options::{Protocol, Ratio, ServerAddr};
use fallow_bench::{run, RunOptions, RunResults};

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Held by each test while its server runs. Run side by side, the Redis test's client was now and then
/// refused by a redis-server that was up and listening (2 of 40 runs, always just as the memcached test
/// killed its server; never with either test alone). The cause is not found; the tests take turns.
static ONE_SERVER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A server process that is killed when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(program: &str, args: &[String], port: u16) -> Server {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{program} did not start listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn options(port: u16, protocol: Protocol) -> RunOptions {
    let mut o = RunOptions::defaults();
    o.server = ServerAddr::Tcp(format!("127.0.0.1:{port}"));
    o.protocol = protocol;
    o.threads = 2;
    o.connections = 2;
    o.pipeline = 4;
    o.keys = 2000;
    o.value_size = "100".parse().unwrap();
    o.requests = Some(4000);
    o.quiet = true;
    o
}

/// A GET-only run: after a prefill every GET hits; on keys never set every GET misses.
fn check_hits_and_misses(port: u16, protocol: Protocol) {
    let mut o = options(port, protocol);
    o.ratio = Ratio { sets: 0, gets: 1 };
    o.prefill = true;
    let hit = run(&o).expect("prefilled run");
    assert_clean(&hit);
    assert_eq!((hit.gets, hit.hits), (4000, 4000), "{protocol:?}: {hit:?}");

    o.prefill = false;
    o.key_prefix = format!("never-set-{}:", protocol.name());
    let miss = run(&o).expect("run on absent keys");
    assert_clean(&miss);
    assert_eq!(
        (miss.gets, miss.misses),
        (4000, 4000),
        "{protocol:?}: {miss:?}"
    );
}

fn assert_clean(results: &RunResults) {
    assert_eq!(results.errors, 0, "{results:?}");
    assert_eq!(results.requests, 4000);
    assert!(results.latency_us.p50 > 0.0);
}

#[test]
fn drives_redis_over_resp2_and_resp3() {
    let _turn = ONE_SERVER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !on_path("redis-server") {
        eprintln!("note: redis-server is not on PATH; skipping the Redis test");
        return;
    }
    let port = free_port();
    let args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--save", "", "--appendonly", "no"].map(String::from))
        .collect();
    let _redis = start("redis-server", &args, port);
    check_hits_and_misses(port, Protocol::Resp2);
    check_hits_and_misses(port, Protocol::Resp3);
    let mut mixed = options(port, Protocol::Resp2);
    mixed.distribution = "zipf:0.99".parse().unwrap();
    let results = run(&mixed).expect("mixed run");
    assert_clean(&results);
    assert!(results.sets > 0 && results.gets > results.sets);
}

#[test]
fn drives_memcached_over_text_and_meta() {
    let _turn = ONE_SERVER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !on_path("memcached") {
        eprintln!("note: memcached is not on PATH; skipping the memcached test");
        return;
    }
    let port = free_port();
    // -u root is ignored unless the test runs as root, where memcached insists on it.
    let args: Vec<String> = [
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-m",
        "64",
        "-u",
        "root",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _memcached = start("memcached", &args, port);
    check_hits_and_misses(port, Protocol::MemcacheText);
    check_hits_and_misses(port, Protocol::MemcacheMeta);
}
