//! A connection's side of transactions, as data: the open transaction (TXN.BEGIN .. TXN.COMMIT) with the
//! records it holds and the writes it queued, the locks a plain command or EXEC took, and the lock wait
//! the connection loop sleeps on; and taking those locks in the lock table (`Txns`). What a command does
//! inside a transaction is decided by the dispatcher (`command::dispatch::txn`), which drives these.
use crate::command::info::CommandInfo;
use crate::txn::modes::Requests;
use crate::txn::queued::{QueuedWrites, Spare};
use crate::txn::{AbortCause, Acquired, LockKey, Txns, WaitPolicy};
use fallow_txn::lock::TxnId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// Most writes one transaction may queue, and most bytes of their arguments: beyond either the transaction
/// aborts (`full`).
pub const QUEUED_WRITES_MAX: usize = 100_000;
pub const QUEUED_BYTES_MAX: usize = 256 << 20;

/// An open transaction.
pub struct Session {
    pub id: TxnId,
    /// Records this transaction holds a lock on or waits for.
    held: Vec<LockKey>,
    /// Writes to apply at commit.
    queued: QueuedWrites,
    /// Set once the transaction was aborted; its commands fail until TXN.COMMIT or TXN.ABORT ends it.
    pub aborted: Option<AbortCause>,
    /// Whether its lock requests may queue (TXN.BEGIN NOWAIT: never).
    pub wait: WaitPolicy,
    /// TXN.BEGIN BUSY: a lock request refused for a conflict fails only its command (`-TXNBUSY`), and the
    /// client may retry it while the transaction keeps its locks (Claret's baseline retries operations).
    pub busy_on_conflict: bool,
    /// `Txns::keyspace_writes` at TXN.BEGIN: a FLUSHALL, FLUSHDB or SWAPDB since aborts it (`flush`).
    keyspace_writes_at_begin: u64,
}

/// The locks a plain command or EXEC took after finding a record locked by a transaction.
pub struct PlainLocks {
    pub id: TxnId,
    held: Vec<LockKey>,
}

/// A lock request queued in a record's phaser; the connection sleeps until `notify` or the deadline.
pub struct LockWait {
    pub txn: TxnId,
    pub started: Instant,
}

/// Why a write was not queued: the transaction reached `QUEUED_WRITES_MAX` or `QUEUED_BYTES_MAX`.
#[derive(Debug)]
pub struct QueueFull;

impl Session {
    /// A transaction that starts with the (empty) buffers of `spare`.
    pub fn new(txns: &Txns, wait: WaitPolicy, busy_on_conflict: bool, spare: Spare) -> Session {
        assert!(
            spare.held.is_empty() && spare.writes.is_empty(),
            "a new transaction starts with empty buffers"
        );
        Session {
            id: txns.new_id(),
            held: spare.held,
            queued: spare.writes,
            aborted: None,
            wait,
            busy_on_conflict,
            keyspace_writes_at_begin: txns.keyspace_writes(),
        }
    }

    /// Whether a keyspace-wide write ran since TXN.BEGIN.
    pub fn flushed(&self, txns: &Txns) -> bool {
        txns.keyspace_writes() != self.keyspace_writes_at_begin
    }

    /// The writes queued so far.
    pub fn queued(&self) -> &QueuedWrites {
        &self.queued
    }

    /// Queues a write to apply at commit, unless the transaction is full.
    pub fn queue_write(
        &mut self,
        info: &'static CommandInfo,
        args: &[&[u8]],
    ) -> Result<(), QueueFull> {
        let bytes: usize = args.iter().map(|arg| arg.len()).sum();
        if self.queued.len() >= QUEUED_WRITES_MAX || self.queued.bytes() + bytes > QUEUED_BYTES_MAX
        {
            return Err(QueueFull);
        }
        self.queued.push(info, args);
        Ok(())
    }

    /// Takes the locks of `requests` for this transaction (see `acquire_all`).
    pub fn acquire(
        &mut self,
        txns: &Txns,
        requests: Requests,
        waker: &Arc<Notify>,
        wait: &mut Option<LockWait>,
    ) -> Granted {
        acquire_all(
            txns,
            self.id,
            &mut self.held,
            requests,
            self.wait,
            waker,
            wait,
        )
    }

    /// Releases every lock and empties the buffers (freed if big: the client may take its time to end
    /// an aborted transaction); the session stays, marked aborted.
    pub fn abort(&mut self, txns: &Txns, cause: AbortCause) {
        txns.stats.count_abort(cause);
        txns.release(self.id, &self.held);
        let spare = Spare::recycle(
            std::mem::take(&mut self.held),
            std::mem::take(&mut self.queued),
        );
        (self.held, self.queued) = (spare.held, spare.writes);
        self.aborted = Some(cause);
    }

    /// Releases every lock the transaction holds or waits for, and hands back its buffers, emptied.
    pub fn finish(self, txns: &Txns) -> Spare {
        txns.release(self.id, &self.held);
        Spare::recycle(self.held, self.queued)
    }
}

/// What taking a set of lock requests came to.
pub enum Granted {
    All,
    /// A request queued: the wait is set and the command is re-run when it is granted.
    Waiting,
    Refused(AbortCause),
}

/// Takes every lock of `requests` in order, recording each granted or queued record in `held`.
fn acquire_all(
    txns: &Txns,
    id: TxnId,
    held: &mut Vec<LockKey>,
    requests: Requests,
    wait_policy: WaitPolicy,
    waker: &Arc<Notify>,
    wait: &mut Option<LockWait>,
) -> Granted {
    for request in requests {
        let answer = txns.acquire(id, &request, wait_policy, waker);
        // A queued request is recorded too: a release may grant it before the command re-runs, and an
        // abort, timeout or disconnect in between must release it with the rest.
        if answer.is_ok_and(|acquired| acquired.first) {
            debug_assert!(!held.contains(&request.key), "a record is held once");
            held.push(request.key);
        }
        match answer {
            Ok(Acquired { granted: true, .. }) => {}
            Ok(Acquired { granted: false, .. }) => {
                *wait = Some(LockWait {
                    txn: id,
                    started: Instant::now(),
                });
                return Granted::Waiting;
            }
            Err(cause) => return Granted::Refused(cause),
        }
    }
    Granted::All
}

/// What a plain request (a RESP command or EXEC, a memcached request) may do about transactions' locks
/// on its records.
pub enum Claim {
    /// Run it now (with the shards locked).
    Run,
    /// Queued for a lock: drop the shards and wait (the connection's lock wait is set).
    Wait,
    /// Refused (deadlock, full table): its locks are released.
    Refused(AbortCause),
}

/// Checks, and queues for if need be, the locks of a plain request (`requests`), with their shards locked.
/// `locks` and `wait` are the connection's: a RESP `ConnState`'s or a memcached connection's.
pub fn claim(
    txns: &Txns,
    locks: &mut Option<PlainLocks>,
    wait: &mut Option<LockWait>,
    waker: &Arc<Notify>,
    requests: Requests,
) -> Claim {
    if requests.is_empty() {
        return Claim::Run;
    }
    if locks.is_none() {
        if txns.admits_all(&requests) {
            return Claim::Run;
        }
        txns.stats.plain_lock_waits.fetch_add(1, Ordering::Relaxed);
        *locks = Some(PlainLocks {
            id: txns.new_id(),
            held: Vec::new(),
        });
    }
    let plain = locks.as_mut().expect("set above");
    let (id, held) = (plain.id, &mut plain.held);
    match acquire_all(txns, id, held, requests, WaitPolicy::Always, waker, wait) {
        Granted::All => Claim::Run,
        Granted::Waiting => Claim::Wait,
        Granted::Refused(cause) => {
            release_claim(txns, locks, wait);
            Claim::Refused(cause)
        }
    }
}

/// Releases the locks a plain request took (after it ran, or when its wait ended).
pub fn release_claim(txns: &Txns, locks: &mut Option<PlainLocks>, wait: &mut Option<LockWait>) {
    if let Some(plain) = locks.take() {
        txns.release(plain.id, &plain.held);
    }
    *wait = None;
}

/// Ends `wait` if the lock table granted it, counting the time waited: true then, and the waiting command
/// or request runs again (it now holds the lock).
pub fn end_granted_wait(txns: &Txns, wait: &mut Option<LockWait>) -> bool {
    let Some(LockWait { txn, started }) = *wait else {
        return false;
    };
    if txns.is_waiting(txn) {
        return false;
    }
    let waited_us = started.elapsed().as_micros() as u64;
    txns.stats
        .lock_wait_us
        .fetch_add(waited_us, Ordering::Relaxed);
    *wait = None;
    true
}
