//! What the ACL needs of Redis 7.0's command table (`super::redis`, from `redis_commands.json`): every
//! command and subcommand with its categories, and the keys a call names with whether each is read,
//! written or both. The keys come from the key-spec interpreter COMMAND GETKEYSANDFLAGS uses
//! (`super::keyspec`), which is what Redis's ACL asks too (`getKeysFromCommandWithSpecs`), so `%R~`/`%W~`
//! grant exactly what Redis grants.
use super::keyspec::key_flags::{ACCESS, DELETE, INSERT, NOT_KEY, UPDATE};
use super::redis::{redis_commands, RedisCommand};
use super::REDIS_CATEGORIES;
use std::collections::HashMap;
use std::sync::LazyLock;

/// What a key needs from a key pattern.
pub const READ: u8 = 1 << 0;
pub const WRITE: u8 = 1 << 1;

/// Every Redis command, each container right before its subcommands (the order ACL rules are built in).
pub fn all_commands() -> impl Iterator<Item = &'static RedisCommand> {
    redis_commands()
        .iter()
        .flat_map(|command| std::iter::once(command).chain(command.subcommands.iter().flatten()))
}

static BY_NAME: LazyLock<HashMap<&'static str, &'static RedisCommand>> = LazyLock::new(|| {
    all_commands()
        .map(|command| (command.name.as_str(), command))
        .collect()
});

/// Redis's row for a lower-case command name or `parent|sub`.
pub fn redis_command(name: &str) -> Option<&'static RedisCommand> {
    BY_NAME.get(name).copied()
}

/// The command's categories as bits in `REDIS_CATEGORIES` order.
pub fn category_bits(command: &RedisCommand) -> u32 {
    command.acl_categories.iter().fold(0, |bits, name| {
        let name = name.trim_start_matches('@');
        let index = REDIS_CATEGORIES
            .iter()
            .position(|category| *category == name)
            .unwrap_or_else(|| panic!("{}: unknown category {name}", command.name));
        bits | 1 << index
    })
}

/// What a key with these spec flags needs (Redis's ACLSelectorCheckKey).
pub fn needs(flags: u32) -> u8 {
    let mut need = 0;
    if flags & ACCESS != 0 {
        need |= READ;
    }
    if flags & (INSERT | DELETE | UPDATE) != 0 {
        need |= WRITE;
    }
    need
}

/// (position, READ/WRITE) of each key of a call of `command`, in Redis's order. A call whose keys cannot be
/// found (a numkeys that does not parse) names none, as in Redis: the command itself refuses it.
pub fn key_needs(command: &'static RedisCommand, args: &[&[u8]]) -> Vec<(usize, u8)> {
    command
        .key_model()
        .get_keys(args)
        .unwrap_or_default()
        .into_iter()
        .filter(|&(_, flags)| flags & NOT_KEY == 0)
        .map(|(position, flags)| (position, needs(flags)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &'static str) -> Vec<(usize, u8)> {
        let args: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
        let name = std::str::from_utf8(args[0]).unwrap();
        key_needs(redis_command(name).unwrap(), &args)
    }

    #[test]
    fn keys_and_their_permissions_are_redis_s() {
        assert_eq!(keys("get k"), vec![(1, READ)]);
        assert_eq!(
            keys("lmove a b left right"),
            vec![(1, READ | WRITE), (2, WRITE)]
        );
        assert_eq!(keys("copy a b"), vec![(1, READ), (2, WRITE)]);
        assert_eq!(keys("mset a 1 b 2"), vec![(1, WRITE), (3, WRITE)]);
        assert_eq!(
            keys("xread count 2 streams s1 s2 0 0"),
            vec![(4, READ), (5, READ)]
        );
        assert_eq!(
            keys("zunionstore d 2 a b weights 1 2"),
            vec![(1, WRITE), (3, READ), (4, READ)]
        );
        assert_eq!(keys("zunionstore d x a"), vec![], "bad numkeys");
        assert_eq!(keys("sort l"), vec![(1, READ)], "SORT's own key finder");
        assert_eq!(keys("sort l store d"), vec![(1, READ), (3, WRITE)]);
        assert_eq!(keys("set k v get"), vec![(1, READ | WRITE)]);
        assert_eq!(keys("set k v ex 1"), vec![(1, WRITE)]);
        assert_eq!(keys("bitfield k get u8 0"), vec![(1, READ)]);
        assert_eq!(keys("bitfield k incrby u8 0 1"), vec![(1, READ | WRITE)]);
        let object_encoding = redis_command("object|encoding").unwrap();
        let call: [&[u8]; 3] = [b"object", b"encoding", b"k"];
        let positions: Vec<usize> = key_needs(object_encoding, &call)
            .into_iter()
            .map(|(position, _)| position)
            .collect();
        assert_eq!(positions, vec![2], "a subcommand's own specs");
    }

    #[test]
    fn every_command_and_subcommand_is_listed_with_known_categories() {
        assert!(redis_command("config|get").is_some());
        assert!(redis_command("get").is_some());
        let total = all_commands()
            .map(category_bits)
            .filter(|&bits| bits != 0)
            .count();
        assert_eq!(
            total,
            all_commands().count(),
            "every command has a category"
        );
    }
}
