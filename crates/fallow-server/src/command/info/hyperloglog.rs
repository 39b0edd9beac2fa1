//! Metadata of the HyperLogLog commands (see `super`): rows of the command table, without handlers. An
//! HLL is a string in Redis's representation. PFCOUNT is read-only as in Redis, though it may refresh the
//! cardinality cached in the value.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ALL_KEYS, ONE_KEY};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("pfadd", -2, WRITE | DENYOOM | FAST, ONE_KEY, Group::HYPERLOGLOG, "Add elements to a HyperLogLog"),
    info("pfcount", -2, READONLY, ALL_KEYS, Group::HYPERLOGLOG, "Estimated cardinality of one HyperLogLog or of the union of several"),
    info("pfmerge", -2, WRITE | DENYOOM, ALL_KEYS, Group::HYPERLOGLOG, "Merge HyperLogLogs into the first key"),
    info("pfdebug", 3, WRITE | DENYOOM | ADMIN, KEY_SECOND, Group::HYPERLOGLOG, "Inspect a HyperLogLog (GETREG, DECODE, ENCODING, TODENSE)"),
    info("pfselftest", 1, ADMIN, Keys::None, Group::HYPERLOGLOG, "Check the HyperLogLog implementation"),
];

/// PFDEBUG subcommand key.
const KEY_SECOND: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};
