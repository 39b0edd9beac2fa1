//! The client's I/O paths against a fake server that speaks the TXN protocol without locks (so it runs
//! anywhere, with no fallow binary): BEGIN pipelined with the first command, replies routed from COMMIT,
//! TXNABORT retried, combined operations flushed by their owner and their replies delivered, round trips
//! counted. Serializability is the real server's part (tests/server.rs).
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use fallow_client::{AbortCause, Client, ClientConfig, ClientError, Reply};
use fallow_proto::{parse_request, Parsed, RespLimits};

#[derive(Default)]
struct Store {
    counters: Mutex<HashMap<Vec<u8>, i64>>,
    /// Commands with this name answer TXNABORT conflict this many times.
    flaky_left: AtomicUsize,
    requests: AtomicUsize,
}

/// Starts a fake server; returns its address and its store.
fn fake() -> (String, Arc<Store>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let store = Arc::new(Store::default());
    let shared = Arc::clone(&store);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let store = Arc::clone(&shared);
            thread::spawn(move || serve(stream, &store));
        }
    });
    (address, store)
}

fn serve(mut stream: TcpStream, store: &Store) {
    let (mut buf, mut ranges) = (Vec::new(), Vec::new());
    let mut queued: Option<Vec<Vec<Vec<u8>>>> = None;
    let mut chunk = [0u8; 4096];
    loop {
        match parse_request(&buf, &RespLimits::default(), &mut ranges) {
            Parsed::Multibulk { consumed } => {
                let args: Vec<Vec<u8>> = ranges.iter().map(|r| buf[r.clone()].to_vec()).collect();
                buf.drain(..consumed);
                let reply = execute(store, &mut queued, args);
                if stream.write_all(&reply).is_err() {
                    return;
                }
            }
            Parsed::Incomplete { .. } => match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            _ => return,
        }
    }
}

fn execute(store: &Store, queued: &mut Option<Vec<Vec<Vec<u8>>>>, args: Vec<Vec<u8>>) -> Vec<u8> {
    store.requests.fetch_add(1, Ordering::Relaxed);
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    match (name.as_str(), queued.as_mut()) {
        ("TXN.BEGIN", None) => {
            *queued = Some(Vec::new());
            b"+OK\r\n".to_vec()
        }
        // Without locks there is nothing to wait for: NOWAIT changes nothing here.
        ("TXN.NOWAIT", Some(_)) => b"+OK\r\n".to_vec(),
        ("TXN.ABORT", Some(_)) => {
            *queued = None;
            b"+OK\r\n".to_vec()
        }
        ("TXN.COMMIT", Some(_)) => {
            let writes = queued.take().unwrap();
            let mut counters = store.counters.lock().unwrap();
            let mut out = format!("*{}\r\n", writes.len()).into_bytes();
            for write in writes {
                let value = counters.entry(write[1].clone()).or_default();
                *value += increment(&write);
                out.extend_from_slice(format!(":{value}\r\n").as_bytes());
            }
            out
        }
        ("GET", _) => {
            let value = store.counters.lock().unwrap().get(&args[1]).copied();
            value.map_or(b"$-1\r\n".to_vec(), |v| {
                let text = v.to_string();
                format!("${}\r\n{text}\r\n", text.len()).into_bytes()
            })
        }
        ("FLAKY", _) if store.flaky_left.load(Ordering::Relaxed) > 0 => {
            store.flaky_left.fetch_sub(1, Ordering::Relaxed);
            b"-TXNABORT conflict fake\r\n".to_vec()
        }
        ("FLAKY", _) => b":7\r\n".to_vec(),
        ("INCRBY" | "INCR", Some(writes)) => {
            writes.push(args);
            b"+QUEUED\r\n".to_vec()
        }
        _ => b"-ERR fake server does not know this\r\n".to_vec(),
    }
}

fn increment(write: &[Vec<u8>]) -> i64 {
    write
        .get(2)
        .map_or(1, |n| String::from_utf8_lossy(n).parse().unwrap())
}

fn client(nodes: Vec<String>, combining: bool) -> Client {
    Client::connect(ClientConfig {
        nodes,
        combining,
        retries_max: 5,
        backoff_initial_us: 10,
        backoff_max_us: 100,
        connections_per_node: 4,
        ..ClientConfig::default()
    })
    .unwrap()
}

#[test]
fn a_transaction_costs_one_round_trip_per_command_plus_the_commit() {
    let (address, store) = fake();
    let client = client(vec![address], false);
    let ((), replies) = client
        .transaction_with_replies(|txn| {
            assert_eq!(txn.call(&[b"GET", b"c"])?, Reply::Nil);
            assert_eq!(txn.call(&[b"INCRBY", b"c", b"3"])?, Reply::Queued);
            assert_eq!(txn.call(&[b"INCRBY", b"d", b"4"])?, Reply::Queued);
            Ok(())
        })
        .unwrap();
    assert_eq!(replies, vec![Reply::Int(3), Reply::Int(4)]);
    assert_eq!(
        client.stats().round_trips,
        4,
        "BEGIN rides with the first command"
    );
    assert_eq!(
        store.requests.load(Ordering::Relaxed),
        5,
        "BEGIN, GET, 2 INCRBY, COMMIT"
    );
}

#[test]
fn txnabort_is_retried_then_given_up() {
    let (address, store) = fake();
    let client = client(vec![address], false);
    store.flaky_left.store(2, Ordering::Relaxed);
    let value = client
        .transaction(|txn| txn.call(&[b"FLAKY", b"k"]))
        .unwrap();
    assert_eq!(value, Reply::Int(7));
    let stats = client.stats();
    assert_eq!(
        (stats.retries, stats.aborts.conflict, stats.commits),
        (2, 2, 1)
    );

    store.flaky_left.store(100, Ordering::Relaxed);
    let attempts = AtomicUsize::new(0);
    let result = client.transaction(|txn| {
        attempts.fetch_add(1, Ordering::Relaxed);
        let reply = txn.call(&[b"FLAKY", b"k"]);
        // After an abort every later call fails at once, without a round trip.
        assert!(matches!(
            txn.call(&[b"GET", b"k"]),
            Err(ClientError::Aborted(_))
        ));
        reply
    });
    assert!(matches!(
        result,
        Err(ClientError::Aborted(AbortCause::Conflict))
    ));
    assert_eq!(attempts.load(Ordering::Relaxed), 6, "retries_max 5");
}

#[test]
fn keys_on_two_nodes_commit_on_both() {
    let (first, first_store) = fake();
    let (second, second_store) = fake();
    let client = client(vec![first, second], false);
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    client
        .transaction(|txn| {
            for key in &keys {
                txn.call(&[b"INCR", key.as_bytes()])?;
            }
            Ok(())
        })
        .unwrap();
    let on_first = first_store.counters.lock().unwrap().len();
    let on_second = second_store.counters.lock().unwrap().len();
    assert_eq!(on_first + on_second, keys.len());
    assert!(on_first > 0 && on_second > 0, "{on_first} + {on_second}");
    for key in &keys {
        let node = client.node_for(key.as_bytes());
        let store = [&first_store, &second_store][node];
        assert_eq!(store.counters.lock().unwrap().get(key.as_bytes()), Some(&1));
    }
}

#[test]
fn combined_increments_ride_on_one_lock_and_get_their_replies() {
    let (address, store) = fake();
    let client = Arc::new(client(vec![address], true));
    const THREADS: usize = 6;
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let client = Arc::clone(&client);
            thread::spawn(move || {
                // Staggered so the first one's lock is granted before the others ask.
                thread::sleep(Duration::from_millis(5 * i as u64));
                let ((), replies) = client
                    .transaction_with_replies(|txn| {
                        txn.call(&[b"INCRBY", b"hot", b"1"])?;
                        thread::sleep(Duration::from_millis(80));
                        Ok(())
                    })
                    .unwrap();
                replies
            })
        })
        .collect();
    let mut seen: Vec<i64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .map(|reply| reply.as_int().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=THREADS as i64).collect::<Vec<_>>(),
        "each its own reply"
    );
    assert_eq!(
        store.counters.lock().unwrap()[&b"hot".to_vec()],
        THREADS as i64
    );
    let stats = client.stats();
    assert_eq!(stats.combined_ops, THREADS as u64 - 1, "{stats:?}");
    assert_eq!(stats.commits_avoided, THREADS as u64 - 1, "{stats:?}");
    // One transaction's two round trips, and one flush, for all of them.
    assert_eq!(stats.round_trips, 3, "{stats:?}");
    assert_eq!(stats.round_trips_saved(), 2 * (THREADS as i64 - 1) - 1);
}
