//! The lock table: one abstract lock per record (Claret §4.1) with its phaser (§4.2); one table serves all
//! the shards of a process.
//!
//! A record's lock is held in one mode at a time by any number of transactions whose operations take that
//! mode, when it is shared (boosting; under the reader/writer baseline only reads share). A request that
//! cannot join waits in the record's queue when phasing is on, or fails at once when it is off (the client
//! retries, as Claret's baseline). When the last holder leaves, the next phase starts in the mode of the
//! waiter that came first and admits every waiter of that mode. A phase stops admitting newcomers once it has run
//! `phase_max` while others wait, so a stream of one mode cannot starve the rest.
//!
//! Deadlocks are detected when they would form: every transaction waits for at most one record at a time
//! (interactive transactions run one command at a time), so the table keeps the waits-for graph and refuses
//! a wait that would close a cycle (`Conflict(Deadlock)`: the requester aborts and may retry). All shards of a
//! process share one table, so cycles across shards are seen too; between processes the server's bound on
//! each wait breaks them. Detection rather than wait-die or wound-wait: phasing keeps many transactions of
//! different ages waiting on a hot record, and age rules would abort most of them at every phase change.
use crate::adt::Mode;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A transaction's identity and age: smaller is older.
pub type TxnId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockConfig {
    /// Queue requests that cannot join (phasing); false = fail fast.
    pub phasing: bool,
    /// How long a phase keeps admitting newcomers while other modes wait.
    pub phase_max: Duration,
    /// Most records locked at once in this table; further requests fail (every table has a limit).
    pub records_max: usize,
    /// Most waiters per record.
    pub waiters_max: usize,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            phasing: true,
            phase_max: Duration::from_millis(10),
            records_max: 1 << 20,
            waiters_max: 4096,
        }
    }
}

/// The answer to a lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    Granted,
    /// Queued: a later `release` returns it among the granted.
    Waiting,
    /// Refused: the transaction must abort (and may retry).
    Conflict(ConflictCause),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictCause {
    /// Phasing is off and the lock is held in an incompatible mode.
    Busy,
    /// Waiting would close a cycle of transactions waiting for each other.
    Deadlock,
    /// The table or the record's queue is full.
    Full,
}

/// Waiters that a release let in: wake them.
pub type Granted<K> = Vec<(K, TxnId)>;

#[derive(Debug)]
struct RecordLock {
    mode: Mode,
    holders: Vec<TxnId>,
    phase_started: Instant,
    waiting: VecDeque<(TxnId, Mode)>,
}

/// A mode for a transaction that holds a record alone in one mode and asks for another.
const MIXED: Mode = Mode::exclusive("mixed");

pub struct LockTable<K> {
    config: LockConfig,
    records: HashMap<K, RecordLock>,
    /// The record each waiting transaction waits for.
    waits_for: HashMap<TxnId, K>,
}

impl<K: Hash + Eq + Clone> LockTable<K> {
    pub fn new(config: LockConfig) -> Self {
        LockTable {
            config,
            records: HashMap::new(),
            waits_for: HashMap::new(),
        }
    }

    pub fn config(&self) -> LockConfig {
        self.config
    }

    pub fn set_config(&mut self, config: LockConfig) {
        self.config = config;
    }

    /// Records locked or waited for now.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Asks for `key`'s lock in `mode` for `txn`.
    pub fn acquire(&mut self, key: &K, txn: TxnId, mode: Mode, now: Instant) -> Acquire {
        if !self.records.contains_key(key) {
            if self.records.len() >= self.config.records_max {
                return Acquire::Conflict(ConflictCause::Full);
            }
            self.records.insert(
                key.clone(),
                RecordLock {
                    mode,
                    holders: vec![txn],
                    phase_started: now,
                    waiting: VecDeque::new(),
                },
            );
            return Acquire::Granted;
        }
        let config = self.config;
        let lock = self.records.get_mut(key).expect("checked above");
        if lock.holders.contains(&txn) {
            return lock.rejoin(txn, mode);
        }
        let others_wait = lock.waiting.iter().any(|&(_, waiting)| waiting != mode);
        let phase_open = !others_wait || now.duration_since(lock.phase_started) < config.phase_max;
        if lock.mode.compatible(mode) && phase_open {
            lock.holders.push(txn);
            return Acquire::Granted;
        }
        if !config.phasing {
            return Acquire::Conflict(ConflictCause::Busy);
        }
        if lock.waiting.len() >= config.waiters_max {
            return Acquire::Conflict(ConflictCause::Full);
        }
        if self.would_deadlock(key, txn) {
            return Acquire::Conflict(ConflictCause::Deadlock);
        }
        let lock = self.records.get_mut(key).expect("checked above");
        lock.waiting.push_back((txn, mode));
        self.waits_for.insert(txn, key.clone());
        Acquire::Waiting
    }

    /// Whether `txn` waiting for `key` closes a cycle: some holder of `key` waits, directly or through
    /// others, for a record `txn` holds.
    fn would_deadlock(&self, key: &K, txn: TxnId) -> bool {
        let mut stack: Vec<TxnId> = self.records[key].holders.clone();
        let mut seen = std::collections::HashSet::new();
        while let Some(holder) = stack.pop() {
            if holder == txn {
                return true;
            }
            if !seen.insert(holder) {
                continue;
            }
            if let Some(record) = self.waits_for.get(&holder) {
                stack.extend(self.records[record].holders.iter().copied());
            }
        }
        false
    }

    /// Releases every lock `txn` holds on `keys` and withdraws its wait (commit, abort, timeout); returns
    /// the waiters that now hold a lock.
    pub fn release(&mut self, keys: &[K], txn: TxnId, now: Instant) -> Granted<K> {
        let mut granted = Vec::new();
        if let Some(record) = self.waits_for.remove(&txn) {
            if let Some(lock) = self.records.get_mut(&record) {
                lock.waiting.retain(|&(waiter, _)| waiter != txn);
            }
        }
        for key in keys {
            let Some(lock) = self.records.get_mut(key) else {
                continue;
            };
            lock.holders.retain(|&holder| holder != txn);
            if !lock.holders.is_empty() {
                continue;
            }
            for admitted in lock.next_phase(now) {
                self.waits_for.remove(&admitted);
                granted.push((key.clone(), admitted));
            }
            if lock.holders.is_empty() {
                self.records.remove(key);
            }
        }
        granted
    }

    /// Checks the table's invariants (tests; `debug_assert` callers): holders of a record share its mode
    /// (or hold it alone), every waiter is recorded in the waits-for graph and waits on a held record, and
    /// the graph has no cycle.
    pub fn check_invariants(&self) -> Result<(), String> {
        for lock in self.records.values() {
            if lock.holders.is_empty() {
                return Err("a record without holders stays in the table".into());
            }
            if lock.holders.len() > 1 && !lock.mode.shared {
                return Err(format!(
                    "{} holders of exclusive {:?}",
                    lock.holders.len(),
                    lock.mode
                ));
            }
            for &(waiter, _) in &lock.waiting {
                if !self.waits_for.contains_key(&waiter) {
                    return Err(format!("waiter {waiter} missing from the waits-for graph"));
                }
            }
        }
        for (&txn, record) in &self.waits_for {
            let Some(lock) = self.records.get(record) else {
                return Err(format!("{txn} waits for a record nobody holds"));
            };
            if !lock.waiting.iter().any(|&(waiter, _)| waiter == txn) {
                return Err(format!(
                    "{txn} is in the graph but not in the record's queue"
                ));
            }
            if self.would_deadlock(record, txn) {
                return Err(format!("{txn} waits for itself through a cycle"));
            }
        }
        Ok(())
    }

    /// The transaction `txn` waits for, if any.
    pub fn waiting_for(&self, txn: TxnId) -> Option<&K> {
        self.waits_for.get(&txn)
    }

    /// The holders of `key`'s lock and its mode (for INFO and tests).
    pub fn holders(&self, key: &K) -> Option<(Mode, &[TxnId])> {
        self.records
            .get(key)
            .map(|lock| (lock.mode, lock.holders.as_slice()))
    }
}

impl RecordLock {
    /// A holder asks again: same mode or a mode that shares with its own holds; a sole holder may move to a
    /// combined exclusive mode. A holder that shares the lock and asks for another mode would have to wait
    /// for the others while holding: that upgrade is refused (the transaction aborts and may retry).
    fn rejoin(&mut self, txn: TxnId, mode: Mode) -> Acquire {
        if self.mode == mode || self.mode.compatible(mode) {
            return Acquire::Granted;
        }
        if self.holders == [txn] {
            self.mode = MIXED;
            return Acquire::Granted;
        }
        Acquire::Conflict(ConflictCause::Busy)
    }

    /// Starts the next phase in the mode of the waiter that came first: admits every waiter of that mode
    /// (only that one when the mode is exclusive). Returns the admitted.
    fn next_phase(&mut self, now: Instant) -> Vec<TxnId> {
        let Some(&(first, mode)) = self.waiting.front() else {
            return Vec::new();
        };
        let admitted: Vec<TxnId> = if mode.shared {
            self.waiting
                .iter()
                .filter(|&&(_, waiting)| waiting == mode)
                .map(|&(id, _)| id)
                .collect()
        } else {
            vec![first]
        };
        self.waiting.retain(|(id, _)| !admitted.contains(id));
        self.mode = mode;
        self.holders.clone_from(&admitted);
        self.phase_started = now;
        admitted
    }
}
