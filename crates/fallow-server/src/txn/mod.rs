//! Interactive transactions over abstract data types (Claret, issue 5): the server's side of
//! `fallow_txn`'s lock table. One table serves every shard; a transaction's commands take their records'
//! locks in the modes their data type declares (`modes`), reads run at once on the state before the
//! transaction, writes are queued and applied together at TXN.COMMIT (`session`).
//!
//! Lock order: a shard mutex may be held while taking the table's mutex, never the other way round.
//! Plain commands check the table under their shard's mutex, so a plain write and a transaction's read
//! of the same record are ordered by that mutex.
pub mod modes;
pub mod queued;
pub mod session;

use fallow_txn::lock::{Acquire, ConflictCause, LockConfig, LockTable, TxnId};
use fallow_txn::Mode;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A record: its keyspace address (tenant, namespace, database) and its key.
pub type LockKey = (usize, Box<[u8]>);

/// Why a transaction ended without committing; the first word of its `TXNABORT` error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortCause {
    Conflict,
    Deadlock,
    Timeout,
    Full,
    /// FLUSHALL, FLUSHDB, SWAPDB or memcached flush_all ran while the transaction was open.
    Flush,
}

impl AbortCause {
    pub const ALL: [AbortCause; 5] = [
        AbortCause::Conflict,
        AbortCause::Deadlock,
        AbortCause::Timeout,
        AbortCause::Full,
        AbortCause::Flush,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AbortCause::Conflict => "conflict",
            AbortCause::Deadlock => "deadlock",
            AbortCause::Timeout => "timeout",
            AbortCause::Full => "full",
            AbortCause::Flush => "flush",
        }
    }

    fn from_conflict(cause: ConflictCause) -> AbortCause {
        match cause {
            ConflictCause::Busy => AbortCause::Conflict,
            ConflictCause::Deadlock => AbortCause::Deadlock,
            ConflictCause::Full => AbortCause::Full,
        }
    }

    /// Why, in words.
    pub fn detail(self) -> &'static str {
        match self {
            AbortCause::Conflict => "a lock is held in a mode that does not admit this operation",
            AbortCause::Deadlock => "waiting would close a cycle of transactions",
            AbortCause::Timeout => "the lock wait passed txn-lock-wait-ms",
            AbortCause::Full => "the lock table or the record's queue is full",
            AbortCause::Flush => {
                "a keyspace-wide write (FLUSHALL, FLUSHDB, SWAPDB, flush_all) ran while it was open"
            }
        }
    }

    /// The error a command of an aborted transaction gets.
    pub fn error(self) -> String {
        format!(
            "TXNABORT {} ({}): the transaction was aborted, retry it",
            self.name(),
            self.detail()
        )
    }
}

/// Event counters of INFO txn.
#[derive(Default)]
pub struct TxnStats {
    pub begun: AtomicU64,
    pub commits: AtomicU64,
    pub aborts_conflict: AtomicU64,
    pub aborts_deadlock: AtomicU64,
    pub aborts_timeout: AtomicU64,
    pub aborts_full: AtomicU64,
    pub aborts_flush: AtomicU64,
    /// TXN.ABORT.
    pub aborts_client: AtomicU64,
    pub aborts_disconnect: AtomicU64,
    /// Requests (of transactions, plain commands and EXEC) that queued for a lock.
    pub lock_waits: AtomicU64,
    pub lock_wait_us: AtomicU64,
    /// Plain commands and EXECs that found a record locked by a transaction in a conflicting mode.
    pub plain_lock_waits: AtomicU64,
    pub queued_writes: AtomicU64,
    /// Commands of TXN.BEGIN BUSY transactions refused with TXNBUSY (the transaction stays open).
    pub busy_replies: AtomicU64,
    /// Deadlock refusals of a request on a record its transaction already held in another mode (a read
    /// then a write of the same set): the part of `aborts_deadlock` that declaring modes up front avoids.
    pub deadlocks_on_upgrade: AtomicU64,
}

impl TxnStats {
    /// Aborts by cause: the lock table's causes, then TXN.ABORT (`client`) and disconnects.
    pub fn aborts(&self) -> Vec<(&'static str, u64)> {
        let causes = AbortCause::ALL
            .into_iter()
            .map(|cause| (cause.name(), self.abort_counter(cause)));
        let ended = [
            ("client", &self.aborts_client),
            ("disconnect", &self.aborts_disconnect),
        ];
        causes
            .chain(ended)
            .map(|(name, counter)| (name, counter.load(Ordering::Relaxed)))
            .collect()
    }

    pub fn count_abort(&self, cause: AbortCause) {
        self.abort_counter(cause).fetch_add(1, Ordering::Relaxed);
    }

    fn abort_counter(&self, cause: AbortCause) -> &AtomicU64 {
        match cause {
            AbortCause::Conflict => &self.aborts_conflict,
            AbortCause::Deadlock => &self.aborts_deadlock,
            AbortCause::Timeout => &self.aborts_timeout,
            AbortCause::Full => &self.aborts_full,
            AbortCause::Flush => &self.aborts_flush,
        }
    }
}

/// The settings the lock table follows (CONFIG txn-*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnSettings {
    /// Each data type's modes (boosting); false = the reader/writer baseline.
    pub abstract_locks: bool,
    pub phasing: bool,
    pub phase_max_ms: u64,
}

struct Locks {
    table: LockTable<LockKey>,
    /// How to wake each waiting transaction when a release grants its lock.
    wakers: HashMap<TxnId, Arc<Notify>, foldhash::fast::RandomState>,
    /// Conflicts per (requested mode, held mode) name pair.
    conflicts: HashMap<(&'static str, &'static str), u64, foldhash::fast::RandomState>,
}

/// Every transaction's shared state: the lock table, the wakers of waiting transactions, counters.
pub struct Txns {
    locks: Mutex<Locks>,
    /// Records locked now; plain commands skip the table while it is 0.
    locked_records: AtomicUsize,
    next_id: AtomicU64,
    abstract_locks: AtomicBool,
    /// Keyspace-wide writes so far (FLUSHALL, FLUSHDB, SWAPDB, flush_all). They take no record locks, so
    /// a transaction open across one aborts instead (`flush`): its reads may straddle it.
    keyspace_writes: AtomicU64,
    pub stats: TxnStats,
}

/// Whether a lock request that cannot be granted now queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Plain commands and EXEC: their clients cannot retry them as transactions.
    Always,
    /// Transactions: queue when phasing is on, fail fast when it is off.
    IfPhasing,
    /// Transactions begun with TXN.BEGIN NOWAIT (a combining client's: they must never wait on the server
    /// while their group waits for them).
    Never,
}

/// A lock request that was not refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// Granted now; false: queued.
    pub granted: bool,
    /// The transaction held nothing on the record before: the record joins those it must release.
    pub first: bool,
}

/// The modes one command takes on one record: most take one, HSET of two fields two; held inline, so a
/// command's lock request allocates nothing for them.
pub type Modes = smallvec::SmallVec<[Mode; 2]>;

/// One lock request of a command: a record and the modes the command takes on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLock {
    pub key: LockKey,
    pub modes: Modes,
}

impl Txns {
    pub fn new(settings: TxnSettings) -> Txns {
        let txns = Txns {
            locks: Mutex::new(Locks {
                table: LockTable::new(LockConfig::default()),
                wakers: HashMap::default(),
                conflicts: HashMap::default(),
            }),
            locked_records: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            abstract_locks: AtomicBool::new(true),
            keyspace_writes: AtomicU64::new(0),
            stats: TxnStats::default(),
        };
        txns.configure(settings);
        txns
    }

    /// Applies CONFIG SET txn-*; waiting requests keep their place.
    pub fn configure(&self, settings: TxnSettings) {
        let mut locks = self.locks.lock();
        let config = LockConfig {
            phasing: settings.phasing,
            phase_max: Duration::from_millis(settings.phase_max_ms),
            ..locks.table.config()
        };
        locks.table.set_config(config);
        self.abstract_locks
            .store(settings.abstract_locks, Ordering::Relaxed);
    }

    pub fn abstract_locks(&self) -> bool {
        self.abstract_locks.load(Ordering::Relaxed)
    }

    pub fn new_id(&self) -> TxnId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        assert!(
            id < TxnId::MAX,
            "transaction ids never reach TxnId::MAX (the lock table's holder-less check)"
        );
        id
    }

    /// Called by a keyspace-wide write with every shard it changes locked, so a commit, which checks
    /// [`Txns::keyspace_writes`] with its own shards locked, sees it or runs wholly before it.
    pub fn note_keyspace_write(&self) {
        self.keyspace_writes.fetch_add(1, Ordering::SeqCst);
    }

    pub fn keyspace_writes(&self) -> u64 {
        self.keyspace_writes.load(Ordering::SeqCst)
    }

    /// Whether any record is locked: while none is, plain commands skip the table.
    pub fn any_locked(&self) -> bool {
        self.locked_records.load(Ordering::SeqCst) != 0
    }

    pub fn locked_records(&self) -> usize {
        self.locked_records.load(Ordering::Relaxed)
    }

    /// Whether a plain command may run now on every record of `locks` (it holds nothing). Call with the
    /// records' shards locked.
    pub fn admits_all(&self, requests: &[KeyLock]) -> bool {
        let locks = self.locks.lock();
        let now = Instant::now();
        requests
            .iter()
            .all(|request| locks.table.admits(&request.key, &request.modes, now))
    }

    /// Asks for one record's lock, granted at once or queued (`waker` is notified when a release grants
    /// it) as `wait` says.
    pub fn acquire(
        &self,
        txn: TxnId,
        request: &KeyLock,
        wait: WaitPolicy,
        waker: &Arc<Notify>,
    ) -> Result<Acquired, AbortCause> {
        let mut locks = self.locks.lock();
        let now = Instant::now();
        let may_wait = match wait {
            WaitPolicy::Always => true,
            WaitPolicy::IfPhasing => locks.table.config().phasing,
            WaitPolicy::Never => false,
        };
        // A transaction's records are those it holds or waits for; a waiter re-runs its command only once
        // granted, as a holder. So a record is new to it exactly when it did not hold it before.
        let (answer, held_before) =
            locks
                .table
                .acquire_noting_holder(&request.key, txn, &request.modes, now, may_wait);
        if answer == Acquire::Conflict(ConflictCause::Deadlock) && held_before {
            self.stats
                .deadlocks_on_upgrade
                .fetch_add(1, Ordering::Relaxed);
        }
        if answer != Acquire::Granted {
            let blocking = locks.table.blocking_mode(&request.key, txn, &request.modes);
            if let Some(held) = blocking {
                *locks
                    .conflicts
                    .entry((request.modes[0].name, held.name))
                    .or_default() += 1;
            }
        }
        debug_assert!(
            match answer {
                Acquire::Granted => locks
                    .table
                    .holders(&request.key)
                    .is_some_and(|holders| holders.iter().any(|&(holder, _)| holder == txn)),
                Acquire::Waiting => locks.table.waiting_for(txn) == Some(&request.key),
                Acquire::Conflict(_) => locks.table.waiting_for(txn).is_none(),
            },
            "a granted request holds its record, a queued one waits for it, a refused one for nothing"
        );
        let first = !held_before;
        let result = match answer {
            Acquire::Granted => Ok(Acquired {
                granted: true,
                first,
            }),
            Acquire::Waiting => {
                self.stats.lock_waits.fetch_add(1, Ordering::Relaxed);
                let earlier = locks.wakers.insert(txn, waker.clone());
                debug_assert!(
                    earlier.is_none(),
                    "a transaction waits for one record at a time, with one waker"
                );
                Ok(Acquired {
                    granted: false,
                    first,
                })
            }
            Acquire::Conflict(cause) => Err(AbortCause::from_conflict(cause)),
        };
        self.locked_records
            .store(locks.table.len(), Ordering::SeqCst);
        result
    }

    /// Releases `txn`'s locks on `keys` and withdraws its wait; wakes the transactions this lets in.
    pub fn release(&self, txn: TxnId, keys: &[LockKey]) {
        let mut locks = self.locks.lock();
        locks.wakers.remove(&txn);
        let granted = locks.table.release(keys, txn, Instant::now());
        for (_, admitted) in granted {
            let waker = locks.wakers.remove(&admitted);
            // a granted waiter without a waker would sleep until its wait times out
            debug_assert!(waker.is_some(), "every waiting transaction has a waker");
            if let Some(waker) = waker {
                waker.notify_one();
            }
        }
        self.locked_records
            .store(locks.table.len(), Ordering::SeqCst);
    }

    /// Whether `txn` still waits for a lock (false once a release granted it).
    pub fn is_waiting(&self, txn: TxnId) -> bool {
        self.locks.lock().table.waiting_for(txn).is_some()
    }

    /// Conflicts per (requested, held) mode pair, most frequent first.
    pub fn conflicts(&self) -> Vec<((&'static str, &'static str), u64)> {
        let mut pairs: Vec<_> = self
            .locks
            .lock()
            .conflicts
            .iter()
            .map(|(&pair, &count)| (pair, count))
            .collect();
        pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        pairs
    }

    /// Checks the table's invariants (tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.locks.lock().table.check_invariants()
    }
}

/// INFO `txn`: counters, locks held now, and conflicts per pair of modes (requested, held), as Claret's
/// Figure 9 counts conflicts per pair of operations.
pub fn info_section(txns: &Txns, locks: &str, phasing: bool, text: &mut String) {
    use std::fmt::Write;
    let stats = &txns.stats;
    text.push_str("# Txn\r\n");
    let mut field = |name: &str, value: &dyn std::fmt::Display| {
        let _ = write!(text, "{name}:{value}\r\n");
    };
    field("txn_locks", &locks);
    field("txn_phasing", &crate::units::yes_no(phasing));
    field("txn_begun", &stats.begun.load(Ordering::Relaxed));
    field("txn_commits", &stats.commits.load(Ordering::Relaxed));
    for (cause, count) in stats.aborts() {
        field(&format!("txn_aborts_{cause}"), &count);
    }
    let counters = [
        ("txn_queued_writes", &stats.queued_writes),
        ("txn_lock_waits", &stats.lock_waits),
        ("txn_lock_wait_us", &stats.lock_wait_us),
        ("txn_plain_lock_waits", &stats.plain_lock_waits),
        ("txn_busy_replies", &stats.busy_replies),
        ("txn_deadlocks_on_upgrade", &stats.deadlocks_on_upgrade),
    ];
    for (name, counter) in counters {
        field(name, &counter.load(Ordering::Relaxed));
    }
    field("txn_locked_records", &txns.locked_records());
    for ((requested, held), count) in txns.conflicts() {
        field(&format!("conflict_{requested}_{held}"), &count);
    }
}
