//! The combiner's rules, driven directly (no server): members plan operations, the test plays the server
//! by calling `granted`, and threads stand in for concurrent transactions at the barriers.
use std::sync::Arc;
use std::thread;

use super::*;
use crate::commands::combine_key;

const WAIT: Duration = Duration::from_secs(5);

fn table() -> CombineTable {
    CombineTable::new(4, WAIT)
}

/// Plans `args` for `member` and, when it is to be sent, plays a server that queues it.
fn run(table: &CombineTable, member: MemberId, slot: usize, args: &[&[u8]]) -> Plan {
    let combine = combine_key(args);
    let plan = table.plan(member, 0, combine.clone(), slot, args, false);
    if plan == Plan::Send {
        table.returned(member);
    }
    if let (Plan::Send, Some(combine)) = (&plan, combine) {
        table.granted(member, args[1], &combine);
    }
    plan
}

/// A issues SADD s, then B combines onto A's lock: one group of two.
fn combined_pair(table: &CombineTable) -> (MemberId, MemberId) {
    let (a, b) = (table.join(), table.join());
    assert_eq!(run(table, a, 0, &[b"SADD", b"s", b"x"]), Plan::Send);
    assert_eq!(run(table, b, 0, &[b"SADD", b"s", b"y"]), Plan::Combined);
    (a, b)
}

/// `member`'s group aborted: its next operation is refused, and once it leaves the table is empty.
fn assert_group_aborted(table: &CombineTable, member: MemberId, slot: usize) {
    let plan = run(table, member, slot, &[b"GET", b"k"]);
    assert_eq!(plan, Plan::Aborted(AbortCause::Combine));
    table.fail(member, AbortCause::Combine);
    assert!(table.is_empty());
}

#[test]
fn same_mode_on_same_key_combines_and_merges_groups() {
    let table = table();
    let (a, b) = (table.join(), table.join());
    assert_eq!(run(&table, a, 0, &[b"SADD", b"s", b"x"]), Plan::Send);
    assert_eq!(run(&table, b, 0, &[b"SADD", b"s", b"y"]), Plan::Combined);
    assert_eq!(table.group_size(a), 2);
    // A different mode of the same record, or another field of a hash, does not combine.
    let c = table.join();
    assert_eq!(run(&table, c, 0, &[b"SCARD", b"s"]), Plan::Send);
    assert_eq!(
        run(&table, c, 1, &[b"HINCRBY", b"h", b"f", b"1"]),
        Plan::Send
    );
    let d = table.join();
    assert_eq!(
        run(&table, d, 0, &[b"HINCRBY", b"h", b"g", b"1"]),
        Plan::Send
    );
    assert_eq!(table.group_size(c), 1);
    assert_eq!(table.group_size(d), 1);
}

#[test]
fn a_lock_not_yet_granted_is_not_combined_with() {
    let table = table();
    let (a, b) = (table.join(), table.join());
    let args: &[&[u8]] = &[b"INCRBY", b"c", b"2"];
    assert_eq!(
        table.plan(a, 0, combine_key(args), 0, args, false),
        Plan::Send
    );
    assert_eq!(
        run(&table, b, 0, args),
        Plan::Send,
        "other group: not registered yet"
    );
    assert_eq!(table.group_size(b), 1);
}

#[test]
fn a_joiner_that_conflicts_leaves_alone() {
    let table = table();
    let (a, b) = combined_pair(&table);
    assert_eq!(run(&table, b, 1, &[b"SCARD", b"s"]), Plan::Conflict);
    table.fail(b, AbortCause::Combine);
    assert_eq!(table.group_size(a), 1);
    // A goes on and commits with nothing parked: B's operation was taken back.
    assert_eq!(run(&table, a, 1, &[b"SCARD", b"t"]), Plan::Send);
    assert_eq!(table.finish(a), Ok(vec![]));
    assert_eq!(table.flushed(a), Ok(()));
    assert_eq!(table.committed(a, None), Ok(vec![]));
    assert!(table.is_empty());
}

#[test]
fn an_owner_that_fails_aborts_the_whole_group() {
    let table = table();
    let (a, b) = combined_pair(&table);
    run(&table, b, 1, &[b"GET", b"k"]);
    assert_eq!(run(&table, a, 1, &[b"GET", b"k"]), Plan::Conflict);
    table.fail(a, AbortCause::Combine);
    assert_group_aborted(&table, b, 2);
}

#[test]
fn merged_groups_share_their_lock_sets() {
    let table = table();
    let (a, b) = (table.join(), table.join());
    run(&table, a, 0, &[b"SADD", b"s", b"x"]);
    run(&table, b, 0, &[b"SET", b"t", b"1"]);
    assert_eq!(run(&table, b, 1, &[b"SADD", b"s", b"y"]), Plan::Combined);
    // B's earlier lock on t is now the group's: A may not touch t.
    assert_eq!(run(&table, a, 1, &[b"GET", b"t"]), Plan::Conflict);
}

#[test]
fn a_group_closes_when_a_member_finishes_and_stays_bounded() {
    let table = table();
    let owner = table.join();
    run(&table, owner, 0, &[b"INCR", b"c"]);
    let joiners: Vec<_> = (0..4).map(|_| table.join()).collect();
    let plans: Vec<_> = joiners
        .iter()
        .map(|&m| run(&table, m, 0, &[b"INCR", b"c"]))
        .collect();
    assert_eq!(plans[..3], [Plan::Combined, Plan::Combined, Plan::Combined]);
    assert_eq!(plans[3], Plan::Send, "members_max is 4");
    assert_eq!(table.group_size(owner), 4);

    // Once a member finished, newcomers start a group of their own, which others then join.
    let table = Arc::new(CombineTable::new(4, WAIT));
    let (a, b) = (table.join(), table.join());
    run(&table, a, 0, &[b"INCR", b"c"]);
    run(&table, b, 0, &[b"INCR", b"c"]);
    let waiter = thread::spawn({
        let table = Arc::clone(&table);
        move || table.finish(a)
    });
    let is_open = |member| {
        let state = table.state.lock();
        state.groups[&state.members[&member].group].open
    };
    while is_open(a) {
        thread::yield_now();
    }
    let (c, d) = (table.join(), table.join());
    assert_eq!(run(&table, c, 0, &[b"INCR", b"c"]), Plan::Send);
    assert_eq!(run(&table, d, 0, &[b"INCR", b"c"]), Plan::Combined);
    assert_eq!(table.group_size(d), 2);
    table.fail(b, AbortCause::Combine);
    assert_eq!(waiter.join().unwrap(), Ok(vec![]));
}

#[test]
fn members_commit_together_and_replies_reach_their_issuers() {
    let table = Arc::new(table());
    let (a, b) = (table.join(), table.join());
    run(&table, a, 0, &[b"INCRBY", b"c", b"1"]);
    run(&table, b, 0, &[b"INCRBY", b"c", b"5"]);
    let joiner = thread::spawn({
        let table = Arc::clone(&table);
        move || {
            assert_eq!(table.finish(b), Ok(vec![]));
            table.flushed(b).unwrap();
            table.committed(b, None)
        }
    });
    let parked = table.finish(a).unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!((parked[0].issuer, parked[0].slot), (b, 0));
    table.flushed(a).unwrap();
    table.deliver(b, 0, Reply::Int(6));
    assert_eq!(table.committed(a, None), Ok(vec![]));
    assert_eq!(joiner.join().unwrap(), Ok(vec![(0, Reply::Int(6))]));
    assert!(table.is_empty());
}

#[test]
fn a_commit_failure_is_every_members_partial_commit() {
    let table = Arc::new(table());
    let (a, b) = combined_pair(&table);
    let joiner = thread::spawn({
        let table = Arc::clone(&table);
        move || {
            table.finish(b).unwrap();
            table.flushed(b).unwrap();
            table.committed(b, None)
        }
    });
    table.finish(a).unwrap();
    table.flushed(a).unwrap();
    assert!(table.committed(a, Some("connection reset".into())).is_err());
    assert!(joiner.join().unwrap().is_err());
}

#[test]
fn a_member_that_never_finishes_times_the_group_out() {
    let table = CombineTable::new(4, Duration::from_millis(50));
    let (a, b) = combined_pair(&table);
    assert_eq!(table.finish(a), Err(AbortCause::Combine));
    table.fail(a, AbortCause::Combine);
    assert_group_aborted(&table, b, 1);
}

#[test]
fn a_member_combines_within_its_group_but_not_with_its_own_lock() {
    let table = table();
    let (a, b) = combined_pair(&table);
    assert_eq!(run(&table, a, 1, &[b"SADD", b"s", b"z"]), Plan::Send);
    assert_eq!(run(&table, b, 1, &[b"SADD", b"s", b"w"]), Plan::Combined);
    let parked = &table.state.lock().members[&a].parked;
    assert_eq!(parked.len(), 2);
}

/// Rules 8 and 9: a lone member's command may wait on the server, and while it is inside such a call no
/// group merges with it; once answered, others combine onto its lock and its later commands go NOWAIT.
#[test]
fn no_merge_with_a_member_inside_a_waiting_call() {
    let table = table();
    let (a, b, c) = (table.join(), table.join(), table.join());
    let sadd: &[&[u8]] = &[b"SADD", b"s", b"x"];
    let combine = combine_key(sadd).unwrap();
    assert_eq!(
        table.plan(a, 0, Some(combine.clone()), 0, sadd, false),
        Plan::Send
    );
    assert!(!table.sends_nowait(a), "alone: it may wait");
    table.granted(a, b"s", &combine);
    // A is on its way to the server with another command that may wait.
    assert_eq!(run(&table, a, 1, &[b"SCARD", b"t"]), Plan::Send);
    assert_eq!(
        table.plan(a, 0, None, 2, &[b"SCARD", b"u"], false),
        Plan::Send
    );
    assert_eq!(
        run(&table, b, 0, &[b"SADD", b"s", b"y"]),
        Plan::Send,
        "no merge"
    );
    table.returned(a);
    assert_eq!(run(&table, c, 0, &[b"SADD", b"s", b"z"]), Plan::Combined);
    assert_eq!(table.group_size(a), 2);
    assert_eq!(
        table.plan(a, 0, None, 3, &[b"GET", b"v"], false),
        Plan::Send
    );
    assert!(table.sends_nowait(a), "with company: NOWAIT");
}

#[test]
fn a_write_behind_is_neither_combined_with_nor_in_the_way_of_its_mode() {
    let table = table();
    let (a, b) = combined_pair(&table);
    let sadd: &[&[u8]] = &[b"SADD", b"u", b"x"];
    let behind = table.plan(a, 0, combine_key(sadd), 1, sadd, true);
    assert_eq!(behind, Plan::Send);
    assert!(
        !table.state.lock().members[&a].waiting_call,
        "nothing was sent, so nothing waits"
    );
    // Another group finds no granted lock of A's to join on that set.
    let c = table.join();
    let other: &[&[u8]] = &[b"SADD", b"u", b"z"];
    assert_eq!(
        table.plan(c, 0, combine_key(other), 0, other, false),
        Plan::Send
    );
    assert_eq!(table.group_size(c), 1);
    // B's add to the same set goes to the server beside it; a size of it would conflict.
    assert_eq!(run(&table, b, 1, &[b"SADD", b"u", b"y"]), Plan::Send);
    assert_eq!(run(&table, b, 2, &[b"SCARD", b"u"]), Plan::Conflict);
}

#[test]
fn a_write_behind_once_queued_is_combined_with() {
    let table = table();
    let (a, b) = (table.join(), table.join());
    let sadd: &[&[u8]] = &[b"SADD", b"u", b"x"];
    let combine = combine_key(sadd).unwrap();
    assert_eq!(
        table.plan(a, 0, Some(combine.clone()), 0, sadd, true),
        Plan::Send
    );
    table.granted(a, b"u", &combine);
    assert_eq!(run(&table, b, 0, &[b"SADD", b"u", b"y"]), Plan::Combined);
    assert_eq!(table.group_size(b), 2);
}

#[test]
fn only_a_member_alone_with_nothing_parked_leaves_to_commit_plainly() {
    let table = table();
    let (a, b) = combined_pair(&table);
    assert!(!table.leave_if_alone(a), "B's add is parked on A");
    assert!(!table.leave_if_alone(b), "B has company");
    let c = table.join();
    assert_eq!(run(&table, c, 0, &[b"SADD", b"v", b"x"]), Plan::Send);
    assert!(table.leave_if_alone(c));
    // its lock is gone from the index: a newcomer sends its own
    let d = table.join();
    assert_eq!(run(&table, d, 0, &[b"SADD", b"v", b"y"]), Plan::Send);
    assert_eq!(table.group_size(d), 1);
    assert!(table.leave_if_alone(d));
    table.fail(a, AbortCause::Combine);
    table.fail(b, AbortCause::Combine);
    assert!(table.is_empty());
}
