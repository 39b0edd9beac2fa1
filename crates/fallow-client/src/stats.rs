//! Counters of a `Client`: commits, aborts by cause, retries, combining and round trips.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::error::AbortCause;

/// A snapshot of a client's counters (`Client::stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Transactions committed (a combined group counts once per member).
    pub commits: u64,
    /// Transaction attempts aborted, by cause.
    pub aborts: AbortCounts,
    /// Attempts retried after an abort.
    pub retries: u64,
    /// Operations that rode on another transaction's lock instead of going to the server.
    pub combined_ops: u64,
    /// Members that committed without a server transaction of their own (every operation combined).
    pub commits_avoided: u64,
    /// Pipelined sends of parked operations by their owners before commit (one per owner and node).
    pub combine_flushes: u64,
    /// Request/reply exchanges with a server; a pipelined batch on one connection counts once.
    pub round_trips: u64,
    /// Writes sent behind a later command instead of in a round trip of their own (`Txn::write`,
    /// `Client::pipeline`).
    pub writes_behind: u64,
    /// Commits that rode behind the body's last command (`Txn::call_and_commit`).
    pub commits_behind: u64,
    /// Commands sent again after a TXNBUSY refusal (`retry_operations`).
    pub operation_retries: u64,
    /// Keys locked up front with `Txn::lock` (sent behind the next command).
    pub locks_declared: u64,
}

impl ClientStats {
    /// Round trips combining saved: each combined operation's own, each avoided commit, less the flushes
    /// that sent parked operations (may be negative when combining found little to share).
    pub fn round_trips_saved(&self) -> i64 {
        (self.combined_ops + self.commits_avoided) as i64 - self.combine_flushes as i64
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbortCounts {
    pub conflict: u64,
    pub deadlock: u64,
    pub timeout: u64,
    pub full: u64,
    /// Aborted by the combiner (a conflict inside a combined group, or a group that waited too long).
    pub combine: u64,
    /// Other causes, and bodies that returned an error.
    pub other: u64,
}

impl AbortCounts {
    pub fn total(&self) -> u64 {
        self.conflict + self.deadlock + self.timeout + self.full + self.combine + self.other
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    aborts: [AtomicU64; 6],
    pub retries: AtomicU64,
    pub combined_ops: AtomicU64,
    pub commits_avoided: AtomicU64,
    pub combine_flushes: AtomicU64,
    pub round_trips: AtomicU64,
    pub writes_behind: AtomicU64,
    pub commits_behind: AtomicU64,
    pub operation_retries: AtomicU64,
    pub locks_declared: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, count: u64) {
        counter.fetch_add(count, Relaxed);
    }

    pub fn abort(&self, cause: &AbortCause) {
        let index = match cause {
            AbortCause::Conflict => 0,
            AbortCause::Deadlock => 1,
            AbortCause::Timeout => 2,
            AbortCause::Full => 3,
            AbortCause::Combine => 4,
            AbortCause::Other(_) => 5,
        };
        self.aborts[index].fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> ClientStats {
        let abort = |index: usize| self.aborts[index].load(Relaxed);
        ClientStats {
            commits: self.commits.load(Relaxed),
            aborts: AbortCounts {
                conflict: abort(0),
                deadlock: abort(1),
                timeout: abort(2),
                full: abort(3),
                combine: abort(4),
                other: abort(5),
            },
            retries: self.retries.load(Relaxed),
            combined_ops: self.combined_ops.load(Relaxed),
            commits_avoided: self.commits_avoided.load(Relaxed),
            combine_flushes: self.combine_flushes.load(Relaxed),
            round_trips: self.round_trips.load(Relaxed),
            writes_behind: self.writes_behind.load(Relaxed),
            commits_behind: self.commits_behind.load(Relaxed),
            operation_retries: self.operation_retries.load(Relaxed),
            locks_declared: self.locks_declared.load(Relaxed),
        }
    }
}
