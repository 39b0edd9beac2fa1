//! The client against real `fallow` servers (target/release/fallow, or $FALLOW_BIN), each test on its own
//! servers and free ports: commit and abort, retries after TXNABORT, transactions over two nodes,
//! combining's shared round trips, and the bank-transfer invariant with and without combining.
//! When the binary is not built, each test prints a note and passes.
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use fallow_client::connection::{Connection, ConnectionSettings, Transport};
use fallow_client::{AbortCause, Client, ClientConfig, ClientError, Reply};

fn fallow_bin() -> PathBuf {
    match std::env::var_os("FALLOW_BIN") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/fallow"),
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A server process that is killed when the test ends, however it ends.
struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data directory (`--dir`) of its own for a server on `port`: one server per directory.
fn data_dir(port: u16) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("fallow-client-test-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts `count` servers, or None (with a note) when the binary is not built.
fn start(count: usize) -> Option<Vec<Server>> {
    let program = fallow_bin();
    if !program.is_file() {
        eprintln!("note: {} is not built; skipping", program.display());
        return None;
    }
    Some((0..count).map(|_| start_one(&program)).collect())
}

fn start_one(program: &PathBuf) -> Server {
    let port = free_port();
    let child = Command::new(program)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .arg("--dir")
        .arg(data_dir(port))
        .args([
            "--memcache-port",
            "0",
            "--unixsocket",
            "",
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    let server = Server {
        child,
        address: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&server.address).is_err() {
        assert!(Instant::now() < deadline, "fallow did not listen on {port}");
        thread::sleep(Duration::from_millis(10));
    }
    server
}

fn client(servers: &[Server], combining: bool) -> Client {
    Client::connect(ClientConfig {
        nodes: servers.iter().map(|s| s.address.clone()).collect(),
        combining,
        retries_max: 200,
        backoff_initial_us: 50,
        backoff_max_us: 5_000,
        connections_per_node: 16,
        ..ClientConfig::default()
    })
    .expect("connect")
}

/// A raw connection, for commands the test plays by hand.
fn raw(server: &Server) -> Connection {
    Connection::open(&server.address, ConnectionSettings::default()).expect("connect")
}

/// A raw connection in a transaction that ran `command` (answered `expected`): it holds that lock until
/// the test commits.
fn holding(server: &Server, command: &[&[u8]], expected: Reply) -> Connection {
    let mut holder = raw(server);
    holder.push(&[b"TXN.BEGIN"]);
    holder.push(command);
    holder.flush().unwrap();
    assert_eq!(holder.read_reply().unwrap(), Reply::Simple("OK".into()));
    assert_eq!(holder.read_reply().unwrap(), expected);
    holder
}

fn config_set(server: &Server, name: &str, value: &str) {
    let reply = raw(server).call(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()]);
    assert_eq!(
        reply.unwrap(),
        Reply::Simple("OK".into()),
        "CONFIG SET {name}"
    );
}

/// A counter of INFO txn (`txn_locked_records`: records some transaction holds now).
fn txn_info(connection: &mut Connection, field: &str) -> u64 {
    let info = connection.call(&[b"INFO", b"txn"]).unwrap();
    let text = String::from_utf8_lossy(info.as_bytes().unwrap_or(b"")).into_owned();
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'));
    let value = value.unwrap_or_else(|| panic!("INFO txn has no {field}: {text}"));
    value.trim().parse().unwrap()
}

fn int(client: &Client, args: &[&[u8]]) -> i64 {
    let reply = client.command(args).expect("command");
    reply
        .as_int()
        .unwrap_or_else(|| panic!("{args:?}: {reply:?}"))
}

#[test]
fn commits_writes_and_reads_the_state_before() {
    let Some(servers) = start(1) else { return };
    let client = client(&servers, false);
    let (cardinality, replies) = client
        .transaction_with_replies(|txn| {
            let before = txn.call(&[b"SCARD", b"s"])?;
            assert_eq!(txn.call(&[b"SADD", b"s", b"x", b"y"])?, Reply::Queued);
            assert_eq!(txn.call(&[b"INCRBY", b"c", b"5"])?, Reply::Queued);
            // No read-your-own-writes: the read sees the state before the transaction.
            assert_eq!(txn.call(&[b"SCARD", b"s"])?, before);
            Ok(before)
        })
        .unwrap();
    assert_eq!(cardinality, Reply::Int(0));
    assert_eq!(replies, vec![Reply::Int(2), Reply::Int(5)]);
    assert_eq!(int(&client, &[b"SCARD", b"s"]), 2);
    let stats = client.stats();
    assert_eq!((stats.commits, stats.aborts.total()), (1, 0));
}

#[test]
fn a_failing_body_aborts_and_applies_nothing() {
    let Some(servers) = start(1) else { return };
    let client = client(&servers, false);
    let result: Result<(), _> = client.transaction(|txn| {
        txn.call(&[b"SADD", b"s", b"x"])?;
        Err(ClientError::Usage("changed my mind".into()))
    });
    assert!(matches!(result, Err(ClientError::Usage(_))));
    assert_eq!(int(&client, &[b"SCARD", b"s"]), 0);
    // A server error inside the body is the body's to handle; the transaction goes on.
    client
        .transaction(|txn| {
            txn.call(&[b"SET", b"str", b"x"])?;
            Ok(())
        })
        .unwrap();
    client
        .transaction(|txn| {
            let wrong = txn.call(&[b"SCARD", b"str"]);
            assert!(
                matches!(wrong, Err(ClientError::Server(ref text)) if text.starts_with("WRONGTYPE"))
            );
            txn.call(&[b"SADD", b"s", b"y"])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(int(&client, &[b"SCARD", b"s"]), 1);
}

/// With phasing off a conflicting lock fails at once; the client retries until the holder commits.
#[test]
fn retries_after_txnabort_until_the_holder_commits() {
    let Some(servers) = start(1) else { return };
    config_set(&servers[0], "txn-phasing", "no");
    let client = client(&servers, false);
    let mut holder = holding(&servers[0], &[b"SADD", b"s", b"held"], Reply::Queued);

    let no_retries = Client::connect(ClientConfig {
        retries_max: 0,
        ..client.config().clone()
    })
    .unwrap();
    let refused = no_retries.transaction(|txn| txn.call(&[b"SCARD", b"s"]));
    assert!(
        matches!(refused, Err(ClientError::Aborted(AbortCause::Conflict))),
        "{refused:?}"
    );

    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        holder.call(&[b"TXN.COMMIT"]).unwrap()
    });
    let seen = client
        .transaction(|txn| txn.call(&[b"SCARD", b"s"]))
        .unwrap();
    assert_eq!(seen, Reply::Int(1), "read after the holder's commit");
    assert_eq!(release.join().unwrap(), Reply::Array(vec![Reply::Int(1)]));
    let stats = client.stats();
    assert!(
        stats.retries >= 1 && stats.aborts.conflict >= 1,
        "{stats:?}"
    );
}

#[test]
fn a_transaction_over_two_nodes_commits_or_aborts_on_both() {
    let Some(servers) = start(2) else { return };
    let client = client(&servers, false);
    let keys = keys_on_each_node(&client, 2);
    let (a, b) = (keys[0].as_bytes(), keys[1].as_bytes());
    let aborted: Result<(), _> = client.transaction(|txn| {
        txn.call(&[b"INCRBY", a, b"1"])?;
        txn.call(&[b"INCRBY", b, b"1"])?;
        Err(ClientError::Usage("abort".into()))
    });
    assert!(aborted.is_err());
    client
        .transaction(|txn| {
            txn.call(&[b"INCRBY", a, b"1"])?;
            txn.call(&[b"INCRBY", b, b"2"])?;
            Ok(())
        })
        .unwrap();
    for (server, expected) in servers.iter().zip([1, 2]) {
        let key = if expected == 1 { a } else { b };
        let value = raw(server).call(&[b"GET", key]).unwrap();
        assert_eq!(value.as_int(), Some(expected), "on {}", server.address);
    }
}

/// One key per node (key:N is on node N).
fn keys_on_each_node(client: &Client, nodes: usize) -> Vec<String> {
    (0..nodes)
        .map(|node| {
            (0..)
                .map(|i| format!("key:{i}"))
                .find(|key| client.node_for(key.as_bytes()) == node)
                .unwrap()
        })
        .collect()
}

/// Threads that increment one counter at once share the first one's lock and round trip.
#[test]
fn combining_shares_round_trips() {
    let Some(servers) = start(1) else { return };
    const THREADS: usize = 8;
    const ROUNDS: usize = 20;
    let run = |combining: bool| {
        let client = Arc::new(client(&servers, combining));
        client.command(&[b"DEL", b"hot"]).unwrap();
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let client = Arc::clone(&client);
                thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        client
                            .transaction(|txn| {
                                txn.call(&[b"INCRBY", b"hot", b"1"])?;
                                // Keep the body open a little, as an application's would.
                                thread::sleep(Duration::from_millis(10));
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(int(&client, &[b"GET", b"hot"]), (THREADS * ROUNDS) as i64);
        client.stats()
    };
    let alone = run(false);
    let combined = run(true);
    eprintln!("alone: {alone:?}\ncombined: {combined:?}");
    assert_eq!(alone.combined_ops, 0);
    assert!(combined.combined_ops > 0, "{combined:?}");
    assert!(combined.round_trips_saved() > 0, "{combined:?}");
    assert!(
        combined.round_trips < alone.round_trips,
        "{combined:?} vs {alone:?}"
    );
}

/// Combined writes' commit replies reach the transaction that issued them.
#[test]
fn combined_writes_get_their_commit_replies() {
    let Some(servers) = start(1) else { return };
    let client = Arc::new(client(&servers, true));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let client = Arc::clone(&client);
            thread::spawn(move || {
                let member = format!("m{i}");
                let ((), replies) = client
                    .transaction_with_replies(|txn| {
                        txn.call(&[b"SADD", b"set", member.as_bytes()])?;
                        thread::sleep(Duration::from_millis(10));
                        Ok(())
                    })
                    .unwrap();
                replies
            })
        })
        .collect();
    for worker in workers {
        assert_eq!(worker.join().unwrap(), vec![Reply::Int(1)]);
    }
    assert_eq!(int(&client, &[b"SCARD", b"set"]), 4);
}

const ACCOUNTS: usize = 16;
const BALANCE_INITIAL: i64 = 100;

/// Transfers between accounts on two nodes, each checking the balance it takes from, while auditors
/// read every account in one transaction: the total never changes and no balance goes negative.
fn bank(combining: bool) {
    let Some(servers) = start(2) else { return };
    for server in &servers {
        config_set(server, "txn-lock-wait-ms", "50");
    }
    // A transfer reads its source, then upgrades to an increment: it waits while others read it, and two
    // transfers upgrading one account deadlock (one retries), so transfers need room to back off.
    let client = Arc::new(
        Client::connect(ClientConfig {
            retries_max: 30,
            backoff_max_us: 5_000,
            ..client(&servers, combining).config().clone()
        })
        .unwrap(),
    );
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct:{i}")).collect();
    for account in &accounts {
        let initial = BALANCE_INITIAL.to_string();
        client
            .command(&[b"SET", account.as_bytes(), initial.as_bytes()])
            .unwrap();
    }
    let total = BALANCE_INITIAL * ACCOUNTS as i64;
    let done = Arc::new(AtomicBool::new(false));
    let auditor = {
        let (client, accounts, done) = (Arc::clone(&client), accounts.clone(), Arc::clone(&done));
        thread::spawn(move || {
            let mut audits = 0;
            while !done.load(Ordering::Relaxed) || audits == 0 {
                let Some(balances) = read_all(&client, &accounts) else {
                    continue;
                };
                assert_eq!(
                    balances.iter().sum::<i64>(),
                    total,
                    "audit saw {balances:?}"
                );
                assert!(balances.iter().all(|&b| b >= 0), "audit saw {balances:?}");
                audits += 1;
                // Leave gaps for the tellers, whose upgrades wait for every audit's reads.
                thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let tellers: Vec<_> = (0..4)
        .map(|seed| {
            let (client, accounts) = (Arc::clone(&client), accounts.clone());
            thread::spawn(move || transfers(&client, &accounts, seed))
        })
        .collect();
    let committed: usize = tellers.into_iter().map(|t| t.join().unwrap()).sum();
    done.store(true, Ordering::Relaxed);
    auditor.join().unwrap();
    let Some(balances) = read_all(&client, &accounts) else {
        let stats = client.stats();
        let locked = |when: &str| {
            for server in &servers {
                let locked = txn_info(&mut raw(server), "txn_locked_records");
                eprintln!("{when}: txn_locked_records {locked}");
            }
        };
        locked("client alive");
        drop(client);
        thread::sleep(Duration::from_millis(200));
        locked("client dropped");
        panic!("final audit ran out of retries: {stats:?}");
    };
    assert_eq!(balances.iter().sum::<i64>(), total, "{balances:?}");
    eprintln!(
        "combining={combining}: {committed} transfers: {:?}",
        client.stats()
    );
    assert!(committed > 0);
}

/// Runs transfers; returns how many committed. A transfer reads its source, then upgrades to an
/// increment, which waits for other readers and deadlocks with another upgrade of the account: some
/// transfers run out of retries, which is no error here (nothing of them is applied).
fn transfers(client: &Client, accounts: &[String], seed: u64) -> usize {
    let mut committed = 0;
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    for _ in 0..100 {
        let from = accounts[next(accounts.len())].as_bytes();
        let to = accounts[next(accounts.len())].as_bytes();
        let amount = (1 + next(60)).to_string();
        if from == to {
            continue;
        }
        let result = client.transaction(|txn| {
            let balance = txn.call(&[b"GET", from])?.as_int().unwrap_or(0);
            if balance < amount.parse::<i64>().unwrap() {
                return Ok(());
            }
            // Odd tellers send their writes behind (with the commit, after a round of their own when
            // the accounts are on two nodes); even ones one round trip each.
            if seed % 2 == 1 {
                txn.write(&[b"DECRBY", from, amount.as_bytes()])?;
                txn.write(&[b"INCRBY", to, amount.as_bytes()])?;
            } else {
                txn.call(&[b"DECRBY", from, amount.as_bytes()])?;
                txn.call(&[b"INCRBY", to, amount.as_bytes()])?;
            }
            Ok(())
        });
        match result {
            Ok(()) => committed += 1,
            Err(ClientError::Aborted(_)) => {}
            Err(error) => panic!("transfer: {error}"),
        }
    }
    committed
}

/// Every balance, read in one transaction; None when it ran out of retries.
fn read_all(client: &Client, accounts: &[String]) -> Option<Vec<i64>> {
    let result = client.transaction(|txn| {
        let mut balances = Vec::with_capacity(accounts.len());
        for (index, account) in accounts.iter().enumerate() {
            let get: &[&[u8]] = &[b"GET", account.as_bytes()];
            // The last read carries the commit when every account is on its node.
            let reply = match index + 1 == accounts.len() {
                true => txn.call_and_commit(get)?,
                false => txn.call(get)?,
            };
            balances.push(reply.as_int().unwrap_or(0));
        }
        Ok(balances)
    });
    match result {
        Ok(balances) => Some(balances),
        Err(ClientError::Aborted(_)) => None,
        Err(error) => panic!("audit: {error}"),
    }
}

#[test]
fn bank_transfers_keep_the_total() {
    bank(false);
}

#[test]
fn bank_transfers_keep_the_total_with_combining() {
    bank(true);
}

/// Writes sent behind: no round trip of their own, their replies (an error one too) at their issue
/// positions, and the commit riding on the last command.
#[test]
fn writes_behind_and_the_commit_behind_the_last_command_save_round_trips() {
    let Some(servers) = start(1) else { return };
    let client = client(&servers, false);
    let (before, replies) = client
        .transaction_with_replies(|txn| {
            txn.write(&[b"SADD", b"s", b"x", b"y"])?;
            txn.write(&[b"SADD", b"s"])?;
            txn.write(&[b"INCRBY", b"c", b"5"])?;
            txn.call(&[b"SCARD", b"s"])
        })
        .unwrap();
    assert_eq!(before, Reply::Int(0), "reads see the state before");
    assert!(
        matches!(&replies[1], Reply::Error(text) if text.contains("wrong number of arguments")),
        "{replies:?}"
    );
    assert_eq!((&replies[0], &replies[2]), (&Reply::Int(2), &Reply::Int(5)));
    let stats = client.stats();
    assert_eq!(
        (stats.round_trips, stats.writes_behind),
        (2, 3),
        "{stats:?}"
    );

    // Writes only: TXN.BEGIN, the writes and TXN.COMMIT in one round trip.
    let ((), replies) = client
        .transaction_with_replies(|txn| txn.write(&[b"INCRBY", b"c", b"1"]))
        .unwrap();
    assert_eq!(replies, vec![Reply::Int(6)]);
    assert_eq!(client.stats().round_trips, 3);

    // Reads ending in call_and_commit: one round trip, writes' replies as from a commit.
    let (cardinality, replies) = client
        .transaction_with_replies(|txn| {
            txn.write(&[b"SADD", b"s", b"z"])?;
            let cardinality = txn.call_and_commit(&[b"SCARD", b"s"])?;
            let after = txn.call(&[b"GET", b"c"]);
            assert!(matches!(after, Err(ClientError::Usage(_))), "{after:?}");
            Ok(cardinality)
        })
        .unwrap();
    assert_eq!((cardinality, replies), (Reply::Int(2), vec![Reply::Int(1)]));
    let stats = client.stats();
    assert_eq!(
        (stats.round_trips, stats.commits_behind),
        (4, 1),
        "{stats:?}"
    );
    assert_eq!(int(&client, &[b"SCARD", b"s"]), 3);
}

/// A write behind that cannot get its lock aborts the attempt at the next round trip (here the commit),
/// and the retry succeeds once the holder is gone; nothing of the aborted attempt is applied.
#[test]
fn a_write_behind_that_conflicts_aborts_and_retries() {
    let Some(servers) = start(1) else { return };
    config_set(&servers[0], "txn-phasing", "no");
    let client = client(&servers, false);
    let mut holder = holding(&servers[0], &[b"SCARD", b"s"], Reply::Int(0));
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        holder.call(&[b"TXN.COMMIT"]).unwrap()
    });
    let mut causes = Vec::new();
    let ((), replies) = client
        .transaction_noting_aborts(
            |txn| {
                txn.write(&[b"INCR", b"attempts"])?;
                txn.write(&[b"SADD", b"s", b"x"])
            },
            |cause| causes.push(cause.clone()),
        )
        .unwrap();
    assert_eq!(replies, vec![Reply::Int(1), Reply::Int(1)]);
    assert_eq!(release.join().unwrap(), Reply::Array(vec![]));
    let stats = client.stats();
    assert!(stats.aborts.conflict >= 1, "{stats:?}");
    // Met at TXN.COMMIT, outside the body: the callback still hears each one's cause.
    assert_eq!(causes.len() as u64, stats.retries, "{causes:?}");
    assert!(
        causes.iter().all(|cause| *cause == AbortCause::Conflict),
        "{causes:?}"
    );
    assert_eq!(
        int(&client, &[b"GET", b"attempts"]),
        1,
        "aborted attempts apply nothing"
    );
}

/// Writes behind on two nodes: they are queued on both before either commits.
#[test]
fn writes_behind_on_two_nodes_commit_on_both() {
    let Some(servers) = start(2) else { return };
    let client = client(&servers, false);
    let keys = keys_on_each_node(&client, 2);
    let (a, b) = (keys[0].as_bytes(), keys[1].as_bytes());
    let ((), replies) = client
        .transaction_with_replies(|txn| {
            txn.write(&[b"INCRBY", a, b"1"])?;
            txn.write(&[b"INCRBY", b, b"2"])
        })
        .unwrap();
    assert_eq!(replies, vec![Reply::Int(1), Reply::Int(2)]);
    // One round of writes on both nodes, then one of commits.
    assert_eq!(client.stats().round_trips, 4);
    for (server, (key, expected)) in servers.iter().zip([(a, 1), (b, 2)]) {
        let value = raw(server).call(&[b"GET", key]).unwrap();
        assert_eq!(value.as_int(), Some(expected), "on {}", server.address);
    }
}

#[test]
fn a_pipeline_answers_in_order_over_two_nodes() {
    let Some(servers) = start(2) else { return };
    let client = client(&servers, false);
    let keys = keys_on_each_node(&client, 2);
    let command =
        |args: &[&str]| -> Vec<Vec<u8>> { args.iter().map(|a| a.as_bytes().to_vec()).collect() };
    let replies = client
        .pipeline(&[
            command(&["INCRBY", &keys[0], "3"]),
            command(&["INCRBY", &keys[1], "4"]),
            command(&["SADD", &keys[0]]),
            command(&["GET", &keys[1]]),
        ])
        .unwrap();
    assert_eq!(replies[..2], [Reply::Int(3), Reply::Int(4)]);
    assert!(matches!(&replies[2], Reply::Error(_)), "{replies:?}");
    assert_eq!(replies[3], Reply::Bulk(b"4".to_vec()));
    assert_eq!(client.stats().round_trips, 2, "one per node");
}

/// TXN.NOWAIT turns an open transaction's waits into aborts: with phasing on, a conflicting request
/// that would queue fails at once instead.
#[test]
fn txn_nowait_makes_a_conflict_abort_at_once() {
    let Some(servers) = start(1) else { return };
    let mut holder = holding(&servers[0], &[b"SET", b"k", b"held"], Reply::Queued);

    let mut other = raw(&servers[0]);
    let refused = other.call(&[b"TXN.NOWAIT"]).unwrap();
    assert!(matches!(refused, Reply::Error(ref text) if text.contains("without TXN.BEGIN")));
    for command in [&[&b"TXN.BEGIN"[..]][..], &[b"TXN.NOWAIT"]] {
        assert_eq!(other.call(command).unwrap(), Reply::Simple("OK".into()));
    }
    let started = Instant::now();
    let reply = other.call(&[b"GET", b"k"]).unwrap();
    assert!(
        matches!(reply, Reply::Error(ref text) if text.starts_with("TXNABORT conflict")),
        "{reply:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "it did not wait"
    );
    assert_eq!(
        other.call(&[b"TXN.ABORT"]).unwrap(),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        holder.call(&[b"TXN.COMMIT"]).unwrap(),
        Reply::Array(vec![Reply::Simple("OK".into())])
    );
}

/// Claret's baseline: with phasing off, TXN.BEGIN BUSY refuses only the conflicting command (TXNBUSY) and
/// the transaction stays open with its locks; `retry_operations` sends the command again until the holder
/// is gone, or aborts the transaction (timeout) after `operation_retry_max_ms`.
#[test]
fn busy_commands_are_retried_alone_while_the_transaction_keeps_its_locks() {
    let Some(servers) = start(1) else { return };
    config_set(&servers[0], "txn-phasing", "no");
    let hold = |key: &[u8]| holding(&servers[0], &[b"SET", key, b"held"], Reply::Queued);
    let mut holder = hold(b"k");
    let mut other = raw(&servers[0]);
    assert_eq!(
        other.call(&[b"TXN.BEGIN", b"BUSY"]).unwrap(),
        Reply::Simple("OK".into())
    );
    assert_eq!(other.call(&[b"INCR", b"c"]).unwrap(), Reply::Queued);
    let busy = other.call(&[b"GET", b"k"]).unwrap();
    assert!(
        matches!(busy, Reply::Error(ref text) if text.starts_with("TXNBUSY")),
        "{busy:?}"
    );
    assert_eq!(
        other.call(&[b"INCR", b"d"]).unwrap(),
        Reply::Queued,
        "still open"
    );
    assert!(matches!(
        holder.call(&[b"TXN.COMMIT"]).unwrap(),
        Reply::Array(_)
    ));
    assert_eq!(
        other.call(&[b"GET", b"k"]).unwrap(),
        Reply::Bulk(b"held".to_vec())
    );
    assert_eq!(
        other.call(&[b"TXN.COMMIT"]).unwrap(),
        Reply::Array(vec![Reply::Int(1), Reply::Int(1)])
    );

    let client = Client::connect(ClientConfig {
        retry_operations: true,
        operation_retry_max_ms: 2_000,
        ..client(&servers, false).config().clone()
    })
    .unwrap();
    let mut holder = hold(b"k2");
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        holder.call(&[b"TXN.COMMIT"]).unwrap()
    });
    let seen = client
        .transaction(|txn| {
            txn.write(&[b"INCR", b"e"])?;
            txn.call(&[b"GET", b"k2"])
        })
        .unwrap();
    release.join().unwrap();
    assert_eq!(seen, Reply::Bulk(b"held".to_vec()));
    let stats = client.stats();
    assert!(stats.operation_retries >= 1, "{stats:?}");
    assert_eq!((stats.aborts.total(), stats.retries), (0, 0), "{stats:?}");
    assert_eq!(int(&client, &[b"GET", b"e"]), 1);
    let busy_replies = txn_info(&mut raw(&servers[0]), "txn_busy_replies");
    assert!(busy_replies >= 2, "{busy_replies}");

    // A holder that stays: the command is retried for operation_retry_max_ms, then the transaction
    // aborts with cause timeout.
    let patient = Client::connect(ClientConfig {
        retries_max: 0,
        operation_retry_max_ms: 50,
        ..client.config().clone()
    })
    .unwrap();
    let mut holder = hold(b"k3");
    let result = patient.transaction(|txn| txn.call(&[b"GET", b"k3"]));
    assert!(
        matches!(result, Err(ClientError::Aborted(AbortCause::Timeout))),
        "{result:?}"
    );
    assert!(matches!(
        holder.call(&[b"TXN.COMMIT"]).unwrap(),
        Reply::Array(_)
    ));
}

#[test]
fn the_emulated_link_delay_adds_to_every_round_trip_and_holds_locks_across_it() {
    let Some(servers) = start(1) else { return };
    let link_delay = Duration::from_millis(30);
    let client = Client::connect(ClientConfig {
        nodes: vec![servers[0].address.clone()],
        emulated_link_delay_us: link_delay.as_micros() as u64,
        ..ClientConfig::default()
    })
    .expect("connect");
    let started = Instant::now();
    assert_eq!(int(&client, &[b"SADD", b"s", b"x"]), 1);
    assert!(
        started.elapsed() >= link_delay,
        "a plain command waits once"
    );
    // TXN.BEGIN rides with the SCARD and the commit with the last call: two round trips.
    let started = Instant::now();
    let holder = thread::spawn(move || {
        client
            .transaction(|txn| {
                txn.call(&[b"SCARD", b"s"])?;
                txn.call_and_commit(&[b"SADD", b"s", b"y"])
            })
            .expect("commits")
    });
    // Between the two round trips the transaction holds the set's read lock on the server: a plain
    // SADD sent then waits for the commit.
    let mut plain = raw(&servers[0]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while txn_info(&mut plain, "txn_locked_records") == 0 {
        assert!(Instant::now() < deadline, "the SCARD never took its lock");
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(plain.call(&[b"SADD", b"s", b"z"]).unwrap(), Reply::Int(1));
    let plain_done = started.elapsed();
    assert_eq!(holder.join().unwrap(), Reply::Queued);
    assert!(started.elapsed() >= 2 * link_delay);
    // It returns only after the commit, which the second delay holds back.
    assert!(plain_done >= 2 * link_delay, "{plain_done:?}");
    assert_eq!(plain.call(&[b"SCARD", b"s"]).unwrap(), Reply::Int(3));
}

#[test]
fn declared_locks_make_read_modify_write_queue_instead_of_deadlocking() {
    let Some(servers) = start(1) else { return };
    let client = Arc::new(client(&servers, false));
    const THREADS: usize = 8;
    const INCREMENTS: usize = 100;
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || {
                for _ in 0..INCREMENTS {
                    client
                        .transaction(|txn| {
                            txn.lock(&[b"counter"])?;
                            let value = txn.call(&[b"GET", b"counter"])?;
                            let next = value.as_int().unwrap_or(0) + 1;
                            txn.write(&[b"SET", b"counter", next.to_string().as_bytes()])
                        })
                        .expect("commits");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(
        int(&client, &[b"GET", b"counter"]),
        (THREADS * INCREMENTS) as i64,
        "no increment was lost"
    );
    let stats = client.stats();
    assert_eq!(stats.aborts.deadlock, 0, "{stats:?}");
    assert_eq!(stats.retries, 0, "each waited its turn: {stats:?}");
    assert_eq!(stats.locks_declared, (THREADS * INCREMENTS) as u64);
    // TXN.BEGIN, TXN.LOCK and GET in one round trip, SET and TXN.COMMIT in the next
    assert_eq!(stats.round_trips, 2 * (THREADS * INCREMENTS) as u64 + 1);
}

/// A server listening on a Unix socket of its own (with `extra` flags), its address `unix:/path`, and
/// its directory (removed on drop); None when the binary is not built.
struct UnixServer {
    server: Server,
    dir: PathBuf,
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = self.server.child.kill();
        let _ = self.server.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_on_unix_socket(name: &str, extra: &[&str]) -> Option<UnixServer> {
    let program = fallow_bin();
    if !program.is_file() {
        eprintln!("note: {} is not built; skipping", program.display());
        return None;
    }
    let dir = std::env::temp_dir().join(format!("fallow-client-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("s.sock");
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(&program)
        .args(["--bind", "127.0.0.1", "--port", &free_port().to_string()])
        .arg("--dir")
        .arg(dir.join("data"))
        .args(["--memcache-port", "0", "--log-level", "warn"])
        .args(extra)
        .arg("--unixsocket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    let address = format!("unix:{}", socket.display());
    let server = UnixServer {
        server: Server { child, address },
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "fallow did not listen on {}",
            server.server.address
        );
        thread::sleep(Duration::from_millis(10));
    }
    Some(server)
}

/// A node given as `unix:/path` is reached over the server's Unix socket, transactions included.
#[test]
fn a_node_on_the_unix_socket() {
    let Some(unix) = start_on_unix_socket("unix", &[]) else {
        return;
    };
    let client = Client::connect(ClientConfig {
        nodes: vec![unix.server.address.clone()],
        ..ClientConfig::default()
    })
    .expect("connect over the Unix socket");
    client
        .transaction(|txn| {
            txn.call(&[b"INCRBY", b"c", b"3"])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(int(&client, &[b"GET", b"c"]), 3);
}

/// On a `unix:` node the client opens a shared-memory channel: the connection's transport says so, the
/// server lists it as the same client, and values larger than a ring, long pipelines and transactions
/// cross it intact.
#[test]
fn a_unix_node_is_reached_over_a_shared_memory_channel() {
    let Some(unix) = start_on_unix_socket("shm", &["--shm-ring-bytes", "65536"]) else {
        return;
    };
    let address = unix.server.address.clone();
    let mut connection =
        Connection::open(&address, ConnectionSettings::default()).expect("connect");
    assert_eq!(
        connection.transport(),
        Transport::Shm,
        "refused: {:?}",
        connection.shm_refusal()
    );
    // Larger than the 64 KiB rings in both directions: it crosses in pieces while the server drains.
    let value: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(
        connection.call(&[b"SET", b"big", &value]).unwrap(),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        connection.call(&[b"GET", b"big"]).unwrap(),
        Reply::Bulk(value.clone())
    );
    const PIPELINE: i64 = 2_000;
    for _ in 0..PIPELINE {
        connection.push(&[b"INCR", b"n"]);
    }
    connection.flush().unwrap();
    for expected in 1..=PIPELINE {
        assert_eq!(connection.read_reply().unwrap(), Reply::Int(expected));
    }
    let client = Client::connect(ClientConfig {
        nodes: vec![address],
        ..ClientConfig::default()
    })
    .expect("connect");
    client
        .transaction(|txn| {
            txn.call(&[b"INCRBY", b"n", b"5"])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(int(&client, &[b"GET", b"n"]), PIPELINE + 5);
    assert_eq!(
        int(&client, &[b"STRLEN", b"big"]),
        value.len() as i64,
        "the other connection sees the value"
    );
}

/// A server with `shm-channels no` refuses SHM.OPEN: the client says why and works over the socket.
#[test]
fn a_refused_channel_falls_back_to_the_unix_socket() {
    let Some(unix) = start_on_unix_socket("shm-off", &["--shm-channels", "no"]) else {
        return;
    };
    let address = unix.server.address.clone();
    let mut connection =
        Connection::open(&address, ConnectionSettings::default()).expect("connect");
    assert_eq!(connection.transport(), Transport::Unix);
    let refusal = connection.shm_refusal().expect("a channel was tried");
    assert!(refusal.contains("refused"), "{refusal}");
    assert_eq!(
        connection.call(&[b"SET", b"k", b"v"]).unwrap(),
        Reply::Simple("OK".into())
    );
    let client = Client::connect(ClientConfig {
        nodes: vec![address],
        ..ClientConfig::default()
    })
    .expect("connect");
    client
        .transaction(|txn| {
            txn.call(&[b"APPEND", b"k", b"w"])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(
        client.command(&[b"GET", b"k"]).unwrap(),
        Reply::Bulk(b"vw".to_vec())
    );
}

/// `shm_channels: false` keeps a `unix:` node on the socket without asking.
#[test]
fn channels_turned_off_in_the_client_use_the_socket() {
    let Some(unix) = start_on_unix_socket("shm-client-off", &[]) else {
        return;
    };
    let settings = ConnectionSettings {
        shm_channels: false,
        ..ConnectionSettings::default()
    };
    let mut connection = Connection::open(&unix.server.address, settings).expect("connect");
    assert_eq!(connection.transport(), Transport::Unix);
    assert_eq!(connection.shm_refusal(), None, "no channel was asked for");
    assert_eq!(
        connection.call(&[b"PING"]).unwrap(),
        Reply::Simple("PONG".into())
    );
}

/// A server that dies while a channel's reader waits (BLPOP 0) ends that read with an error soon, not at
/// the I/O timeout: the client watches the lifeline socket.
#[test]
fn a_dead_server_ends_a_blocked_channel_read() {
    let Some(mut unix) = start_on_unix_socket("shm-dies", &[]) else {
        return;
    };
    let mut connection =
        Connection::open(&unix.server.address, ConnectionSettings::default()).expect("connect");
    assert_eq!(connection.transport(), Transport::Shm);
    connection.push(&[b"BLPOP", b"never", b"0"]);
    connection.flush().unwrap();
    let killer = thread::spawn({
        let pid = unix.server.child.id();
        move || {
            thread::sleep(Duration::from_millis(200));
            // SIGKILL: the server marks nothing in the channel's header.
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let started = Instant::now();
    let result = connection.read_reply();
    killer.join().unwrap();
    let _ = unix.server.child.wait();
    assert!(result.is_err(), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "noticed after {:?}",
        started.elapsed()
    );
}
