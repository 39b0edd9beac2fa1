//! The lock table: boosting (shared modes hold together), the reader/writer baseline, phasing and its
//! fairness bound, fail-fast without phasing, deadlock detection across records, limits, and the table's
//! invariants under random interleavings.
use fallow_txn::lock::{Acquire, ConflictCause, LockConfig, LockTable, TxnId};
use fallow_txn::types::set::{ADD, READ, REMOVE};
use fallow_txn::Mode;
use proptest::prelude::*;
use std::time::{Duration, Instant};

const WRITE: Mode = Mode::exclusive("write");

fn table() -> LockTable<&'static str> {
    LockTable::new(LockConfig::default())
}

#[test]
fn commuting_operations_share_the_lock_and_the_next_phase_admits_a_whole_mode() {
    let now = Instant::now();
    let mut locks = table();
    assert_eq!(locks.acquire(&"s", 1, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 2, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 3, READ, now), Acquire::Waiting);
    assert_eq!(locks.acquire(&"s", 4, REMOVE, now), Acquire::Waiting);
    assert_eq!(locks.acquire(&"s", 5, READ, now), Acquire::Waiting);
    assert!(locks.release(&["s"], 1, now).is_empty(), "2 still holds");
    // the reads came first: both start the next phase together
    assert_eq!(locks.release(&["s"], 2, now), vec![("s", 3), ("s", 5)]);
    assert!(locks
        .holders(&"s")
        .unwrap()
        .iter()
        .all(|&(_, mode)| mode == READ));
    assert_eq!(locks.waiting_for(4), Some(&"s"));
    locks.release(&["s"], 3, now);
    assert_eq!(locks.release(&["s"], 5, now), vec![("s", 4)]);
    assert!(locks.release(&["s"], 4, now).is_empty());
    assert!(locks.is_empty());
    locks.check_invariants().unwrap();
}

#[test]
fn exclusive_modes_admit_one_holder_at_a_time() {
    let now = Instant::now();
    let mut locks = table();
    assert_eq!(locks.acquire(&"k", 1, WRITE, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"k", 2, WRITE, now), Acquire::Waiting);
    assert_eq!(locks.acquire(&"k", 3, WRITE, now), Acquire::Waiting);
    assert_eq!(locks.release(&["k"], 1, now), vec![("k", 2)]);
    assert_eq!(locks.release(&["k"], 2, now), vec![("k", 3)]);
    locks.check_invariants().unwrap();
}

#[test]
fn without_phasing_a_conflict_fails_at_once() {
    let now = Instant::now();
    let mut locks = LockTable::new(LockConfig {
        phasing: false,
        ..LockConfig::default()
    });
    assert_eq!(locks.acquire(&"s", 1, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 2, ADD, now), Acquire::Granted);
    assert_eq!(
        locks.acquire(&"s", 3, READ, now),
        Acquire::Conflict(ConflictCause::Busy)
    );
}

#[test]
fn a_phase_stops_admitting_newcomers_after_phase_max_while_others_wait() {
    let start = Instant::now();
    let mut locks = table();
    assert_eq!(locks.acquire(&"s", 1, ADD, start), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 2, READ, start), Acquire::Waiting);
    let early = start + Duration::from_millis(5);
    assert_eq!(locks.acquire(&"s", 3, ADD, early), Acquire::Granted);
    let late = start + Duration::from_millis(11);
    assert_eq!(locks.acquire(&"s", 4, ADD, late), Acquire::Waiting);
    locks.release(&["s"], 1, late);
    assert_eq!(locks.release(&["s"], 3, late), vec![("s", 2)]);
    assert_eq!(locks.release(&["s"], 2, late), vec![("s", 4)]);
}

#[test]
fn a_wait_that_closes_a_cycle_is_refused() {
    let now = Instant::now();
    let mut locks = table();
    locks.acquire(&"a", 1, WRITE, now);
    locks.acquire(&"b", 2, WRITE, now);
    locks.acquire(&"c", 3, WRITE, now);
    assert_eq!(locks.acquire(&"b", 1, WRITE, now), Acquire::Waiting);
    assert_eq!(locks.acquire(&"c", 2, WRITE, now), Acquire::Waiting);
    // 3 -> a (held by 1) -> b (held by 2) -> c (held by 3): a cycle
    assert_eq!(
        locks.acquire(&"a", 3, WRITE, now),
        Acquire::Conflict(ConflictCause::Deadlock)
    );
    locks.check_invariants().unwrap();
    // 3 aborts: 2 gets c, then 1 gets b once 2 commits
    assert_eq!(locks.release(&["c"], 3, now), vec![("c", 2)]);
    assert_eq!(locks.release(&["b", "c"], 2, now), vec![("b", 1)]);
}

#[test]
fn a_holder_changes_mode_alone_or_waits_for_the_others_to_leave() {
    let now = Instant::now();
    let mut locks = table();
    assert_eq!(locks.acquire(&"s", 1, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 1, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"s", 1, READ, now), Acquire::Granted);
    assert_eq!(locks.holders(&"s").unwrap(), &[(1, ADD), (1, READ)]);
    assert_eq!(
        locks.acquire(&"s", 2, ADD, now),
        Acquire::Waiting,
        "1 also reads"
    );
    assert_eq!(locks.acquire(&"t", 3, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"t", 4, ADD, now), Acquire::Granted);
    // 3 adds, then reads: it waits for 4's add to commit, keeping its own
    assert_eq!(locks.acquire(&"t", 3, READ, now), Acquire::Waiting);
    // 4 does the same: both would wait for each other
    assert_eq!(
        locks.acquire(&"t", 4, READ, now),
        Acquire::Conflict(ConflictCause::Deadlock)
    );
    locks.check_invariants().unwrap();
    assert_eq!(locks.release(&["t"], 4, now), vec![("t", 3)]);
    assert_eq!(locks.holders(&"t").unwrap(), &[(3, ADD), (3, READ)]);
    locks.check_invariants().unwrap();
}

#[test]
fn without_phasing_a_holder_asking_for_a_mode_that_does_not_fit_fails() {
    let now = Instant::now();
    let mut locks = LockTable::new(LockConfig {
        phasing: false,
        ..LockConfig::default()
    });
    assert_eq!(locks.acquire(&"t", 1, ADD, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"t", 2, ADD, now), Acquire::Granted);
    assert_eq!(
        locks.acquire(&"t", 1, READ, now),
        Acquire::Conflict(ConflictCause::Busy)
    );
}

#[test]
fn per_part_modes_share_the_lock_for_different_parts_only() {
    let now = Instant::now();
    let mut locks = table();
    let field = |part| Mode::part("field-write", part);
    assert_eq!(locks.acquire(&"h", 1, field(10), now), Acquire::Granted);
    assert_eq!(locks.acquire(&"h", 2, field(20), now), Acquire::Granted);
    assert_eq!(locks.acquire(&"h", 3, field(10), now), Acquire::Waiting);
    assert_eq!(locks.acquire(&"h", 4, READ, now), Acquire::Waiting);
    // the phase is young: another field still joins although a read waits
    assert_eq!(locks.acquire(&"h", 5, field(30), now), Acquire::Granted);
    locks.check_invariants().unwrap();
    // field 10 is free again: its waiting writer joins the running phase beside fields 20 and 30
    assert_eq!(locks.release(&["h"], 1, now), vec![("h", 3)]);
    assert!(locks.release(&["h"], 2, now).is_empty());
    assert!(locks.release(&["h"], 5, now).is_empty());
    assert_eq!(locks.release(&["h"], 3, now), vec![("h", 4)]);
}

#[test]
fn a_freed_part_is_not_handed_to_its_writer_once_the_phase_is_old() {
    let start = Instant::now();
    let mut locks = table();
    let field = |part| Mode::part("field-write", part);
    assert_eq!(locks.acquire(&"h", 1, field(10), start), Acquire::Granted);
    assert_eq!(locks.acquire(&"h", 2, field(20), start), Acquire::Granted);
    assert_eq!(locks.acquire(&"h", 3, READ, start), Acquire::Waiting);
    assert_eq!(locks.acquire(&"h", 4, field(10), start), Acquire::Waiting);
    let late = start + Duration::from_millis(11);
    assert!(
        locks.release(&["h"], 1, late).is_empty(),
        "the read has waited long enough"
    );
    assert_eq!(locks.release(&["h"], 2, late), vec![("h", 3)]);
    assert_eq!(locks.release(&["h"], 3, late), vec![("h", 4)]);
    locks.check_invariants().unwrap();
}

#[test]
fn one_request_takes_several_parts_at_once() {
    let now = Instant::now();
    let mut locks = table();
    let field = |part| Mode::part("field-write", part);
    assert_eq!(locks.acquire(&"h", 1, field(2), now), Acquire::Granted);
    // fields 1 and 2: 2 is taken, so the request waits whole instead of holding field 1 meanwhile
    assert_eq!(
        locks.acquire_modes(&"h", 2, &[field(1), field(2)], now, true),
        Acquire::Waiting
    );
    assert_eq!(locks.holders(&"h").unwrap().len(), 1);
    assert_eq!(locks.release(&["h"], 1, now), vec![("h", 2)]);
    assert_eq!(locks.holders(&"h").unwrap().len(), 2);
    locks.check_invariants().unwrap();
}

#[test]
fn plain_commands_look_without_taking_and_may_always_wait() {
    let now = Instant::now();
    let mut locks = LockTable::new(LockConfig {
        phasing: false,
        ..LockConfig::default()
    });
    assert_eq!(locks.acquire(&"s", 1, ADD, now), Acquire::Granted);
    assert!(locks.admits(&"s", &[ADD], now), "adds share");
    assert!(!locks.admits(&"s", &[READ], now));
    assert!(locks.admits(&"t", &[READ], now), "nothing holds t");
    assert_eq!(locks.blocking_mode(&"s", 2, &[READ]), Some(ADD));
    assert_eq!(locks.blocking_mode(&"s", 2, &[ADD]), None);
    // fail-fast applies to transactions; a plain command queues (it cannot be retried as a transaction)
    assert_eq!(
        locks.acquire_modes(&"s", 2, &[READ], now, true),
        Acquire::Waiting
    );
    assert_eq!(locks.release(&["s"], 1, now), vec![("s", 2)]);
    locks.check_invariants().unwrap();
}

#[test]
fn a_request_says_whether_its_transaction_held_the_record_before() {
    let now = Instant::now();
    let mut locks = table();
    let held_before = |locks: &mut LockTable<&'static str>, txn, mode| {
        locks.acquire_noting_holder(&"s", txn, &[mode], now, true)
    };
    assert_eq!(held_before(&mut locks, 1, ADD), (Acquire::Granted, false));
    assert_eq!(held_before(&mut locks, 1, ADD), (Acquire::Granted, true));
    assert_eq!(held_before(&mut locks, 2, ADD), (Acquire::Granted, false));
    assert_eq!(held_before(&mut locks, 3, READ), (Acquire::Waiting, false));
    // 1 asks for another mode beside 2's add: it waits, still a holder
    assert_eq!(held_before(&mut locks, 1, READ), (Acquire::Waiting, true));
    locks.check_invariants().unwrap();
}

#[test]
fn the_table_and_each_queue_are_bounded() {
    let now = Instant::now();
    let mut locks = LockTable::new(LockConfig {
        records_max: 2,
        waiters_max: 1,
        ..LockConfig::default()
    });
    locks.acquire(&"a", 1, WRITE, now);
    locks.acquire(&"b", 1, WRITE, now);
    assert_eq!(
        locks.acquire(&"c", 1, WRITE, now),
        Acquire::Conflict(ConflictCause::Full)
    );
    assert_eq!(locks.acquire(&"a", 2, WRITE, now), Acquire::Waiting);
    assert_eq!(
        locks.acquire(&"a", 3, WRITE, now),
        Acquire::Conflict(ConflictCause::Full)
    );
}

#[derive(Clone, Debug)]
enum Step {
    Acquire { txn: TxnId, key: usize, mode: usize },
    Finish { txn: TxnId },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u64..7, 0usize..4, 0usize..6).prop_map(|(txn, key, mode)| Step::Acquire { txn, key, mode }),
        1 => (1u64..7).prop_map(|txn| Step::Finish { txn }),
    ]
}

const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const MODES: [Mode; 6] = [
    ADD,
    REMOVE,
    READ,
    WRITE,
    Mode::part("field", 1),
    Mode::part("field", 2),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Random interleavings of transactions (a transaction that waits issues nothing until granted; a
    /// refused one aborts): the invariants hold after every step and every transaction can finish.
    #[test]
    fn invariants_hold_under_random_interleavings(steps in proptest::collection::vec(step(), 1..60)) {
        let now = Instant::now();
        let mut locks = table();
        let mut touched: std::collections::HashMap<TxnId, Vec<&'static str>> = Default::default();
        for step in steps {
            match step {
                Step::Acquire { txn, key, mode } => {
                    if locks.waiting_for(txn).is_some() {
                        continue;
                    }
                    let key = KEYS[key];
                    match locks.acquire(&key, txn, MODES[mode], now) {
                        Acquire::Granted | Acquire::Waiting => touched.entry(txn).or_default().push(key),
                        Acquire::Conflict(_) => {
                            let keys = touched.remove(&txn).unwrap_or_default();
                            locks.release(&keys, txn, now);
                        }
                    }
                }
                Step::Finish { txn } => {
                    if locks.waiting_for(txn).is_some() {
                        continue;
                    }
                    let keys = touched.remove(&txn).unwrap_or_default();
                    locks.release(&keys, txn, now);
                }
            }
            locks.check_invariants().map_err(TestCaseError::fail)?;
        }
        // drain: finishing every transaction that holds or waits empties the table
        for _ in 0..16 {
            let runnable: Vec<TxnId> = touched.keys().copied().filter(|&t| locks.waiting_for(t).is_none()).collect();
            for txn in runnable {
                let keys = touched.remove(&txn).unwrap_or_default();
                locks.release(&keys, txn, now);
                locks.check_invariants().map_err(TestCaseError::fail)?;
            }
        }
        prop_assert!(touched.is_empty(), "stuck: {:?}", touched);
        prop_assert!(locks.is_empty());
    }
}

// The forbidden requests: each breaks a precondition of the table and panics.

#[test]
#[should_panic(expected = "a request names at least one mode")]
fn a_request_without_modes_panics() {
    table().acquire_modes(&"s", 1, &[], Instant::now(), true);
}

#[test]
#[should_panic(expected = "a request names at least one mode")]
fn a_plain_check_without_modes_panics() {
    table().admits(&"s", &[], Instant::now());
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "a request's modes are all of one name")]
fn a_request_in_modes_of_two_names_panics() {
    table().acquire_modes(&"s", 1, &[ADD, READ], Instant::now(), true);
}

#[test]
#[should_panic(expected = "TxnId::MAX is no transaction's id")]
fn the_holder_less_id_cannot_take_a_lock() {
    table().acquire(&"s", TxnId::MAX, ADD, Instant::now());
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "a waiting transaction issues no request until it is granted")]
fn a_waiting_transaction_asking_again_panics() {
    let now = Instant::now();
    let mut locks = table();
    assert_eq!(locks.acquire(&"a", 1, WRITE, now), Acquire::Granted);
    assert_eq!(locks.acquire(&"a", 2, WRITE, now), Acquire::Waiting);
    // a second wait would overwrite 2's edge in the waits-for graph and strand its place in a's queue
    locks.acquire(&"b", 2, WRITE, now);
}

#[test]
#[should_panic(expected = "a lock table admits at least one record")]
fn a_table_for_no_records_panics() {
    LockTable::<&str>::new(LockConfig {
        records_max: 0,
        ..LockConfig::default()
    });
}
