//! Which lock modes a command takes on which records: the link between Redis commands and the data types'
//! declarations in `fallow_txn::types`. Reads take the shared `read` mode (reads commute with reads); a
//! write takes its data type's mode when the table below names one (boosting) and the exclusive `write`
//! mode otherwise, as it does under the reader/writer baseline (`txn-locks rw`).
use crate::command::info::{flags, key_positions, CommandInfo};
use crate::txn::{KeyLock, LockKey, Modes};
use fallow_txn::types::{counter, dict, list, scored_set, set, summary_bag, topk, uid};
use fallow_txn::{rw_mode, Access, Mode};
use smallvec::{smallvec, SmallVec};

/// The modes a write takes on its first key (args[1]), from its arguments.
type ModeRule = fn(&[&[u8]]) -> Modes;

/// Writes with a mode of their data type; every other write is exclusive. Reads need no entry. A command
/// whose effect depends on the record in a way its type's modes do not cover (LPUSHX: only if the list
/// exists; INCRBYFLOAT: rounding depends on the order) stays exclusive.
const ABSTRACT_WRITES: &[(&str, ModeRule)] = &[
    ("sadd", |_| smallvec![set::ADD]),
    ("srem", |_| smallvec![set::REMOVE]),
    ("incr", |_| smallvec![counter::INCR]),
    ("decr", |_| smallvec![counter::INCR]),
    ("incrby", |_| smallvec![counter::INCR]),
    ("decrby", |_| smallvec![counter::INCR]),
    ("hset", |args| {
        every_other(args, 2).map(dict::field_write).collect()
    }),
    ("hmset", |args| {
        every_other(args, 2).map(dict::field_write).collect()
    }),
    ("hsetnx", |args| smallvec![dict::field_write(&args[2])]),
    ("hincrby", |args| smallvec![dict::field_write(&args[2])]),
    ("hincrbyfloat", |args| {
        smallvec![dict::field_write(&args[2])]
    }),
    ("hdel", |args| {
        args[2..].iter().map(dict::field_write).collect()
    }),
    ("zadd", zadd_modes),
    ("zincrby", zincrby_modes),
    ("zrem", |args| {
        args[2..].iter().map(scored_set::member_write).collect()
    }),
    ("lpush", |_| smallvec![list::PUSH_LEFT]),
    ("rpush", |_| smallvec![list::PUSH_RIGHT]),
    ("lpop", |_| smallvec![list::POP]),
    ("rpop", |_| smallvec![list::POP]),
    ("topn.add", |_| smallvec![topk::ADD]),
    ("bag.add", |_| smallvec![summary_bag::ADD]),
    ("uid.next", |_| smallvec![uid::NEXT]),
];

/// Arguments from `first` on, every second one (the fields of HSET field value ...).
fn every_other<'a>(args: &'a [&'a [u8]], first: usize) -> impl Iterator<Item = &'a &'a [u8]> {
    args.iter().skip(first).step_by(2)
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ...: each member's part.
fn zadd_modes(args: &[&[u8]]) -> Modes {
    let options = args[2..]
        .iter()
        .take_while(|arg| {
            ["nx", "xx", "gt", "lt", "ch", "incr"]
                .iter()
                .any(|option| arg.eq_ignore_ascii_case(option.as_bytes()))
        })
        .count();
    let members = every_other(args, 3 + options).map(scored_set::member_write);
    let modes: Modes = members.collect();
    if modes.is_empty() {
        // a malformed ZADD: it fails when it runs; lock the whole record meanwhile
        return smallvec![exclusive()];
    }
    modes
}

/// Increments by integers commute exactly (scores are doubles, exact up to 2^53); a fractional increment
/// may round differently in another order, so it takes its member's part.
fn zincrby_modes(args: &[&[u8]]) -> Modes {
    const EXACT_MAX: i64 = 1 << 53;
    match fallow_proto::resp::parse_i64(args[2]) {
        Some(increment) if increment.abs() < EXACT_MAX => smallvec![scored_set::INCR],
        _ => smallvec![scored_set::member_write(&args[3])],
    }
}

fn exclusive() -> Mode {
    rw_mode(Access::Mutate)
}

/// Whether the command only reads.
pub fn is_read(spec: &CommandInfo) -> bool {
    spec.flags & flags::WRITE == 0
}

/// Lock requests, one per distinct record; a one-key command's is held inline.
pub type Requests = SmallVec<[KeyLock; 1]>;

/// The lock requests of one command over database address `db`, one per distinct key.
pub fn requests(spec: &CommandInfo, args: &[&[u8]], db: usize, abstract_locks: bool) -> Requests {
    let mut requests = Requests::new();
    for position in key_positions(spec, args) {
        let modes = modes_at(spec, args, position, abstract_locks);
        let key: LockKey = (db, args[position].into());
        add_requests(&mut requests, [KeyLock { key, modes }]);
    }
    requests
}

/// TXN.LOCK's requests: every key in the exclusive mode (under either lock setting), each record once.
pub fn exclusive_requests(keys: &[&[u8]], db: usize) -> Requests {
    let mut requests = Requests::new();
    let locks = keys.iter().map(|key| KeyLock {
        key: (db, (*key).into()),
        modes: smallvec![exclusive()],
    });
    add_requests(&mut requests, locks);
    requests
}

/// A memcached request's lock on one item: `read` to look at it, the exclusive `write` to change it
/// (memcached's writes answer with what they did, so none commutes with another).
pub fn item_request(key: &[u8], access: Access, db: usize) -> Requests {
    smallvec![KeyLock {
        key: (db, key.into()),
        modes: smallvec![rw_mode(access)],
    }]
}

/// Adds lock requests to `requests`, one per distinct record (EXEC gathers those of its queue).
pub fn add_requests(requests: &mut Requests, more: impl IntoIterator<Item = KeyLock>) {
    for request in more {
        match requests.iter_mut().find(|known| known.key == request.key) {
            Some(known) => merge(&mut known.modes, request.modes),
            None => requests.push(request),
        }
    }
}

fn modes_at(spec: &CommandInfo, args: &[&[u8]], position: usize, abstract_locks: bool) -> Modes {
    if is_read(spec) {
        return smallvec![rw_mode(Access::Read)];
    }
    if abstract_locks && position == 1 {
        if let Some((_, rule)) = ABSTRACT_WRITES.iter().find(|(name, _)| *name == spec.name) {
            return rule(args);
        }
    }
    smallvec![exclusive()]
}

/// One command naming a key twice (SMOVE s s x) takes both modes when they are of one name, else the
/// exclusive mode.
fn merge(modes: &mut Modes, more: Modes) {
    if modes[0].name == more[0].name {
        for mode in more {
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
    } else {
        *modes = smallvec![exclusive()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::info::lookup;

    fn modes_of(args: &[&str], abstract_locks: bool) -> Requests {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        let (_, spec) = lookup(args[0]).expect("known command");
        requests(spec, &args, 0, abstract_locks)
    }

    #[test]
    fn every_abstract_rule_names_a_known_write() {
        for (name, _) in ABSTRACT_WRITES {
            let Some((_, spec)) = lookup(name.as_bytes()) else {
                // commands of types that may not be built yet are named ahead of them
                assert!(name.contains('.'), "{name} is not a command");
                continue;
            };
            assert!(!is_read(spec), "{name} is a read");
        }
    }

    #[test]
    fn boosting_gives_data_type_modes_and_rw_gives_exclusive_writes() {
        let sadd = modes_of(&["sadd", "s", "x", "y"], true);
        assert_eq!(sadd[0].modes.as_slice(), [set::ADD]);
        assert_eq!(
            modes_of(&["sadd", "s", "x"], false)[0].modes.as_slice(),
            [exclusive()]
        );
        assert_eq!(
            modes_of(&["scard", "s"], true)[0].modes.as_slice(),
            [set::READ]
        );
        assert_eq!(
            modes_of(&["set", "k", "v"], true)[0].modes.as_slice(),
            [exclusive()]
        );
    }

    #[test]
    fn per_part_writes_name_each_field_and_member() {
        let hset = modes_of(&["hset", "h", "f", "1", "g", "2"], true);
        assert_eq!(
            hset[0].modes.as_slice(),
            [dict::field_write(&&b"f"[..]), dict::field_write(&&b"g"[..])]
        );
        let zadd = modes_of(&["zadd", "z", "nx", "ch", "1", "m", "2", "n"], true);
        assert_eq!(zadd[0].modes.len(), 2);
        assert!(zadd[0].modes[0].compatible(zadd[0].modes[1]));
        assert_eq!(
            modes_of(&["zincrby", "z", "3", "m"], true)[0]
                .modes
                .as_slice(),
            [scored_set::INCR]
        );
        assert_eq!(
            modes_of(&["zincrby", "z", "0.5", "m"], true)[0].modes[0].name,
            "zset.member-write"
        );
    }

    #[test]
    fn a_key_named_twice_is_locked_once() {
        let smove = modes_of(&["smove", "s", "s", "x"], true);
        assert_eq!(smove.len(), 1);
        assert_eq!(smove[0].modes.as_slice(), [exclusive()]);
        let mget = modes_of(&["mget", "a", "b", "a"], true);
        assert_eq!(mget.len(), 2);
    }
}
