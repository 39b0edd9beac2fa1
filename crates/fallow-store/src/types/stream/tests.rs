//! Stream semantics, node layout (expected figures are redis-server 7.0.15's), groups and the codec.
use super::groups::GroupRead;
use super::*;
use crate::types::codec::testing::{
    canonical_or_rejected, mutated, rejects_every_prefix, versioned,
};
use proptest::prelude::*;

fn id(ms: u64, seq: u64) -> StreamId {
    StreamId::new(ms, seq)
}

fn add(stream: &mut StreamValue, at: StreamId, pairs: &[&[u8]]) {
    stream.add(IdRequest::Exact(at), pairs, 0).expect("adds");
}

/// A stream of entries `1-1` ..= `1-count`, each `f v`.
fn numbered(count: u64) -> StreamValue {
    let mut stream = StreamValue::default();
    for seq in 1..=count {
        add(&mut stream, id(1, seq), &[b"f", b"v"]);
    }
    stream
}

fn ids(stream: &StreamValue) -> Vec<StreamId> {
    stream
        .range(StreamId::MIN, StreamId::MAX)
        .map(|(id, _)| id)
        .collect()
}

fn assert_bytes_exact(stream: &StreamValue) {
    assert_eq!(stream.memory_bytes(), stream.recount_bytes());
}

// ----- ids -----------------------------------------------------------------------------------------

#[test]
fn ids_parse_like_redis() {
    let parse = |arg: &[u8]| parse_id(arg, 0, false, false).map(|parsed| parsed.id);
    assert_eq!(parse(b"5-3"), Some(id(5, 3)));
    assert_eq!(parse(b"5"), Some(id(5, 0)));
    assert_eq!(
        parse_id(b"5", u64::MAX, false, false).unwrap().id,
        id(5, u64::MAX)
    );
    assert_eq!(parse(b"-"), Some(StreamId::MIN));
    assert_eq!(parse(b"+"), Some(StreamId::MAX));
    assert_eq!(parse_id(b"+", 0, true, false), None);
    // strtoull's leniency: spaces, a plus, leading zeros; a minus wraps
    assert_eq!(parse(b" 7"), Some(id(7, 0)));
    assert_eq!(parse(b"+8-009"), Some(id(8, 9)));
    assert_eq!(parse(b"1--05"), Some(id(1, 5u64.wrapping_neg())));
    assert_eq!(parse(b"-1"), None);
    assert_eq!(parse(b"1-"), None);
    assert_eq!(parse(b"a-1"), None);
    assert_eq!(parse(b"18446744073709551616"), None);
    assert_eq!(
        parse(b"18446744073709551615-18446744073709551615"),
        Some(StreamId::MAX)
    );
    assert_eq!(parse(&[b'1'; 128]), None);
    // a NUL byte ends the C string
    assert_eq!(parse(b"3-4\0junk"), Some(id(3, 4)));
    // ms-* only where XADD allows it
    assert_eq!(parse(b"5-*"), None);
    let partial = parse_id(b"5-*", 0, true, true).unwrap();
    assert_eq!((partial.id, partial.seq_given), (id(5, 0), false));
}

#[test]
fn ids_step_across_their_parts() {
    assert_eq!(id(1, u64::MAX).next(), Some(id(2, 0)));
    assert_eq!(StreamId::MAX.next(), None);
    assert_eq!(id(2, 0).prev(), Some(id(1, u64::MAX)));
    assert_eq!(StreamId::MIN.prev(), None);
    assert_eq!(id(12, 3).to_string(), "12-3");
}

// ----- adding --------------------------------------------------------------------------------------

#[test]
fn generated_ids_follow_the_clock_and_the_last_id() {
    let mut stream = StreamValue::default();
    assert_eq!(
        stream.add(IdRequest::Auto, &[b"a", b"1"], 1000),
        Ok(id(1000, 0))
    );
    // the clock did not move: the sequence does
    assert_eq!(
        stream.add(IdRequest::Auto, &[b"a", b"1"], 1000),
        Ok(id(1000, 1))
    );
    assert_eq!(
        stream.add(IdRequest::Auto, &[b"a", b"1"], 999),
        Ok(id(1000, 2))
    );
    assert_eq!(
        stream.add(IdRequest::Ms(1000), &[b"a", b"1"], 0),
        Ok(id(1000, 3))
    );
    assert_eq!(
        stream.add(IdRequest::Ms(2000), &[b"a", b"1"], 0),
        Ok(id(2000, 0))
    );
    assert_eq!(
        stream.add(IdRequest::Ms(5), &[b"a", b"1"], 0),
        Err(AddError::NotGreater)
    );
    assert_eq!(
        stream.add(IdRequest::Exact(id(2000, 0)), &[b"a", b"1"], 0),
        Err(AddError::NotGreater)
    );
    assert_eq!((stream.len(), stream.entries_added()), (5, 5));
    add(&mut stream, StreamId::MAX, &[b"a", b"1"]);
    for request in [
        IdRequest::Auto,
        IdRequest::Ms(u64::MAX),
        IdRequest::Exact(id(1, 1)),
    ] {
        assert_eq!(
            stream.add(request, &[b"a", b"1"], 0),
            Err(AddError::Exhausted)
        );
    }
    let mut full_ms = StreamValue::default();
    add(&mut full_ms, id(7, u64::MAX), &[b"a", b"1"]);
    assert_eq!(
        full_ms.add(IdRequest::Ms(7), &[b"a", b"1"], 0),
        Err(AddError::NotGreater)
    );
    assert_eq!(full_ms.add(IdRequest::Auto, &[b"a", b"1"], 0), Ok(id(8, 0)));
    assert_bytes_exact(&stream);
}

#[test]
fn ranges_are_inclusive_and_empty_when_inverted() {
    let stream = numbered(5);
    let range: Vec<_> = stream.range(id(1, 2), id(1, 4)).map(|(id, _)| id).collect();
    assert_eq!(range, vec![id(1, 2), id(1, 3), id(1, 4)]);
    let reversed: Vec<_> = stream
        .range(id(1, 2), id(1, 3))
        .rev()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(reversed, vec![id(1, 3), id(1, 2)]);
    assert_eq!(stream.range(id(1, 4), id(1, 2)).count(), 0);
    let entry = stream.get(id(1, 1)).unwrap();
    assert_eq!(
        entry.items().collect::<Vec<_>>(),
        vec![&b"f"[..], &b"v"[..]]
    );
    assert_eq!(entry.field_count(), 1);
}

// ----- nodes (figures from redis-server 7.0.15's XINFO STREAM) -------------------------------------

#[test]
fn nodes_hold_at_most_100_entries() {
    let stream = numbered(250);
    assert_eq!((stream.node_count(), stream.radix_tree_nodes()), (3, 5));
    assert_eq!(
        (
            StreamValue::default().node_count(),
            StreamValue::default().radix_tree_nodes()
        ),
        (0, 1)
    );
    assert_eq!(
        (numbered(1).node_count(), numbered(1).radix_tree_nodes()),
        (1, 2)
    );
}

#[test]
fn nodes_hold_about_4096_bytes() {
    let mut stream = StreamValue::default();
    let value = vec![b'x'; 1000];
    for seq in 1..=10 {
        add(&mut stream, id(1, seq), &[b"f", &value]);
    }
    assert_eq!((stream.node_count(), stream.radix_tree_nodes()), (3, 5));
}

#[test]
fn approximate_trims_remove_whole_nodes() {
    let mut stream = StreamValue::default();
    for ms in 1..=150 {
        add(&mut stream, id(ms, 0), &[b"f", b"v"]);
    }
    let approx = |to| Trim {
        to,
        approx: true,
        limit: 10_000,
    };
    assert_eq!(stream.trim(&approx(TrimTo::MaxLen(10))), 100);
    assert_eq!(
        (stream.len(), stream.node_count(), stream.radix_tree_nodes()),
        (50, 1, 2)
    );
    assert_eq!(stream.first_id(), id(101, 0));
    // a limit below the node's entries keeps it
    let mut limited = numbered(150);
    let trim = Trim {
        limit: 50,
        ..approx(TrimTo::MaxLen(0))
    };
    assert_eq!(limited.trim(&trim), 0);
    assert_bytes_exact(&stream);
}

#[test]
fn minid_trims_by_node_then_inside_it() {
    let mut stream = StreamValue::default();
    for ms in 1..=150 {
        let pairs: &[&[u8]] = if ms % 3 == 0 {
            &[b"f", b"v", b"g", b"w"]
        } else {
            &[b"f", b"v"]
        };
        add(&mut stream, id(ms, 0), pairs);
    }
    assert_eq!((stream.node_count(), stream.radix_tree_nodes()), (2, 6));
    let trim = |approx| Trim {
        to: TrimTo::MinId(id(120, 0)),
        approx,
        limit: 0,
    };
    assert_eq!(stream.trim(&trim(true)), 100);
    assert_eq!(stream.len(), 50);
    assert_eq!(stream.trim(&trim(false)), 19);
    assert_eq!(stream.len(), 31);
    assert_eq!((stream.node_count(), stream.radix_tree_nodes()), (1, 2));
    // trimming does not count as deleting
    assert_eq!(stream.max_deleted_id(), StreamId::MIN);
    assert_bytes_exact(&stream);
}

#[test]
fn deleting_the_last_entry_of_a_node_drops_it() {
    let mut stream = numbered(150);
    for seq in 101..=150 {
        assert!(stream.delete(id(1, seq)));
    }
    assert_eq!(stream.node_count(), 1);
    assert!(!stream.delete(id(1, 150)));
    assert_eq!(stream.max_deleted_id(), id(1, 150));
    // deleted entries still fill the first node: the next entry opens a new one
    add(&mut stream, id(2, 0), &[b"f", b"v"]);
    assert_eq!(stream.node_count(), 2);
    assert!(stream.delete(id(1, 1)));
    assert_eq!(
        stream.max_deleted_id(),
        id(1, 150),
        "the largest deleted id stays"
    );
    assert_eq!(stream.first_id(), id(1, 2));
    assert_bytes_exact(&stream);
}

#[test]
fn setid_keeps_the_ids_growing() {
    let mut stream = numbered(4);
    stream.delete(id(1, 4));
    assert_eq!(
        stream.set_id(id(1, 2), None, None),
        Err(SetIdError::BelowTop)
    );
    assert_eq!(
        stream.set_id(id(1, 5), Some(1), None),
        Err(SetIdError::EntriesAddedTooSmall)
    );
    assert_eq!(
        stream.set_id(id(1, 3), Some(10), Some(StreamId::MIN)),
        Ok(())
    );
    assert_eq!((stream.last_id(), stream.entries_added()), (id(1, 3), 10));
    assert_eq!(stream.max_deleted_id(), id(1, 4), "0-0 leaves it");
    assert_eq!(stream.set_id(id(9, 9), None, Some(id(5, 5))), Ok(()));
    assert_eq!(stream.max_deleted_id(), id(5, 5));
}

// ----- groups --------------------------------------------------------------------------------------

fn read_new(stream: &mut StreamValue, consumer: &[u8], count: usize, now: i64) -> GroupReply {
    stream
        .read_group(b"g", consumer, GroupRead::New, count, false, now)
        .expect("the group exists")
}

#[test]
fn group_reads_deliver_once_and_track_pending() {
    let mut stream = numbered(3);
    assert!(stream.create_group(b"g", StreamId::MIN, None));
    assert!(!stream.create_group(b"g", StreamId::MIN, None));
    assert_eq!(
        read_new(&mut stream, b"alice", 2, 10),
        GroupReply::New(vec![id(1, 1), id(1, 2)])
    );
    let group = stream.group(b"g").unwrap();
    assert_eq!((group.last_id(), group.entries_read()), (id(1, 2), Some(2)));
    assert_eq!(stream.lag(group), Some(1));
    assert_eq!(
        read_new(&mut stream, b"bob", 0, 20),
        GroupReply::New(vec![id(1, 3)])
    );
    assert_eq!(read_new(&mut stream, b"bob", 0, 20), GroupReply::Nothing);
    // history: the consumer's own pending entries, each delivered once more
    stream.delete(id(1, 1));
    let history = stream
        .read_group(
            b"g",
            b"alice",
            GroupRead::History(StreamId::MIN),
            0,
            false,
            30,
        )
        .unwrap();
    assert_eq!(
        history,
        GroupReply::History(vec![(id(1, 1), false), (id(1, 2), true)])
    );
    let pel = stream.group(b"g").unwrap().pel();
    assert_eq!(pel[&id(1, 2)].delivery_count, 2);
    assert_eq!(
        pel[&id(1, 1)].delivery_count,
        1,
        "a deleted entry is not re-delivered"
    );
    assert!(stream.ack(b"g", id(1, 2)));
    assert!(!stream.ack(b"g", id(1, 2)));
    assert!(!stream.ack(b"nogroup", id(1, 3)));
    assert_eq!(stream.delete_consumer(b"g", b"bob"), Some(1));
    assert_eq!(stream.delete_consumer(b"g", b"bob"), Some(0));
    assert_eq!(stream.delete_consumer(b"nogroup", b"bob"), None);
    assert_eq!(stream.group(b"g").unwrap().pel().len(), 1);
    assert_bytes_exact(&stream);
    assert!(stream.destroy_group(b"g"));
    assert!(!stream.destroy_group(b"g"));
    assert_bytes_exact(&stream);
}

#[test]
fn no_ack_reads_leave_nothing_pending() {
    let mut stream = numbered(2);
    stream.create_group(b"g", StreamId::MIN, None);
    let read = stream.read_group(b"g", b"c", GroupRead::New, 0, true, 0);
    assert_eq!(read, Some(GroupReply::New(vec![id(1, 1), id(1, 2)])));
    assert!(stream.group(b"g").unwrap().pel().is_empty());
    assert_eq!(stream.group(b"g").unwrap().consumers().len(), 1);
}

#[test]
fn setting_a_group_back_redelivers_to_the_reader() {
    let mut stream = numbered(2);
    stream.create_group(b"g", StreamId::MIN, None);
    read_new(&mut stream, b"alice", 0, 5);
    assert!(stream.set_group_id(b"g", StreamId::MIN, Some(0)));
    read_new(&mut stream, b"bob", 1, 9);
    let group = stream.group(b"g").unwrap();
    let pending = &group.pel()[&id(1, 1)];
    assert_eq!(
        (
            &*pending.consumer,
            pending.delivery_ms,
            pending.delivery_count
        ),
        (&b"bob"[..], 9, 1)
    );
    assert_eq!(group.consumer(b"alice").unwrap().pending().len(), 1);
    assert_bytes_exact(&stream);
}

#[test]
fn lag_and_read_counters_follow_redis() {
    // each case checked against redis-server 7.0.15
    let mut stream = numbered(3);
    stream.create_group(b"g", StreamId::MIN, None);
    stream.create_group(b"g2", id(1, 1), None);
    stream.create_group(b"g4", id(9, 9), None);
    stream.create_group(b"e5", StreamId::MIN, Some(5));
    let lag = |stream: &StreamValue, name: &[u8]| stream.lag(stream.group(name).unwrap());
    assert_eq!(lag(&stream, b"g"), Some(3));
    assert_eq!(lag(&stream, b"g2"), Some(2));
    assert_eq!(lag(&stream, b"g4"), None);
    assert_eq!(lag(&stream, b"e5"), Some(-2));
    stream.delete(id(1, 2));
    assert_eq!(lag(&stream, b"g"), None);
    read_new(&mut stream, b"c", 1, 0);
    assert_eq!(stream.group(b"g").unwrap().entries_read(), None);
    stream.read_group(b"g2", b"c", GroupRead::New, 1, false, 0);
    assert_eq!(stream.group(b"g2").unwrap().entries_read(), Some(3));
    stream.delete(id(1, 1));
    assert_eq!(lag(&stream, b"g"), Some(1));
    stream.trim(&Trim {
        to: TrimTo::MaxLen(0),
        approx: false,
        limit: 0,
    });
    assert_eq!(lag(&stream, b"g"), Some(0));
    assert_eq!(lag(&stream, b"g4"), None);
    // a tombstone before the reader's next entry does not stop its counter
    let mut stream = numbered(3);
    stream.delete(id(1, 2));
    stream.create_group(b"g", id(1, 1), Some(1));
    read_new(&mut stream, b"c", 1, 0);
    assert_eq!(stream.group(b"g").unwrap().entries_read(), Some(2));
    // a tombstone before the first entry does not count
    let mut stream = numbered(3);
    stream.create_group(b"g", id(1, 1), Some(0));
    stream.delete(id(1, 1));
    assert_eq!(lag(&stream, b"g"), Some(3));
    // an empty, never used stream has no lag
    let mut empty = StreamValue::default();
    empty.create_group(b"g", StreamId::MIN, Some(5));
    assert_eq!(lag(&empty, b"g"), Some(0));
}

#[test]
fn claims_move_idle_entries_and_drop_deleted_ones() {
    let mut stream = numbered(3);
    stream.create_group(b"g", StreamId::MIN, None);
    read_new(&mut stream, b"alice", 0, 100);
    stream.delete(id(1, 1));
    let wanted = [id(1, 1), id(1, 2), id(9, 9)];
    let idle = Claim {
        min_idle_ms: 50,
        ..Claim::default()
    };
    assert_eq!(
        stream.claim(b"g", b"carol", &wanted, &idle, 120),
        Some(vec![])
    );
    assert!(
        !stream.group(b"g").unwrap().pel().contains_key(&id(1, 1)),
        "gone from the PEL"
    );
    assert_eq!(
        stream.claim(b"g", b"carol", &wanted, &idle, 150),
        Some(vec![id(1, 2)])
    );
    let pending = &stream.group(b"g").unwrap().pel()[&id(1, 2)];
    assert_eq!(
        (
            &*pending.consumer,
            pending.delivery_ms,
            pending.delivery_count
        ),
        (&b"carol"[..], 150, 2)
    );
    let options = Claim {
        retry_count: Some(7),
        just_id: true,
        delivery_ms: Some(-5),
        last_id: Some(id(5, 5)),
        ..Claim::default()
    };
    assert_eq!(
        stream.claim(b"g", b"dave", &[id(1, 2)], &options, 200),
        Some(vec![id(1, 2)])
    );
    let group = stream.group(b"g").unwrap();
    let pending = &group.pel()[&id(1, 2)];
    assert_eq!((pending.delivery_ms, pending.delivery_count), (200, 7));
    assert_eq!(group.last_id(), id(5, 5));
    // FORCE makes an existing entry pending; an id not in the stream stays out
    stream.ack(b"g", id(1, 3));
    let force = Claim {
        force: true,
        ..Claim::default()
    };
    assert_eq!(
        stream.claim(b"g", b"erin", &[id(1, 3), id(9, 9)], &force, 300),
        Some(vec![id(1, 3)])
    );
    assert_eq!(
        stream.group(b"g").unwrap().pel()[&id(1, 3)].delivery_count,
        2
    );
    assert_eq!(stream.claim(b"nogroup", b"x", &[], &force, 0), None);
    assert_bytes_exact(&stream);
}

#[test]
fn autoclaim_scans_with_a_cursor_and_reports_deleted_ids() {
    // as redis-server 7.0.15 answered the same sequence
    let mut stream = numbered(4);
    stream.create_group(b"g", StreamId::MIN, None);
    read_new(&mut stream, b"alice", 0, 0);
    stream.delete(id(1, 1));
    stream.delete(id(1, 3));
    let scan = |start, count| AutoClaimScan {
        min_idle_ms: 0,
        start,
        count,
        just_id: false,
    };
    let first = stream
        .autoclaim(b"g", b"bob", &scan(StreamId::MIN, 1), 0)
        .unwrap();
    assert_eq!(
        (first.next, first.claimed, first.deleted),
        (id(1, 2), vec![], vec![id(1, 1)])
    );
    let second = stream
        .autoclaim(b"g", b"bob", &scan(StreamId::MIN, 1), 0)
        .unwrap();
    assert_eq!(
        (second.next, second.claimed, second.deleted),
        (id(1, 3), vec![id(1, 2)], vec![])
    );
    let rest = stream
        .autoclaim(b"g", b"bob", &scan(id(1, 3), 100), 0)
        .unwrap();
    assert_eq!(
        (rest.next, rest.claimed, rest.deleted),
        (StreamId::MIN, vec![id(1, 4)], vec![id(1, 3)])
    );
    let group = stream.group(b"g").unwrap();
    assert_eq!(group.consumer(b"bob").unwrap().pending().len(), 2);
    assert_eq!(group.pel()[&id(1, 2)].delivery_count, 2);
    // idle entries only: every one is skipped, the attempts run out, the cursor says where
    let idle = AutoClaimScan {
        min_idle_ms: 1000,
        ..scan(StreamId::MIN, 1)
    };
    let none = stream.autoclaim(b"g", b"carol", &idle, 10).unwrap();
    assert_eq!((none.next, none.claimed.len()), (StreamId::MIN, 0));
    assert_bytes_exact(&stream);
}

// ----- properties ----------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Add {
        ms_step: u64,
        fields: u8,
        value_len: usize,
    },
    Delete(usize),
    Trim {
        max_len: Option<u64>,
        min_at: usize,
        approx: bool,
        limit: u64,
    },
    Read {
        consumer: u8,
        count: usize,
        no_ack: bool,
    },
    Ack(usize),
    Claim {
        consumer: u8,
        at: usize,
    },
    SetGroup(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..3, 1u8..4, prop_oneof![0usize..8, 100usize..1500])
            .prop_map(|(ms_step, fields, value_len)| Op::Add { ms_step, fields, value_len }),
        2 => any::<prop::sample::Index>().prop_map(|at| Op::Delete(at.index(1 << 20))),
        1 => (proptest::option::of(0u64..200), 0usize..1 << 20, any::<bool>(), prop_oneof![Just(0u64), 1u64..300])
            .prop_map(|(max_len, min_at, approx, limit)| Op::Trim { max_len, min_at, approx, limit }),
        2 => (0u8..3, 0usize..5, any::<bool>())
            .prop_map(|(consumer, count, no_ack)| Op::Read { consumer, count, no_ack }),
        1 => (0usize..1 << 20).prop_map(Op::Ack),
        1 => (0u8..3, 0usize..1 << 20).prop_map(|(consumer, at)| Op::Claim { consumer, at }),
        1 => (0usize..1 << 20).prop_map(Op::SetGroup),
    ]
}

/// Applies `ops` to a stream and to a plain model of its entries (a sorted list), checking that they
/// agree and that the byte count stays exact.
fn run(ops: &[Op]) -> Result<StreamValue, TestCaseError> {
    let mut stream = StreamValue::default();
    let mut model: Vec<StreamId> = Vec::new();
    let mut ever: Vec<StreamId> = Vec::new();
    stream.create_group(b"g", StreamId::MIN, None);
    let mut ms = 1;
    for op in ops {
        match *op {
            Op::Add {
                ms_step,
                fields,
                value_len,
            } => {
                ms += ms_step;
                let value = vec![b'v'; value_len];
                let names: [&[u8]; 3] = [b"f", b"g", b"h"];
                let pairs: Vec<&[u8]> = names[..fields as usize]
                    .iter()
                    .flat_map(|&name| [name, &value[..]])
                    .collect();
                let added = stream.add(IdRequest::Ms(ms), &pairs, 0).unwrap();
                prop_assert!(model.last().is_none_or(|&last| last < added));
                model.push(added);
                ever.push(added);
            }
            Op::Delete(at) if !ever.is_empty() => {
                let target = ever[at % ever.len()];
                let present = model.contains(&target);
                prop_assert_eq!(stream.delete(target), present);
                model.retain(|&id| id != target);
            }
            Op::Trim {
                max_len,
                min_at,
                approx,
                limit,
            } => {
                let to = match max_len {
                    Some(max) => TrimTo::MaxLen(max),
                    None if ever.is_empty() => TrimTo::MinId(StreamId::MIN),
                    None => TrimTo::MinId(ever[min_at % ever.len()]),
                };
                let before = model.len();
                let deleted = stream.trim(&Trim { to, approx, limit });
                // an exact unlimited trim meets its target; any trim removes the oldest entries only
                let exact: Vec<StreamId> = match to {
                    TrimTo::MaxLen(max) => {
                        model[model.len().saturating_sub(max as usize)..].to_vec()
                    }
                    TrimTo::MinId(min) => model.iter().copied().filter(|&id| id >= min).collect(),
                };
                model.drain(..deleted as usize);
                prop_assert!(before - exact.len() >= deleted as usize);
                if !approx && limit == 0 {
                    prop_assert_eq!(&model, &exact);
                }
            }
            Op::Read {
                consumer,
                count,
                no_ack,
            } => {
                let name = [b'c', consumer];
                stream.read_group(b"g", &name, GroupRead::New, count, no_ack, 0);
            }
            Op::Ack(at) if !ever.is_empty() => {
                stream.ack(b"g", ever[at % ever.len()]);
            }
            Op::Claim { consumer, at } if !ever.is_empty() => {
                let claim = Claim {
                    force: at % 2 == 0,
                    ..Claim::default()
                };
                stream.claim(b"g", &[b'c', consumer], &[ever[at % ever.len()]], &claim, 0);
            }
            Op::SetGroup(at) if !ever.is_empty() => {
                stream.set_group_id(b"g", ever[at % ever.len()], None);
            }
            _ => {}
        }
        prop_assert_eq!(ids(&stream), model.clone());
        prop_assert_eq!(stream.memory_bytes(), stream.recount_bytes());
        let live: u64 = stream.nodes.values().map(|node| u64::from(node.live)).sum();
        prop_assert_eq!(live, model.len() as u64);
        let group = stream.group(b"g").unwrap();
        let owned: usize = group
            .consumers()
            .map(|(_, consumer)| consumer.pending().len())
            .sum();
        prop_assert_eq!(owned, group.pel().len());
    }
    Ok(stream)
}

fn encoded(stream: &StreamValue) -> Vec<u8> {
    let mut out = Vec::new();
    stream.encode(&mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn streams_agree_with_a_sorted_list(ops in prop::collection::vec(op(), 0..120)) {
        run(&ops)?;
    }

    #[test]
    fn built_streams_round_trip(ops in prop::collection::vec(op(), 0..60)) {
        let stream = run(&ops)?;
        let bytes = encoded(&stream);
        let decoded = StreamValue::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &stream);
        prop_assert_eq!(encoded(&decoded), bytes.clone());
        rejects_every_prefix(&bytes, StreamValue::decode)?;
    }

    #[test]
    fn corrupt_streams_are_rejected_or_canonical(
        ops in prop::collection::vec(op(), 0..20),
        position in any::<usize>(),
        byte in any::<u8>(),
        tail in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let bytes = encoded(&run(&ops)?);
        canonical_or_rejected(&mutated(&bytes, position, byte), StreamValue::decode, StreamValue::encode)?;
        canonical_or_rejected(&versioned(1, &tail), StreamValue::decode, StreamValue::encode)?;
    }
}

#[test]
fn decoding_rejects_impossible_streams() {
    let mut stream = numbered(2);
    stream.create_group(b"g", StreamId::MIN, None);
    read_new(&mut stream, b"c", 0, 0);
    let bytes = encoded(&stream);
    assert_eq!(StreamValue::decode(&bytes).unwrap(), stream);
    // the last id below the newest entry: byte 1 is the last id's ms
    let mut low = bytes.clone();
    low[1] = 0;
    assert_eq!(
        StreamValue::decode(&low).map(|_| ()),
        Err(DecodeError::Invalid("stream entry above the last id"))
    );
    assert!(StreamValue::decode(&[9]).is_err());
}

#[test]
fn node_limits_split_nodes_as_redis_settings_say() {
    let fill = |limits: NodeLimits| {
        let mut stream = StreamValue::default();
        for ms in 1..=20 {
            let request = IdRequest::Exact(id(ms, 0));
            stream
                .add_with_node_limits(request, &[b"f", b"v"], 0, limits)
                .unwrap();
        }
        stream.node_count()
    };
    let entries = |max_entries| NodeLimits {
        max_entries,
        ..NodeLimits::default()
    };
    assert_eq!(fill(NodeLimits::default()), 1);
    assert_eq!(fill(entries(3)), 7, "20 entries, 3 a node");
    assert_eq!(fill(entries(1)), 20);
    assert_eq!(fill(entries(0)), 1, "0: no count limit");
    let bytes = |max_bytes| NodeLimits {
        max_bytes,
        max_entries: 0,
    };
    assert!(fill(bytes(40)) > 1, "a small byte limit splits");
    assert_eq!(fill(bytes(0)), 1, "0: Redis's 1 GiB cap");
}
