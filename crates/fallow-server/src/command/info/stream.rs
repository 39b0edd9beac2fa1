//! Metadata of the stream commands (see `super`): rows of the command table, without handlers. XGROUP
//! and XINFO are containers whose subcommands name their key second (`XGROUP CREATE key ...`); XREAD
//! and XREADGROUP name theirs after STREAMS.
use super::flags::*;
use super::{info, is, CommandInfo, Group, Keys, ONE_KEY};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("xadd", -5, WRITE | DENYOOM | FAST, ONE_KEY, Group::STREAM, "Append an entry to a stream, creating it when absent"),
    info("xlen", 2, READONLY | FAST, ONE_KEY, Group::STREAM, "Number of entries in a stream"),
    info("xrange", -4, READONLY, ONE_KEY, Group::STREAM, "Entries with ids in a range"),
    info("xrevrange", -4, READONLY, ONE_KEY, Group::STREAM, "Entries with ids in a range, newest first"),
    info("xdel", -3, WRITE | FAST, ONE_KEY, Group::STREAM, "Delete entries by id"),
    info("xtrim", -4, WRITE, ONE_KEY, Group::STREAM, "Delete the oldest entries (MAXLEN or MINID)"),
    info("xread", -4, READONLY | BLOCKING, Keys::Custom(xread_keys), Group::STREAM, "Entries after given ids from several streams, blocking until there are some"),
    info("xreadgroup", -7, WRITE | BLOCKING, Keys::Custom(xread_keys), Group::STREAM, "Entries for a consumer of a consumer group, blocking until there are some"),
    info("xgroup", -2, WRITE, SECOND_ARGUMENT_KEY, Group::STREAM, "Manage consumer groups (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER)"),
    info("xack", -4, WRITE | FAST, ONE_KEY, Group::STREAM, "Acknowledge pending entries of a consumer group"),
    info("xpending", -3, READONLY, ONE_KEY, Group::STREAM, "Pending entries of a consumer group"),
    info("xclaim", -6, WRITE | FAST, ONE_KEY, Group::STREAM, "Give pending entries to another consumer"),
    info("xautoclaim", -6, WRITE | FAST, ONE_KEY, Group::STREAM, "Give idle pending entries to another consumer, scanning with a cursor"),
    info("xinfo", -2, READONLY, SECOND_ARGUMENT_KEY, Group::STREAM, "Inspect a stream, its groups and consumers (STREAM, GROUPS, CONSUMERS)"),
    info("xsetid", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STREAM, "Set a stream's last id and counters"),
];

/// `XGROUP <subcommand> key ...`, `XINFO <subcommand> key ...`.
const SECOND_ARGUMENT_KEY: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};

/// The position of XREAD's / XREADGROUP's STREAMS argument, found as Redis's xreadGetKeys finds it:
/// options before it are skipped with their arguments; None when there is none.
pub fn streams_position(args: &[&[u8]]) -> Option<usize> {
    let mut at = 1;
    while at < args.len() {
        let arg = args[at];
        if is(arg, "block") || is(arg, "count") {
            at += 2;
        } else if is(arg, "group") {
            at += 3;
        } else if is(arg, "noack") {
            at += 1;
        } else if is(arg, "streams") {
            return Some(at);
        } else {
            return None;
        }
    }
    None
}

/// The keys of XREAD/XREADGROUP: the first half of the arguments after STREAMS (the ids are the other
/// half); none when they do not pair up.
pub fn xread_keys(args: &[&[u8]]) -> Vec<usize> {
    let Some(streams) = streams_position(args) else {
        return Vec::new();
    };
    let after = args.len() - streams - 1;
    if after == 0 || !after.is_multiple_of(2) {
        return Vec::new();
    }
    (streams + 1..streams + 1 + after / 2).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_keys_follow_streams() {
        let args: [&[u8]; 8] = [
            b"xread", b"COUNT", b"2", b"BLOCK", b"0", b"STREAMS", b"a", b"0",
        ];
        assert_eq!(xread_keys(&args), vec![6]);
        let args: [&[u8]; 10] = [
            b"xreadgroup",
            b"GROUP",
            b"streams",
            b"c",
            b"NOACK",
            b"STREAMS",
            b"a",
            b"b",
            b">",
            b">",
        ];
        assert_eq!(xread_keys(&args), vec![6, 7]);
        let unbalanced: [&[u8]; 5] = [b"xread", b"STREAMS", b"a", b"b", b"0"];
        assert!(xread_keys(&unbalanced).is_empty());
        let no_streams: [&[u8]; 4] = [b"xread", b"FOO", b"a", b"0"];
        assert!(xread_keys(&no_streams).is_empty());
    }
}
