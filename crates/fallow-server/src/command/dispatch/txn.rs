//! The dispatcher's side of interactive transactions: what a command does inside TXN.BEGIN .. TXN.COMMIT,
//! what a plain command does about transactions' locks, and how a connection's transaction ends.
//!
//! Inside a transaction a command first takes the locks of its records. A read then runs at once, on the
//! state before the transaction (the transaction's own writes are still queued); a write is queued and
//! replied `+QUEUED`. TXN.COMMIT applies the queued writes on their shards, all locked at once, and only
//! then releases the records' locks. The lock table and the session's data live in `crate::txn`.
use super::{permitted_now, run_unlocked_by_txns, run_with_guards};
use crate::command::info::{flags, key_positions, reaches_every_key, CommandInfo, Keys};
use crate::command::{spec_of, CommandSpec};
use crate::connection::ConnState;
use crate::server::Server;
use crate::txn::modes::{self, Requests};
use crate::txn::session::{self, Claim, Granted, QueueFull, Session};
use crate::txn::AbortCause;
use fallow_proto::ReplyWriter;
use std::sync::atomic::Ordering;

/// The reply to a command of a TXN.BEGIN BUSY transaction whose lock is held in a conflicting mode.
pub const TXNBUSY: &str =
    "TXNBUSY conflict: the lock is held in a mode that does not admit this command; the transaction is still open, retry the command";

/// The open transaction's abort cause, if it was aborted or is aborted now because a keyspace-wide write
/// ran since it began (its reads so far may have seen both sides of it).
fn aborted_or_flushed(server: &Server, conn: &mut ConnState) -> Option<AbortCause> {
    let session = conn.txn.as_ref().expect("in a transaction");
    if session.aborted.is_none() && session.flushed(&server.txns) {
        abort(server, conn, AbortCause::Flush);
    }
    conn.txn.as_ref().and_then(|session| session.aborted)
}

/// Runs a command of an open transaction (everything but TXN.*).
pub fn run_in_txn(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    spec: &'static CommandSpec,
    args: &[&[u8]],
) {
    if let Some(cause) = aborted_or_flushed(server, conn) {
        return out.error(&cause.error());
    }
    if let Some(refusal) = refused_in_txn(spec, args) {
        return out.error(&refusal);
    }
    if matches!(spec.keys, Keys::None) {
        return run_unlocked_by_txns(server, conn, out, spec, args, false);
    }
    let requests = modes::requests(spec, args, conn.address(), server.txns.abstract_locks());
    if !acquired(server, conn, out, requests) {
        return;
    }
    // ids are unique, not sequential: handing one out at once costs an aborted transaction only a gap
    if modes::is_read(spec) || spec.name == "uid.next" {
        return run_unlocked_by_txns(server, conn, out, spec, args, false);
    }
    let session = conn.txn.as_mut().expect("in a transaction");
    if let Err(QueueFull) = session.queue_write(spec.info, args) {
        abort(server, conn, AbortCause::Full);
        return out.error(&AbortCause::Full.error());
    }
    server
        .txns
        .stats
        .queued_writes
        .fetch_add(1, Ordering::Relaxed);
    out.simple("QUEUED");
}

/// TXN.BEGIN: opens a transaction on the connection's spare buffers.
pub fn begin(server: &Server, conn: &mut ConnState, wait: crate::txn::WaitPolicy, busy: bool) {
    let spare = std::mem::take(&mut conn.txn_spare);
    conn.txn = Some(Session::new(&server.txns, wait, busy, spare));
    server.txns.stats.begun.fetch_add(1, Ordering::Relaxed);
}

/// TXN.LOCK key [key ...] in the open transaction: takes each key's lock in the exclusive mode, so a
/// transaction that will read and then write a record holds it in every mode it needs from the start.
pub fn lock(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter, keys: &[&[u8]]) {
    if let Some(cause) = aborted_or_flushed(server, conn) {
        return out.error(&cause.error());
    }
    let requests = modes::exclusive_requests(keys, conn.address());
    if acquired(server, conn, out, requests) {
        out.ok();
    }
}

/// Takes the locks of `requests` for the open transaction. False when the command must not run now: it
/// waits (no reply yet; it re-runs once granted), or it was refused and the reply is written (TXNBUSY,
/// or TXNABORT with the transaction aborted).
fn acquired(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    requests: Requests,
) -> bool {
    let session = conn.txn.as_mut().expect("in a transaction");
    let waker = conn.lock_waker.clone();
    match session.acquire(&server.txns, requests, &waker, &mut conn.lock_wait) {
        Granted::All => true,
        Granted::Waiting => false,
        Granted::Refused(AbortCause::Conflict) if session.busy_on_conflict => {
            server
                .txns
                .stats
                .busy_replies
                .fetch_add(1, Ordering::Relaxed);
            out.error(TXNBUSY);
            false
        }
        Granted::Refused(cause) => {
            abort(server, conn, cause);
            out.error(&cause.error());
            false
        }
    }
}

/// Why a command cannot run inside a transaction, if it cannot.
/// A call reaching keys it does not name (KEYS, SORT BY a pattern) cannot lock their records.
fn refused_in_txn(info: &CommandInfo, args: &[&[u8]]) -> Option<String> {
    let refused = info.flags & (flags::NO_MULTI | flags::BLOCKING | flags::PUBSUB) != 0
        || reaches_every_key(info, args)
        || matches!(info.name, "select" | "swapdb" | "move" | "multi");
    refused.then(|| {
        format!(
            "ERR {} is not allowed inside a transaction",
            info.name.to_ascii_uppercase()
        )
    })
}

/// Ends the open transaction without applying anything: releases its locks and withdraws its wait. The
/// session stays, marked aborted, so the rest of a pipelined transaction fails too.
pub fn abort(server: &Server, conn: &mut ConnState, cause: AbortCause) {
    conn.lock_wait = None;
    let session = conn.txn.as_mut().expect("in a transaction");
    session.abort(&server.txns, cause);
}

/// TXN.COMMIT: applies the queued writes on their shards, locked together, replying with an array of their
/// replies; then releases every lock.
pub fn commit(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter, session: Session) {
    let queued = session.queued();
    let args = queued.args();
    let keys = queued.writes().flat_map(|(info, range)| {
        let args = &args[range];
        key_positions(info, args)
            .into_iter()
            .map(|position| args[position])
    });
    let mut guards = server.store.lock_keys(keys);
    // Checked with the written shards locked: a keyspace-wide write (which locks them all) either ran
    // wholly before this check or runs after these writes.
    if session.flushed(&server.txns) {
        drop(guards);
        server.txns.stats.count_abort(AbortCause::Flush);
        drop(args);
        conn.txn = Some(session);
        end(server, conn);
        return out.error(&AbortCause::Flush.error());
    }
    out.array_len(queued.len());
    for (info, range) in queued.writes() {
        let args = &args[range];
        if let Err(denied) = permitted_now(server, conn, info, args) {
            out.error(&denied);
            server.stats.count_error(denied.as_bytes());
            continue;
        }
        guards = run_with_guards(server, conn, out, spec_of(info), args, guards, true);
    }
    drop(args);
    // released with the shards still locked: no one sees the records between the writes and the release
    conn.txn_spare = session.finish(&server.txns);
    drop(guards);
    server.txns.stats.commits.fetch_add(1, Ordering::Relaxed);
}

/// [`session::claim`] for a RESP plain command or EXEC; a refusal's error reply is written.
pub fn plain_access(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    requests: Requests,
) -> Claim {
    let waker = conn.lock_waker.clone();
    let claimed = session::claim(
        &server.txns,
        &mut conn.plain_locks,
        &mut conn.lock_wait,
        &waker,
        requests,
    );
    if let Claim::Refused(cause) = claimed {
        out.error(&cause.error());
    }
    claimed
}

/// Releases the locks a plain command or EXEC took (after it ran, or when its wait ended).
pub fn release_plain(server: &Server, conn: &mut ConnState) {
    session::release_claim(&server.txns, &mut conn.plain_locks, &mut conn.lock_wait);
}

/// A lock wait passed `txn-lock-wait-ms`: the transaction aborts, or the plain command is refused.
pub fn wait_timed_out(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter) {
    if conn.txn.is_some() {
        abort(server, conn, AbortCause::Timeout);
    } else {
        release_plain(server, conn);
    }
    out.error(&AbortCause::Timeout.error());
}

/// The connection is closing: its transaction aborts and its locks go.
pub fn disconnect(server: &Server, conn: &mut ConnState) {
    if conn.txn.as_ref().is_some_and(|txn| txn.aborted.is_none()) {
        server
            .txns
            .stats
            .aborts_disconnect
            .fetch_add(1, Ordering::Relaxed);
    }
    end(server, conn);
}

/// Ends the connection's transaction, if any, and drops every lock it holds or waits for.
pub fn end(server: &Server, conn: &mut ConnState) {
    if let Some(session) = conn.txn.take() {
        conn.txn_spare = session.finish(&server.txns);
    }
    release_plain(server, conn);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::ClientKind;
    use crate::txn::session::QUEUED_WRITES_MAX;
    use std::time::Instant;

    fn server() -> Server {
        Server::for_tests()
    }

    fn connection(server: &Server) -> ConnState {
        let handle = server
            .register_client(ClientKind::Resp, "test".into(), "test".into())
            .expect("room for a client");
        let (sender, _) = tokio::sync::mpsc::channel(1);
        ConnState::new(handle, true, sender)
    }

    fn run(server: &Server, conn: &mut ConnState, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        let mut out = ReplyWriter::new(false);
        crate::command::dispatch::execute(server, conn, &mut out, &args);
        out.buf
    }

    /// A benchmark, not run by default: the server-side cost of a transaction against the same commands
    /// plain, in process (no network), as a Retwis post fanning out to 16 timelines. The fastest of 15
    /// rounds, the machine being noisy. `cargo test --release -p fallow-server --lib
    /// txn_path_cost -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn txn_path_cost() {
        const POSTS: usize = 10_000;
        const MEMBERS: usize = 200;
        let server = server();
        let mut conn = connection(&server);
        let timelines: Vec<String> = (0..16).map(|f| format!("timeline:{f:06}")).collect();
        let mut posts = |txn: bool| {
            let started = Instant::now();
            for post in 0..POSTS {
                let id = format!("{}", post % MEMBERS);
                if txn {
                    begin(&server, &mut conn);
                }
                let body = [
                    "HSET",
                    &format!("post:{id}"),
                    "body",
                    "hello world",
                    "user",
                    "7",
                ];
                run(&server, &mut conn, &body);
                for timeline in &timelines {
                    run(&server, &mut conn, &["ZADD", timeline, &id, &id]);
                }
                if txn {
                    let replies = run(&server, &mut conn, &["TXN.COMMIT"]);
                    assert!(replies.starts_with(b"*17\r\n"), "every write applied");
                }
            }
            started.elapsed().as_nanos() as f64 / POSTS as f64
        };
        let (mut plain_ns, mut txn_ns) = (f64::MAX, f64::MAX);
        for _ in 0..15 {
            plain_ns = plain_ns.min(posts(false));
            txn_ns = txn_ns.min(posts(true));
        }
        eprintln!("per post: plain {plain_ns:.0} ns, transaction {txn_ns:.0} ns");
        for timeline in &timelines {
            assert_eq!(run(&server, &mut conn, &["ZCARD", timeline]), b":200\r\n");
        }
        assert_eq!(server.txns.locked_records(), 0, "every lock released");
    }

    fn begin(server: &Server, conn: &mut ConnState) {
        assert_eq!(run(server, conn, &["TXN.BEGIN"]), b"+OK\r\n");
    }

    #[test]
    fn a_wait_granted_just_before_its_timeout_is_released_with_the_abort() {
        let server = server();
        let (mut holder, mut waiter) = (connection(&server), connection(&server));
        begin(&server, &mut holder);
        begin(&server, &mut waiter);
        assert_eq!(
            run(&server, &mut holder, &["SET", "k", "1"]),
            b"+QUEUED\r\n"
        );
        assert!(
            run(&server, &mut waiter, &["GET", "k"]).is_empty(),
            "it waits"
        );
        assert!(waiter.lock_wait.is_some());
        // the commit grants the waiter's request; its deadline fires before the command re-runs
        run(&server, &mut holder, &["TXN.COMMIT"]);
        let mut out = ReplyWriter::new(false);
        wait_timed_out(&server, &mut waiter, &mut out);
        assert!(out.buf.starts_with(b"-TXNABORT timeout"));
        assert_eq!(
            server.txns.locked_records(),
            0,
            "no lock outlives its transactions"
        );
        server.txns.check_invariants().unwrap();
    }

    #[test]
    fn a_disconnect_while_waiting_or_holding_releases_everything() {
        let server = server();
        let (mut first, mut second, mut plain) = (
            connection(&server),
            connection(&server),
            connection(&server),
        );
        begin(&server, &mut first);
        begin(&server, &mut second);
        assert_eq!(
            run(&server, &mut first, &["SADD", "s", "x"]),
            b"+QUEUED\r\n"
        );
        assert!(run(&server, &mut second, &["SCARD", "s"]).is_empty());
        assert!(run(&server, &mut plain, &["SMEMBERS", "s"]).is_empty());
        disconnect(&server, &mut first);
        disconnect(&server, &mut second);
        disconnect(&server, &mut plain);
        assert_eq!(server.txns.locked_records(), 0);
        assert_eq!(
            server.txns.stats.aborts_disconnect.load(Ordering::Relaxed),
            2
        );
    }

    fn flush_aborts(server: &Server) -> u64 {
        server.txns.stats.aborts_flush.load(Ordering::Relaxed)
    }

    #[test]
    fn a_keyspace_wide_write_aborts_the_transactions_open_across_it() {
        let server = server();
        let (mut reader, mut writer, mut admin) = (
            connection(&server),
            connection(&server),
            connection(&server),
        );
        run(&server, &mut admin, &["SET", "k", "1"]);
        begin(&server, &mut reader);
        begin(&server, &mut writer);
        assert_eq!(run(&server, &mut reader, &["GET", "k"]), b"$1\r\n1\r\n");
        assert_eq!(
            run(&server, &mut writer, &["INCR", "counter"]),
            b"+QUEUED\r\n"
        );
        assert_eq!(run(&server, &mut admin, &["FLUSHALL"]), b"+OK\r\n");
        // The reader's next command fails at once: "k" read as 1 before, absent now.
        let refused = run(&server, &mut reader, &["GET", "other"]);
        assert!(refused.starts_with(b"-TXNABORT flush"), "{refused:?}");
        // The writer's commit applies nothing: its INCR was queued against the state before.
        let refused = run(&server, &mut writer, &["TXN.COMMIT"]);
        assert!(refused.starts_with(b"-TXNABORT flush"), "{refused:?}");
        assert!(
            writer.txn.is_none(),
            "TXN.COMMIT ends the transaction, aborted or not"
        );
        assert_eq!(run(&server, &mut admin, &["EXISTS", "counter"]), b":0\r\n");
        assert_eq!(flush_aborts(&server), 2);
        run(&server, &mut reader, &["TXN.ABORT"]);
        assert_eq!(server.txns.locked_records(), 0);

        // One begun after it commits; FLUSHDB and SWAPDB abort as FLUSHALL does.
        for keyspace_write in [&["FLUSHDB"][..], &["SWAPDB", "0", "1"]] {
            begin(&server, &mut writer);
            assert_eq!(
                run(&server, &mut writer, &["SET", "a", "1"]),
                b"+QUEUED\r\n"
            );
            assert!(run(&server, &mut writer, &["TXN.COMMIT"]).starts_with(b"*1\r\n"));
            begin(&server, &mut writer);
            assert_eq!(run(&server, &mut writer, &["TXN.LOCK", "a"]), b"+OK\r\n");
            assert_eq!(run(&server, &mut admin, keyspace_write), b"+OK\r\n");
            let refused = run(&server, &mut writer, &["TXN.LOCK", "b"]);
            assert!(refused.starts_with(b"-TXNABORT flush"), "{refused:?}");
            run(&server, &mut writer, &["TXN.ABORT"]);
        }
        assert_eq!(flush_aborts(&server), 4);
        assert_eq!(server.txns.locked_records(), 0);
    }

    #[test]
    fn reads_then_writes_deadlock_on_the_upgrade_unless_locked_first() {
        let server = server();
        let (mut first, mut second) = (connection(&server), connection(&server));
        // Both read the set, then both add to it: the second add closes a cycle and aborts.
        begin(&server, &mut first);
        begin(&server, &mut second);
        assert_eq!(run(&server, &mut first, &["SCARD", "s"]), b":0\r\n");
        assert_eq!(run(&server, &mut second, &["SCARD", "s"]), b":0\r\n");
        assert!(run(&server, &mut first, &["SADD", "s", "a"]).is_empty());
        let refused = run(&server, &mut second, &["SADD", "s", "b"]);
        assert!(refused.starts_with(b"-TXNABORT deadlock"), "{refused:?}");
        assert_eq!(
            server
                .txns
                .stats
                .deadlocks_on_upgrade
                .load(Ordering::Relaxed),
            1
        );
        assert!(!server.txns.is_waiting(first.txn.as_ref().unwrap().id));
        run(&server, &mut second, &["TXN.ABORT"]);
        assert_eq!(
            run(&server, &mut first, &["SADD", "s", "a"]),
            b"+QUEUED\r\n"
        );
        assert!(run(&server, &mut first, &["TXN.COMMIT"]).starts_with(b"*1\r\n"));

        // Declared up front, the second waits for the first instead, and then sees its add.
        begin(&server, &mut first);
        begin(&server, &mut second);
        assert_eq!(
            run(&server, &mut first, &["TXN.LOCK", "s", "t"]),
            b"+OK\r\n"
        );
        assert!(
            run(&server, &mut second, &["TXN.LOCK", "s"]).is_empty(),
            "it waits"
        );
        assert_eq!(run(&server, &mut first, &["SCARD", "s"]), b":1\r\n");
        assert_eq!(
            run(&server, &mut first, &["SADD", "s", "b"]),
            b"+QUEUED\r\n"
        );
        assert!(run(&server, &mut first, &["TXN.COMMIT"]).starts_with(b"*1\r\n"));
        assert!(
            !server.txns.is_waiting(second.txn.as_ref().unwrap().id),
            "granted"
        );
        assert_eq!(run(&server, &mut second, &["TXN.LOCK", "s"]), b"+OK\r\n");
        assert_eq!(run(&server, &mut second, &["SCARD", "s"]), b":2\r\n");
        assert_eq!(
            run(&server, &mut second, &["SADD", "s", "c"]),
            b"+QUEUED\r\n"
        );
        assert!(run(&server, &mut second, &["TXN.COMMIT"]).starts_with(b"*1\r\n"));
        assert_eq!(server.txns.locked_records(), 0);
        server.txns.check_invariants().unwrap();
    }

    #[test]
    fn txn_lock_is_exclusive_and_needs_a_transaction() {
        let server = server();
        let (mut holder, mut adder, mut plain) = (
            connection(&server),
            connection(&server),
            connection(&server),
        );
        let refused = run(&server, &mut plain, &["TXN.LOCK", "s"]);
        assert!(refused.starts_with(b"-ERR TXN.LOCK without TXN.BEGIN"));
        begin(&server, &mut holder);
        begin(&server, &mut adder);
        assert_eq!(run(&server, &mut holder, &["TXN.LOCK", "s"]), b"+OK\r\n");
        // adds share a set's lock with adds, never with TXN.LOCK's mode; plain commands wait too
        assert!(run(&server, &mut adder, &["SADD", "s", "x"]).is_empty());
        assert!(run(&server, &mut plain, &["SCARD", "s"]).is_empty());
        end(&server, &mut holder);
        end(&server, &mut adder);
        release_plain(&server, &mut plain);
        assert_eq!(server.txns.locked_records(), 0);
    }

    #[test]
    fn a_transaction_queues_a_bounded_number_of_writes() {
        let server = server();
        let mut conn = connection(&server);
        begin(&server, &mut conn);
        for _ in 0..QUEUED_WRITES_MAX {
            assert_eq!(run(&server, &mut conn, &["INCR", "n"]), b"+QUEUED\r\n");
        }
        let refused = run(&server, &mut conn, &["INCR", "n"]);
        assert!(refused.starts_with(b"-TXNABORT full"), "{refused:?}");
        assert_eq!(
            server.txns.locked_records(),
            0,
            "the abort released the lock"
        );
        assert!(run(&server, &mut conn, &["TXN.COMMIT"]).starts_with(b"-TXNABORT full"));
    }
}
