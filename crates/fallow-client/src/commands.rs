//! Which commands the combiner may merge (Claret §5.2: only operations declared combinable are compared).
//!
//! Combinable operations are the pure commuting writes: they return nothing inside a transaction (their
//! reply comes at commit) and every two of them commute, so the server gives them one shared lock mode.
//! Two such operations on the same key and mode can therefore ride on one server transaction's lock.
//! The mode must match exactly: HINCRBY takes a per-field mode, so it combines per (key, field).

/// A combinable command: its name, the family naming its lock mode, its argument count bounds, and
/// whether its mode is per part (argument 2, the field).
struct Combinable {
    command: &'static str,
    family: &'static str,
    args_min: usize,
    args_max: usize,
    per_part: bool,
}

const fn entry(
    command: &'static str,
    family: &'static str,
    args_min: usize,
    args_max: usize,
    per_part: bool,
) -> Combinable {
    Combinable {
        command,
        family,
        args_min,
        args_max,
        per_part,
    }
}

const COMBINABLE: &[Combinable] = &[
    entry("sadd", "set.add", 3, usize::MAX, false),
    entry("incr", "counter.incr", 2, 2, false),
    entry("decr", "counter.incr", 2, 2, false),
    entry("incrby", "counter.incr", 3, 3, false),
    entry("decrby", "counter.incr", 3, 3, false),
    entry("hincrby", "hash.incr", 4, 4, true),
    entry("zincrby", "zset.incr", 4, 4, false),
    entry("bag.add", "bag.add", 3, usize::MAX, false),
    entry("topn.add", "topn.add", 3, usize::MAX, false),
];

/// The identity of a combinable operation's lock: family, key and (for per-part modes) the part. Two
/// operations with equal keys take the same mode on the same record.
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
    let mut key = Vec::with_capacity(entry.family.len() + args[1].len() + 16);
    key.extend_from_slice(entry.family.as_bytes());
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
}
