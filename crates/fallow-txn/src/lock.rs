//! The lock table: one abstract lock per record (Claret §4.1) with its phaser (§4.2); one table serves all
//! the shards of a process.
//!
//! A record's lock is held by any number of transactions whose modes are pairwise compatible (boosting;
//! under the reader/writer baseline only reads share). A request that cannot join waits in the record's
//! queue when phasing is on, or fails at once when it is off (the client retries, as Claret's baseline).
//! When the last holder leaves, the next phase starts in the mode of the waiter that came first and admits
//! every waiter of that mode name that fits beside the others. A phase stops admitting newcomers once it
//! has run `phase_max` while other modes wait, so a stream of one mode cannot starve the rest.
//!
//! Deadlocks are detected when they would form: every transaction waits for at most one record at a time
//! (interactive transactions run one command at a time), so the table keeps the waits-for graph and refuses
//! a wait that would close a cycle (`Conflict(Deadlock)`: the requester aborts and may retry). All shards of a
//! process share one table, so cycles across shards are seen too; between processes the server's bound on
//! each wait breaks them. Detection rather than wait-die or wound-wait: phasing keeps many transactions of
//! different ages waiting on a hot record, and age rules would abort most of them at every phase change.
use crate::adt::Mode;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The table's maps are looked up several times per operation: foldhash, seeded per process as the store's
/// own sets are, rather than SipHash.
type FastHash = foldhash::fast::RandomState;

/// A transaction's identity.
pub type TxnId = u64;

/// The holder `LockTable::admits` asks for: no transaction has this id, so it holds nothing.
const NO_TXN: TxnId = TxnId::MAX;

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
    /// Phasing is off and a holder's mode does not admit the request.
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
    /// Each hold with its mode; a transaction may hold a record in several modes. Inline while two or
    /// fewer, so locking a record nobody else holds allocates only its key.
    holders: SmallVec<[(TxnId, Mode); 2]>,
    phase_started: Instant,
    /// Queued requests: a transaction and the modes of one operation (all of one name).
    waiting: VecDeque<(TxnId, Vec<Mode>)>,
}

pub struct LockTable<K> {
    config: LockConfig,
    records: HashMap<K, RecordLock, FastHash>,
    /// The record each waiting transaction waits for.
    waits_for: HashMap<TxnId, K, FastHash>,
}

impl<K: Hash + Eq + Clone> LockTable<K> {
    pub fn new(config: LockConfig) -> Self {
        assert!(
            config.records_max > 0,
            "a lock table admits at least one record"
        );
        LockTable {
            config,
            records: HashMap::default(),
            waits_for: HashMap::default(),
        }
    }

    pub fn config(&self) -> LockConfig {
        self.config
    }

    pub fn set_config(&mut self, config: LockConfig) {
        assert!(
            config.records_max > 0,
            "a lock table admits at least one record"
        );
        self.config = config;
    }

    /// Records locked or waited for now.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Asks for `key`'s lock in `mode` for `txn`; queues per the table's phasing setting.
    pub fn acquire(&mut self, key: &K, txn: TxnId, mode: Mode, now: Instant) -> Acquire {
        self.acquire_modes(key, txn, &[mode], now, self.config.phasing)
    }

    /// Asks for `key`'s lock in every mode of `modes` at once (one operation on several parts of a record:
    /// HSET of several fields), all of one name. A request that cannot join queues when `may_wait` (phasing
    /// on, or a plain command, which cannot be retried by its client) and fails fast otherwise.
    pub fn acquire_modes(
        &mut self,
        key: &K,
        txn: TxnId,
        modes: &[Mode],
        now: Instant,
        may_wait: bool,
    ) -> Acquire {
        self.acquire_noting_holder(key, txn, modes, now, may_wait).0
    }

    /// `acquire_modes`, and whether `txn` held `key` already (in any mode) before the request. A waiter
    /// holds the record once granted, so false means `key` is new to `txn` unless it is waiting for it.
    pub fn acquire_noting_holder(
        &mut self,
        key: &K,
        txn: TxnId,
        modes: &[Mode],
        now: Instant,
        may_wait: bool,
    ) -> (Acquire, bool) {
        check_request(modes);
        assert!(
            txn != NO_TXN,
            "TxnId::MAX is no transaction's id (admits() asks as a holder of nothing)"
        );
        debug_assert!(
            !self.waits_for.contains_key(&txn),
            "a waiting transaction issues no request until it is granted"
        );
        let config = self.config;
        let Some(lock) = self.records.get_mut(key) else {
            if self.records.len() >= config.records_max {
                return (Acquire::Conflict(ConflictCause::Full), false);
            }
            let mut lock = RecordLock {
                holders: SmallVec::new(),
                phase_started: now,
                waiting: VecDeque::new(),
            };
            lock.hold(txn, modes);
            self.records.insert(key.clone(), lock);
            return (Acquire::Granted, false);
        };
        let holds = lock.holds(txn);
        // A holder asking for another mode (an add, then a size) joins if it fits beside the others and
        // else waits for them to leave, like any request.
        if (holds && lock.fits(txn, modes)) || lock.admits(txn, modes, now, config.phase_max) {
            lock.hold(txn, modes);
            return (Acquire::Granted, holds);
        }
        if !may_wait {
            return (Acquire::Conflict(ConflictCause::Busy), holds);
        }
        if lock.waiting.len() >= config.waiters_max {
            return (Acquire::Conflict(ConflictCause::Full), holds);
        }
        if self.would_deadlock(key, txn) {
            return (Acquire::Conflict(ConflictCause::Deadlock), holds);
        }
        let lock = self.records.get_mut(key).expect("looked up above");
        lock.waiting.push_back((txn, modes.to_vec()));
        self.waits_for.insert(txn, key.clone());
        (Acquire::Waiting, holds)
    }

    /// Whether a request in `modes` by a transaction that holds nothing on `key` would be granted now,
    /// without taking the lock: a plain command runs at once, under its shard's mutex, when this holds.
    pub fn admits(&self, key: &K, modes: &[Mode], now: Instant) -> bool {
        check_request(modes);
        match self.records.get(key) {
            None => true,
            Some(lock) => lock.admits(NO_TXN, modes, now, self.config.phase_max),
        }
    }

    /// A mode held on `key` by another transaction that keeps `modes` out (for conflict statistics).
    pub fn blocking_mode(&self, key: &K, txn: TxnId, modes: &[Mode]) -> Option<Mode> {
        debug_assert!(!modes.is_empty(), "a request names at least one mode");
        let lock = self.records.get(key)?;
        lock.holders
            .iter()
            .find(|&&(holder, held)| {
                holder != txn && modes.iter().any(|&mode| !held.compatible(mode))
            })
            .map(|&(_, held)| held)
            .or_else(|| lock.waiting.front().map(|(_, waiting)| waiting[0]))
    }

    /// Whether `txn` waiting for `key` closes a cycle: some other holder of `key` waits, directly or
    /// through others, for a record `txn` holds (`key` itself when `txn` holds it too).
    fn would_deadlock(&self, key: &K, txn: TxnId) -> bool {
        let mut stack: Vec<TxnId> = self.records[key]
            .holder_ids()
            .filter(|&holder| holder != txn)
            .collect();
        let mut seen: HashSet<TxnId, FastHash> = HashSet::default();
        while let Some(holder) = stack.pop() {
            if holder == txn {
                return true;
            }
            if !seen.insert(holder) {
                continue;
            }
            if let Some(record) = self.waits_for.get(&holder) {
                stack.extend(self.records[record].holder_ids());
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
                lock.waiting.retain(|(waiter, _)| *waiter != txn);
            }
        }
        for key in keys {
            let Some(lock) = self.records.get_mut(key) else {
                continue;
            };
            lock.holders.retain(|&mut (holder, _)| holder != txn);
            let admitted = if lock.holders.is_empty() {
                lock.next_phase(now)
            } else {
                // a per-part waiter (a write to a field just freed) may now fit beside the rest
                lock.admit_into_phase(now, self.config.phase_max)
            };
            for admitted in admitted {
                let waited_for = self.waits_for.remove(&admitted);
                debug_assert!(
                    waited_for.as_ref() == Some(key),
                    "a waiter is admitted to the record it waits for"
                );
                granted.push((key.clone(), admitted));
            }
            if lock.holders.is_empty() {
                // else its waiters would be dropped with it, never to be granted
                assert!(
                    lock.waiting.is_empty(),
                    "a record nobody holds has nobody waiting for it"
                );
                self.records.remove(key);
            }
        }
        debug_assert!(
            !self.waits_for.contains_key(&txn),
            "a released transaction waits for nothing"
        );
        debug_assert!(
            keys.iter()
                .all(|key| self.records.get(key).is_none_or(|lock| !lock.holds(txn))),
            "a released transaction holds no entry on the records it released"
        );
        granted
    }

    /// The record `txn` waits for, if any.
    pub fn waiting_for(&self, txn: TxnId) -> Option<&K> {
        self.waits_for.get(&txn)
    }

    /// The holds on `key`'s lock (for INFO and tests).
    pub fn holders(&self, key: &K) -> Option<&[(TxnId, Mode)]> {
        self.records.get(key).map(|lock| lock.holders.as_slice())
    }

    /// Checks the table's invariants (tests; `debug_assert` callers): the holds of different transactions
    /// on a record are compatible, every waiter is in the waits-for graph once and waits on a held record
    /// for modes of one name it does not hold yet, and the graph has no cycle.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut waiters = 0;
        for lock in self.records.values() {
            if lock.holders.is_empty() {
                return Err("a record without holders stays in the table".into());
            }
            for &(a, mode_a) in &lock.holders {
                for &(b, mode_b) in &lock.holders {
                    if a != b && !mode_a.compatible(mode_b) {
                        return Err(format!("{a} in {mode_a:?} beside {b} in {mode_b:?}"));
                    }
                }
            }
            for (waiter, modes) in &lock.waiting {
                if !self.waits_for.contains_key(waiter) {
                    return Err(format!("waiter {waiter} missing from the waits-for graph"));
                }
                if modes.is_empty() || modes.iter().any(|mode| mode.name != modes[0].name) {
                    return Err(format!(
                        "waiter {waiter} asks for {modes:?}: not one or more modes of one name"
                    ));
                }
                if modes
                    .iter()
                    .all(|mode| lock.holders.contains(&(*waiter, *mode)))
                {
                    return Err(format!(
                        "waiter {waiter} waits for {modes:?}, which it holds already"
                    ));
                }
            }
            waiters += lock.waiting.len();
        }
        if waiters != self.waits_for.len() {
            return Err(format!(
                "{waiters} queued requests but {} waiting transactions: one waits twice",
                self.waits_for.len()
            ));
        }
        for (&txn, record) in &self.waits_for {
            let Some(lock) = self.records.get(record) else {
                return Err(format!("{txn} waits for a record nobody holds"));
            };
            if !lock.waiting.iter().any(|(waiter, _)| *waiter == txn) {
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
}

impl RecordLock {
    fn holds(&self, txn: TxnId) -> bool {
        self.holders.iter().any(|&(holder, _)| holder == txn)
    }

    fn holder_ids(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.holders.iter().map(|&(holder, _)| holder)
    }

    /// Adds `txn`'s holds in `modes`, one entry per (transaction, mode): a transaction's many adds to a set
    /// hold it once.
    fn hold(&mut self, txn: TxnId, modes: &[Mode]) {
        debug_assert!(
            self.fits(txn, modes),
            "a lock is never granted to two transactions in conflicting modes"
        );
        for &mode in modes {
            if !self.holders.contains(&(txn, mode)) {
                self.holders.push((txn, mode));
            }
        }
    }

    /// Whether `txn` may hold the lock in `modes` beside the other transactions' holds.
    fn fits(&self, txn: TxnId, modes: &[Mode]) -> bool {
        self.holders
            .iter()
            .all(|&(holder, held)| holder == txn || modes.iter().all(|&mode| held.compatible(mode)))
    }

    /// Whether a newcomer in `modes` joins now: it fits, and the phase is still open to it (no other mode
    /// waits, or the phase has run less than `phase_max`).
    fn admits(&self, txn: TxnId, modes: &[Mode], now: Instant, phase_max: Duration) -> bool {
        let name = modes[0].name;
        let others_wait = self
            .waiting
            .iter()
            .any(|(_, waiting)| waiting[0].name != name);
        let phase_open = !others_wait || now.duration_since(self.phase_started) < phase_max;
        phase_open && self.fits(txn, modes)
    }

    /// Admits, in arrival order, the waiters of the running phase's mode name that now fit beside the
    /// holders, while the phase is open to them, and holders waiting for another mode that now fits.
    fn admit_into_phase(&mut self, now: Instant, phase_max: Duration) -> Vec<TxnId> {
        debug_assert!(
            !self.holders.is_empty(),
            "a running phase has at least one holder"
        );
        let phase = self.holders[0].1.name;
        let mut admitted = Vec::new();
        let mut index = 0;
        while index < self.waiting.len() {
            let (txn, modes) = &self.waiting[index];
            let joins = if self.holds(*txn) {
                self.fits(*txn, modes)
            } else {
                modes[0].name == phase && self.admits(*txn, modes, now, phase_max)
            };
            if joins {
                let (txn, modes) = self.waiting.remove(index).expect("index in range");
                self.hold(txn, &modes);
                admitted.push(txn);
            } else {
                index += 1;
            }
        }
        admitted
    }

    /// Starts the next phase with the mode name of the waiter that came first and admits, in arrival order,
    /// every waiter of that name that fits beside those admitted before it. Returns the admitted.
    fn next_phase(&mut self, now: Instant) -> Vec<TxnId> {
        debug_assert!(
            self.holders.is_empty(),
            "a phase changes only when the last holder has left"
        );
        let Some(phase) = self.waiting.front().map(|(_, modes)| modes[0].name) else {
            return Vec::new();
        };
        self.phase_started = now;
        let mut admitted = Vec::new();
        let mut still_waiting = VecDeque::with_capacity(self.waiting.len());
        for (txn, modes) in std::mem::take(&mut self.waiting) {
            if modes[0].name == phase && self.fits(txn, &modes) {
                self.hold(txn, &modes);
                admitted.push(txn);
            } else {
                still_waiting.push_back((txn, modes));
            }
        }
        self.waiting = still_waiting;
        debug_assert!(
            !admitted.is_empty(),
            "the next phase admits at least its first waiter"
        );
        admitted
    }
}

/// A request's precondition: one or more modes, all of one name (the phaser groups requests by name).
fn check_request(modes: &[Mode]) {
    assert!(!modes.is_empty(), "a request names at least one mode");
    debug_assert!(
        modes.iter().all(|mode| mode.name == modes[0].name),
        "a request's modes are all of one name"
    );
}

#[cfg(test)]
mod tests {
    //! The forbidden cases of the table's private state, provoked directly (the public API cannot reach
    //! them); `tests/lock_table.rs` provokes those the API can.
    use super::*;

    const WRITE: Mode = Mode::exclusive("write");
    const ADD: Mode = Mode::shared("set.add");

    fn held_by(txn: TxnId, mode: Mode, now: Instant) -> RecordLock {
        let mut lock = RecordLock {
            holders: SmallVec::new(),
            phase_started: now,
            waiting: VecDeque::new(),
        };
        lock.hold(txn, &[mode]);
        lock
    }

    #[test]
    fn compatible_holds_share_a_record() {
        let mut lock = held_by(1, ADD, Instant::now());
        lock.hold(2, &[ADD]);
        lock.hold(1, &[ADD]);
        assert_eq!(lock.holders.as_slice(), &[(1, ADD), (2, ADD)]);
        assert!(!lock.fits(3, &[WRITE]), "a write does not fit beside adds");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a lock is never granted to two transactions in conflicting modes")]
    fn granting_a_conflicting_mode_panics() {
        let mut lock = held_by(1, WRITE, Instant::now());
        lock.hold(2, &[WRITE]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a phase changes only when the last holder has left")]
    fn a_new_phase_while_the_lock_is_held_panics() {
        let now = Instant::now();
        let mut lock = held_by(1, WRITE, now);
        lock.waiting.push_back((2, vec![WRITE]));
        lock.next_phase(now);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a running phase has at least one holder")]
    fn admitting_into_a_phase_nobody_runs_panics() {
        let now = Instant::now();
        let mut lock = held_by(1, ADD, now);
        lock.holders.clear();
        lock.admit_into_phase(now, Duration::from_millis(10));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a waiter is admitted to the record it waits for")]
    fn a_waiter_queued_on_another_record_than_its_graph_edge_panics() {
        let now = Instant::now();
        let mut table = LockTable::new(LockConfig::default());
        assert_eq!(table.acquire(&"a", 1, WRITE, now), Acquire::Granted);
        assert_eq!(table.acquire(&"a", 2, WRITE, now), Acquire::Waiting);
        // corrupt the graph: 2 is queued on "a" but recorded as waiting for "b"
        table.waits_for.insert(2, "b");
        table.release(&["a"], 1, now);
    }
}
