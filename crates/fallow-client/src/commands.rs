//! Which commands the combiner may merge (Claret §5.2: only operations declared combinable are compared).
//!
//! Combinable operations are the pure commuting writes: they return nothing inside a transaction (their
//! reply comes at commit) and every two of them commute, so the server gives them one shared lock mode.
//! Two such operations on the same key and mode can therefore ride on one server transaction's lock.
//! The mode must match exactly: HINCRBY takes a per-field mode, so it combines per (key, field).
//!
//! Each command's mode is its data type's declaration in `fallow_txn::types`, the one the server's lock
//! table gives it (`crates/fallow-server/src/txn/modes.rs`), so the client cannot name a mode the server
//! does not take.
use fallow_txn::types::{counter, dict, scored_set, set, summary_bag, topk};
use fallow_txn::Mode;

/// A combinable command: its name, the lock mode it takes on its key (from its arguments, well formed),
/// its argument count bounds, and whether its mode is per part (argument 2, the field).
struct Combinable {
    command: &'static str,
    mode: fn(&[&[u8]]) -> Mode,
    args_min: usize,
    args_max: usize,
    per_part: bool,
}

const fn entry(
    command: &'static str,
    mode: fn(&[&[u8]]) -> Mode,
    args_min: usize,
    args_max: usize,
    per_part: bool,
) -> Combinable {
    Combinable {
        command,
        mode,
        args_min,
        args_max,
        per_part,
    }
}

const COMBINABLE: &[Combinable] = &[
    entry("sadd", |_| set::ADD, 3, usize::MAX, false),
    entry("incr", |_| counter::INCR, 2, 2, false),
    entry("decr", |_| counter::INCR, 2, 2, false),
    entry("incrby", |_| counter::INCR, 3, 3, false),
    entry("decrby", |_| counter::INCR, 3, 3, false),
    entry("hincrby", |args| dict::field_write(&args[2]), 4, 4, true),
    entry("zincrby", |_| scored_set::INCR, 4, 4, false),
    entry("bag.add", |_| summary_bag::ADD, 3, usize::MAX, false),
    entry("topn.add", |_| topk::ADD, 3, usize::MAX, false),
];

/// The identity of a combinable operation's lock: its mode's name, key and (for per-part modes) the
/// part. Two operations with equal keys take the same mode on the same record.
pub type CombineKey = Vec<u8>;

/// The combine key of `args` when the command is combinable and well formed; None otherwise (such
/// commands go to the server as usual, which also reports their errors at once).
pub fn combine_key(args: &[&[u8]]) -> Option<CombineKey> {
    let name = args.first()?;
    let entry = COMBINABLE
        .iter()
        .find(|entry| name.eq_ignore_ascii_case(entry.command.as_bytes()))?;
    if args.len() < entry.args_min || args.len() > entry.args_max || !numbers_parse(args) {
        return None;
    }
    let mode = (entry.mode)(args).name;
    let mut key = Vec::with_capacity(mode.len() + args[1].len() + 16);
    key.extend_from_slice(mode.as_bytes());
    // Length prefixes keep (key, part) pairs apart whatever bytes they hold.
    for part in &args[1..if entry.per_part { 3 } else { 2 }] {
        key.extend_from_slice(&(part.len() as u64).to_le_bytes());
        key.extend_from_slice(part);
    }
    Some(key)
}

/// The counter commands' increments must be integers, so a malformed one fails at once instead of in the
/// commit of the transaction it was combined into.
fn numbers_parse(args: &[&[u8]]) -> bool {
    let name = args[0];
    let increment = if name.eq_ignore_ascii_case(b"incrby") || name.eq_ignore_ascii_case(b"decrby")
    {
        args[2]
    } else if name.eq_ignore_ascii_case(b"hincrby") {
        args[3]
    } else {
        return true;
    };
    fallow_proto::resp::parse_i64(increment).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_declared_well_formed_writes_combine() {
        assert!(combine_key(&[b"SADD", b"s", b"x"]).is_some());
        assert!(combine_key(&[b"sadd", b"s"]).is_none());
        assert!(combine_key(&[b"INCRBY", b"c", b"5"]).is_some());
        assert!(combine_key(&[b"INCRBY", b"c", b"five"]).is_none());
        assert!(combine_key(&[b"INCR", b"c", b"extra"]).is_none());
        assert!(combine_key(&[b"SCARD", b"s"]).is_none());
        assert!(combine_key(&[b"SREM", b"s", b"x"]).is_none());
        assert!(combine_key(&[b"HSET", b"h", b"f", b"v"]).is_none());
        assert!(combine_key(&[]).is_none());
    }

    #[test]
    fn keys_name_the_lock_mode() {
        let incr = combine_key(&[b"INCR", b"c"]);
        assert_eq!(incr, combine_key(&[b"DECRBY", b"c", b"3"]));
        assert_ne!(incr, combine_key(&[b"INCR", b"d"]));
        assert_ne!(
            combine_key(&[b"HINCRBY", b"h", b"f", b"1"]),
            combine_key(&[b"HINCRBY", b"h", b"g", b"1"])
        );
        assert_eq!(
            combine_key(&[b"ZINCRBY", b"z", b"1", b"a"]),
            combine_key(&[b"zincrby", b"z", b"2", b"b"])
        );
        assert_ne!(
            combine_key(&[b"HINCRBY", b"a\0b", b"c", b"1"]),
            combine_key(&[b"HINCRBY", b"a", b"b\0c", b"1"])
        );
        assert_ne!(
            combine_key(&[b"SADD", b"k", b"x"]),
            combine_key(&[b"BAG.ADD", b"k", b"1"])
        );
    }

    /// Each combinable command's mode is its specification's (`fallow_txn::types`), as the server takes
    /// it: the names as the specifications spell them, and a per-part mode exactly where the entry is
    /// per part.
    #[test]
    fn modes_are_the_specifications() {
        let mode_of = |args: &[&[u8]]| {
            let entry = COMBINABLE
                .iter()
                .find(|entry| args[0].eq_ignore_ascii_case(entry.command.as_bytes()))
                .unwrap();
            ((entry.mode)(args), entry.per_part)
        };
        let cases: [(&[&[u8]], &str, Mode); 9] = [
            (&[b"SADD", b"s", b"x"], "set.add", set::ADD),
            (&[b"INCR", b"c"], "counter.incr", counter::INCR),
            (&[b"DECR", b"c"], "counter.incr", counter::INCR),
            (&[b"INCRBY", b"c", b"2"], "counter.incr", counter::INCR),
            (&[b"DECRBY", b"c", b"2"], "counter.incr", counter::INCR),
            (
                &[b"HINCRBY", b"h", b"f", b"1"],
                "hash.field-write",
                dict::field_write(&&b"f"[..]),
            ),
            (
                &[b"ZINCRBY", b"z", b"1", b"m"],
                "zset.incr",
                scored_set::INCR,
            ),
            (&[b"BAG.ADD", b"b", b"1"], "bag.add", summary_bag::ADD),
            (&[b"TOPN.ADD", b"t", b"1"], "topn.add", topk::ADD),
        ];
        assert_eq!(cases.len(), COMBINABLE.len());
        for (args, name, spec) in cases {
            let (mode, per_part) = mode_of(args);
            assert_eq!(mode, spec, "{}", String::from_utf8_lossy(args[0]));
            assert_eq!(mode.name, name);
            assert_eq!(mode.part.is_some(), per_part, "{name}");
            let key = combine_key(args).unwrap();
            assert!(key.starts_with(name.as_bytes()), "{name}");
        }
    }
}
