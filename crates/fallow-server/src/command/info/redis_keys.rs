//! Redis 7.0's command table as data (`redis_table`), and its key specs evaluated as Redis evaluates them:
//! which arguments are keys and whether each is read, written or both. The ACL grants `%R~`/`%W~` patterns
//! by these flags, so a command reads and writes exactly the keys Redis says it does.
use std::collections::HashMap;
use std::sync::LazyLock;

/// Key-spec flags (Redis's CMD_KEY_*), as far as the ACL needs them.
pub const ACCESS: u16 = 1 << 0;
pub const INSERT: u16 = 1 << 1;
pub const DELETE: u16 = 1 << 2;
pub const UPDATE: u16 = 1 << 3;
/// Not a key (a shard channel).
pub const NOT_KEY: u16 = 1 << 4;
/// The spec may miss keys: Redis falls back to the command's own key finder.
pub const INCOMPLETE: u16 = 1 << 5;
/// The flags depend on the arguments (SET ... GET, BITFIELD ... SET).
pub const VARIABLE_FLAGS: u16 = 1 << 6;

/// What a key needs from a key pattern.
pub const READ: u8 = 1 << 0;
pub const WRITE: u8 = 1 << 1;

/// One command or subcommand (`parent|sub`) of Redis 7.0.
pub struct RedisCommand {
    pub name: &'static str,
    /// Bits in `REDIS_CATEGORIES` order.
    pub categories: u32,
    pub key_specs: &'static [KeySpec],
}

pub struct KeySpec {
    pub flags: u16,
    pub begin: Begin,
    pub find: Find,
}

pub enum Begin {
    Index(i32),
    /// The argument after this keyword, searched from `startfrom` (negative: backwards from the end).
    Keyword(&'static str, i32),
    Unknown,
}

pub enum Find {
    Range {
        last: i32,
        step: i32,
        limit: i32,
    },
    Keynum {
        numkeys_at: i32,
        first: i32,
        step: i32,
    },
    Unknown,
}

static BY_NAME: LazyLock<HashMap<&'static str, &'static RedisCommand>> = LazyLock::new(|| {
    REDIS_COMMANDS
        .iter()
        .map(|command| (command.name, command))
        .collect()
});

/// Redis's row for a lower-case command name or `parent|sub`.
pub fn redis_command(name: &str) -> Option<&'static RedisCommand> {
    BY_NAME.get(name).copied()
}

/// What a key with these spec flags needs (Redis's ACLSelectorCheckKey).
pub fn needs(flags: u16) -> u8 {
    let mut need = 0;
    if flags & ACCESS != 0 {
        need |= READ;
    }
    if flags & (INSERT | DELETE | UPDATE) != 0 {
        need |= WRITE;
    }
    need
}

/// The keys of a call of `command` as Redis's getKeysUsingKeySpecs finds them: (position, spec flags), in
/// spec order. None when a spec does not apply to these arguments (Redis then asks the command's own key
/// finder).
pub fn spec_keys(command: &RedisCommand, args: &[&[u8]]) -> Option<Vec<(usize, u16)>> {
    let argc = args.len() as i64;
    let mut keys = Vec::new();
    for spec in command.key_specs {
        if spec.flags & NOT_KEY != 0 {
            continue;
        }
        if spec.flags & INCOMPLETE != 0 {
            return None;
        }
        let Some(first) = begin_at(&spec.begin, args) else {
            continue; // keyword absent: this spec has no keys here
        };
        let (first, last, step) = match spec.find {
            Find::Range { last, step, limit } => {
                let end = if last >= 0 {
                    first + last as i64
                } else if limit == 0 {
                    argc + last as i64
                } else {
                    first + ((argc - first) / limit as i64 + last as i64)
                };
                (first, end, step as i64)
            }
            Find::Keynum {
                numkeys_at,
                first: offset,
                step,
            } => {
                let at = usize::try_from(first + numkeys_at as i64).ok()?;
                let numkeys = fallow_proto::resp::parse_i64(args.get(at)?).filter(|&n| n >= 0)?;
                let start = first + offset as i64;
                (start, start.saturating_add(numkeys) - 1, step as i64)
            }
            Find::Unknown => return None,
        };
        if last >= argc || last < first || first >= argc || step <= 0 {
            return None;
        }
        let mut position = first;
        while position <= last {
            keys.push((position as usize, spec.flags));
            position += step;
        }
    }
    Some(keys)
}

fn begin_at(begin: &Begin, args: &[&[u8]]) -> Option<i64> {
    let argc = args.len() as i64;
    match *begin {
        Begin::Index(index) => Some(index as i64),
        Begin::Keyword(keyword, startfrom) => {
            let positions: Box<dyn Iterator<Item = i64>> = if startfrom > 0 {
                Box::new(startfrom as i64..argc)
            } else {
                Box::new((1..=argc + startfrom as i64).rev())
            };
            positions
                .filter(|&at| at >= 1 && at < argc)
                .find(|&at| args[at as usize].eq_ignore_ascii_case(keyword.as_bytes()))
                .map(|at| at + 1)
        }
        Begin::Unknown => None,
    }
}

/// Spec flags of SET's key (Redis's setGetKeys): GET makes it read as well as written.
pub fn set_key_flags(args: &[&[u8]]) -> u16 {
    let get = args
        .iter()
        .skip(3)
        .any(|arg| arg.eq_ignore_ascii_case(b"get"));
    if get {
        ACCESS | UPDATE
    } else {
        UPDATE
    }
}

/// Spec flags of BITFIELD's key (Redis's bitfieldGetKeys): read-only unless a SET or INCRBY (or anything
/// unparsable) is among its operations.
pub fn bitfield_key_flags(args: &[&[u8]]) -> u16 {
    let mut at = 2;
    while at < args.len() {
        let remaining = args.len() - at - 1;
        let arg = args[at];
        if arg.eq_ignore_ascii_case(b"get") && remaining >= 2 {
            at += 3;
        } else if arg.eq_ignore_ascii_case(b"overflow") && remaining >= 1 {
            at += 2;
        } else {
            return ACCESS | UPDATE;
        }
    }
    ACCESS
}

// REDIS_COMMANDS, generated.
include!("redis_table.rs");

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &'static str) -> Vec<&'static [u8]> {
        text.split(' ').map(str::as_bytes).collect()
    }

    fn keys(text: &'static str) -> Option<Vec<(usize, u8)>> {
        let args = args(text);
        let name = std::str::from_utf8(args[0]).unwrap();
        spec_keys(redis_command(name).unwrap(), &args)
            .map(|keys| keys.into_iter().map(|(at, f)| (at, needs(f))).collect())
    }

    #[test]
    fn specs_find_keys_and_their_permissions_as_redis() {
        assert_eq!(keys("get k"), Some(vec![(1, READ)]));
        assert_eq!(
            keys("lmove a b left right"),
            Some(vec![(1, READ | WRITE), (2, WRITE)])
        );
        assert_eq!(keys("copy a b"), Some(vec![(1, READ), (2, WRITE)]));
        assert_eq!(keys("mset a 1 b 2"), Some(vec![(1, WRITE), (3, WRITE)]));
        assert_eq!(
            keys("xread count 2 streams s1 s2 0 0"),
            Some(vec![(4, READ), (5, READ)])
        );
        assert_eq!(
            keys("zunionstore d 2 a b weights 1 2"),
            Some(vec![(1, WRITE), (3, READ), (4, READ)])
        );
        assert_eq!(keys("zunionstore d x a"), None, "bad numkeys");
        assert_eq!(keys("sort l"), None, "incomplete");
        assert_eq!(set_key_flags(&args("set k v get")), ACCESS | UPDATE);
        assert_eq!(set_key_flags(&args("set k v ex 1")), UPDATE);
        assert_eq!(bitfield_key_flags(&args("bitfield k get u8 0")), ACCESS);
        assert_eq!(
            bitfield_key_flags(&args("bitfield k incrby u8 0 1")),
            ACCESS | UPDATE
        );
    }
}
