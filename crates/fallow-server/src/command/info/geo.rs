//! Metadata of the geo commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, is, CommandInfo, Group, Keys, ONE_KEY, TWO_KEYS};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("geoadd", -5, WRITE | DENYOOM, ONE_KEY, Group::GEO, "Add positions (longitude, latitude, member) to a sorted set"),
    info("geodist", -4, READONLY, ONE_KEY, Group::GEO, "Distance between two members"),
    info("geohash", -2, READONLY, ONE_KEY, Group::GEO, "Standard geohash strings of members"),
    info("geopos", -2, READONLY, ONE_KEY, Group::GEO, "Positions of members"),
    info("georadius", -6, WRITE | DENYOOM, Keys::Custom(georadius_keys), Group::GEO, "Members within a radius of a position, or STORE them"),
    info("georadius_ro", -6, READONLY, ONE_KEY, Group::GEO, "Members within a radius of a position"),
    info("georadiusbymember", -5, WRITE | DENYOOM, Keys::Custom(georadius_keys), Group::GEO, "Members within a radius of a member, or STORE them"),
    info("georadiusbymember_ro", -5, READONLY, ONE_KEY, Group::GEO, "Members within a radius of a member"),
    info("geosearch", -7, READONLY, ONE_KEY, Group::GEO, "Members within a radius or box of a position or member"),
    info("geosearchstore", -8, WRITE | DENYOOM, TWO_KEYS, Group::GEO, "Store the members within a radius or box"),
];

/// GEORADIUS[BYMEMBER] key ... [STORE key] [STOREDIST key]: the source and the last STORE/STOREDIST
/// destination, found as Redis's georadiusGetKeys finds it (scanning from the fifth argument). A call that
/// parses stores to exactly that key: its other options (flags, COUNT with a number) are never "store".
pub fn georadius_keys(args: &[&[u8]]) -> Vec<usize> {
    let mut keys = vec![1];
    let mut stored = None;
    let mut index = 5;
    while index < args.len() {
        let option = args[index];
        if (is(option, "store") || is(option, "storedist")) && index + 1 < args.len() {
            stored = Some(index + 1);
            index += 1;
        }
        index += 1;
    }
    keys.extend(stored);
    keys
}
