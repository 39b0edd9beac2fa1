//! Redis 7.0 key specs and the interpreter COMMAND GETKEYS / GETKEYSANDFLAGS use: where a command's keys
//! are (begin_search, then find_keys) and how it touches them (the flags), evaluated exactly as Redis's
//! `getKeysFromCommandWithSpecs` does, with Redis's getkeys procs for the commands whose specs cannot say
//! (SORT's STORE, MIGRATE's KEYS, numkeys arguments that do not parse, SET ... GET, BITFIELD ... SET).
use serde::Deserialize;
use std::borrow::Cow;

/// Key-spec flags, in the order Redis lists them (`addReplyFlagsForKeyArgs`).
pub mod key_flags {
    pub const RO: u32 = 1 << 0;
    pub const RW: u32 = 1 << 1;
    pub const OW: u32 = 1 << 2;
    pub const RM: u32 = 1 << 3;
    pub const ACCESS: u32 = 1 << 4;
    pub const UPDATE: u32 = 1 << 5;
    pub const INSERT: u32 = 1 << 6;
    pub const DELETE: u32 = 1 << 7;
    pub const NOT_KEY: u32 = 1 << 8;
    pub const INCOMPLETE: u32 = 1 << 9;
    pub const VARIABLE_FLAGS: u32 = 1 << 10;
    pub const NAMES: [(u32, &str); 11] = [
        (RO, "RO"),
        (RW, "RW"),
        (OW, "OW"),
        (RM, "RM"),
        (ACCESS, "access"),
        (UPDATE, "update"),
        (INSERT, "insert"),
        (DELETE, "delete"),
        (NOT_KEY, "not_key"),
        (INCOMPLETE, "incomplete"),
        (VARIABLE_FLAGS, "variable_flags"),
    ];

    /// The names of the flags set in `flags`, in Redis's order.
    pub fn names(flags: u32) -> impl Iterator<Item = &'static str> {
        NAMES
            .iter()
            .filter(move |(flag, _)| flags & flag != 0)
            .map(|(_, name)| *name)
    }
}

/// Where the search for a spec's keys starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeginSearch {
    /// At a fixed argument.
    Index(i64),
    /// After the first `keyword` found from `startfrom` (negative: from the end, searching backwards).
    Keyword { keyword: String, startfrom: i64 },
    /// Only the command's getkeys proc knows.
    Unknown,
}

/// Which arguments from the start are keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindKeys {
    /// Up to `lastkey` after the start (negative: from the end; with `limit`, a 1/limit share of the rest).
    Range {
        lastkey: i64,
        keystep: i64,
        limit: i64,
    },
    /// A count at `keynumidx` after the start, keys from `firstkey` after the start.
    Keynum {
        keynumidx: i64,
        firstkey: i64,
        keystep: i64,
    },
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawKeySpec")]
pub struct KeySpec {
    pub notes: Option<String>,
    pub flags: u32,
    pub begin_search: BeginSearch,
    pub find_keys: FindKeys,
}

/// A key spec as COMMAND INFO writes it (and as redis_commands.json stores it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeySpec {
    notes: Option<String>,
    flags: Vec<String>,
    begin_search: RawSearch,
    find_keys: RawSearch,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    #[serde(rename = "type")]
    kind: String,
    spec: RawSearchSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearchSpec {
    index: Option<i64>,
    keyword: Option<String>,
    startfrom: Option<i64>,
    lastkey: Option<i64>,
    keystep: Option<i64>,
    limit: Option<i64>,
    keynumidx: Option<i64>,
    firstkey: Option<i64>,
}

impl TryFrom<RawKeySpec> for KeySpec {
    type Error = String;

    fn try_from(raw: RawKeySpec) -> Result<KeySpec, String> {
        let mut flags = 0;
        for name in &raw.flags {
            let (flag, _) = key_flags::NAMES
                .iter()
                .find(|(_, known)| known == name)
                .ok_or_else(|| format!("unknown key-spec flag {name}"))?;
            flags |= flag;
        }
        let missing = |what: &str| format!("key spec {} without {what}", raw.begin_search.kind);
        let begin = &raw.begin_search.spec;
        let begin_search = match raw.begin_search.kind.as_str() {
            "index" => BeginSearch::Index(begin.index.ok_or_else(|| missing("index"))?),
            "keyword" => BeginSearch::Keyword {
                keyword: begin.keyword.clone().ok_or_else(|| missing("keyword"))?,
                startfrom: begin.startfrom.ok_or_else(|| missing("startfrom"))?,
            },
            "unknown" => BeginSearch::Unknown,
            other => return Err(format!("unknown begin_search type {other}")),
        };
        let find = &raw.find_keys.spec;
        let field = |value: Option<i64>, what: &str| value.ok_or_else(|| missing(what));
        let find_keys = match raw.find_keys.kind.as_str() {
            "range" => FindKeys::Range {
                lastkey: field(find.lastkey, "lastkey")?,
                keystep: field(find.keystep, "keystep")?,
                limit: field(find.limit, "limit")?,
            },
            "keynum" => FindKeys::Keynum {
                keynumidx: field(find.keynumidx, "keynumidx")?,
                firstkey: field(find.firstkey, "firstkey")?,
                keystep: field(find.keystep, "keystep")?,
            },
            "unknown" => FindKeys::Unknown,
            other => return Err(format!("unknown find_keys type {other}")),
        };
        if let FindKeys::Range { keystep, .. } | FindKeys::Keynum { keystep, .. } = find_keys {
            // A step below 1 would never advance through the arguments.
            if keystep < 1 {
                return Err("key spec with a keystep below 1".into());
            }
        }
        Ok(KeySpec {
            notes: raw.notes,
            flags,
            begin_search,
            find_keys,
        })
    }
}

/// Redis's getkeys procs (the `get_keys_function` of redis/src/commands/*.json), and fallow's own
/// computed positions for its own commands.
#[derive(Clone, Copy)]
pub enum GetKeysProc {
    /// `genericGetKeys`: numkeys at `count_at`, keys from `first_at`, and an optional destination.
    NumKeys {
        store_at: usize,
        count_at: usize,
        first_at: usize,
    },
    Sort,
    SortRo,
    Migrate,
    Georadius,
    Xread,
    Set,
    Bitfield,
    /// A fallow command's computed positions, with the given flags.
    Fallow(fn(&[&[u8]]) -> Vec<usize>, u32),
}

impl GetKeysProc {
    /// The proc Redis registers for a command (by its full name), if any.
    pub fn for_redis_command(name: &str) -> Option<GetKeysProc> {
        let numkeys = |store_at, count_at, first_at| GetKeysProc::NumKeys {
            store_at,
            count_at,
            first_at,
        };
        Some(match name {
            "sintercard" | "zintercard" | "zunion" | "zinter" | "zdiff" | "lmpop" | "zmpop" => {
                numkeys(0, 1, 2)
            }
            "zunionstore" | "zinterstore" | "zdiffstore" => numkeys(1, 2, 3),
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" | "blmpop"
            | "bzmpop" => numkeys(0, 2, 3),
            "sort" => GetKeysProc::Sort,
            "sort_ro" => GetKeysProc::SortRo,
            "migrate" => GetKeysProc::Migrate,
            "georadius" | "georadiusbymember" => GetKeysProc::Georadius,
            "xread" | "xreadgroup" => GetKeysProc::Xread,
            "set" => GetKeysProc::Set,
            "bitfield" => GetKeysProc::Bitfield,
            _ => return None,
        })
    }

    /// The keys (position, flags) the proc finds.
    fn keys(self, argv: &[&[u8]]) -> Vec<(usize, u32)> {
        use key_flags::*;
        match self {
            GetKeysProc::NumKeys {
                store_at,
                count_at,
                first_at,
            } => numkeys_keys(argv, store_at, count_at, first_at),
            GetKeysProc::Sort => sort_keys(argv),
            GetKeysProc::SortRo => vec![(1, RO | ACCESS)],
            GetKeysProc::Migrate => migrate_keys(argv),
            GetKeysProc::Georadius => georadius_keys(argv),
            GetKeysProc::Xread => xread_keys(argv),
            GetKeysProc::Set => {
                let get = argv
                    .iter()
                    .skip(3)
                    .any(|arg| arg.eq_ignore_ascii_case(b"get"));
                vec![(
                    1,
                    if get {
                        RW | ACCESS | UPDATE
                    } else {
                        OW | UPDATE
                    },
                )]
            }
            GetKeysProc::Bitfield => vec![(1, bitfield_flags(argv))],
            GetKeysProc::Fallow(positions, flags) => positions(argv)
                .into_iter()
                .filter(|&at| at < argv.len())
                .map(|at| (at, flags))
                .collect(),
        }
    }
}

/// glibc's `atoi` (`(int)strtol`): leading blanks, a sign, digits, stopping at the first other byte; 0
/// when none; an overflow saturates the long, which the int cast then wraps.
fn atoi(arg: &[u8]) -> i32 {
    let text = arg.trim_ascii_start();
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let mut value: i64 = 0;
    for &byte in digits.iter().take_while(|byte| byte.is_ascii_digit()) {
        value = value
            .saturating_mul(10)
            .saturating_add((byte - b'0') as i64);
    }
    (if negative { -value } else { value }) as i32
}

/// `genericGetKeys`: keys named by a numkeys count (flags 0: the specs already give them).
fn numkeys_keys(
    argv: &[&[u8]],
    store_at: usize,
    count_at: usize,
    first_at: usize,
) -> Vec<(usize, u32)> {
    let count = argv.get(count_at).map_or(0, |arg| atoi(arg)) as i64;
    let room = argv.len().saturating_sub(first_at) as i64;
    if count < 1 || count > room {
        return Vec::new();
    }
    let mut keys: Vec<(usize, u32)> = (0..count as usize).map(|i| (first_at + i, 0)).collect();
    if store_at != 0 {
        keys.push((store_at, 0));
    }
    keys
}

/// `sortGetKeys`: the sorted key, and the last STORE's destination (options skipped as Redis skips them).
fn sort_keys(argv: &[&[u8]]) -> Vec<(usize, u32)> {
    use key_flags::*;
    let mut keys = vec![(1, RO | ACCESS)];
    let mut store = None;
    let mut at = 2;
    while at < argv.len() {
        let arg = argv[at];
        if arg.eq_ignore_ascii_case(b"limit") {
            at += 2;
        } else if arg.eq_ignore_ascii_case(b"get") || arg.eq_ignore_ascii_case(b"by") {
            at += 1;
        } else if arg.eq_ignore_ascii_case(b"store") && at + 1 < argv.len() {
            store = Some(at + 1);
        }
        at += 1;
    }
    keys.extend(store.map(|at| (at, OW | UPDATE)));
    keys
}

/// `migrateGetKeys`: the key argument, or those after KEYS when it is empty.
fn migrate_keys(argv: &[&[u8]]) -> Vec<(usize, u32)> {
    use key_flags::*;
    let (mut first, mut count) = (3, 1);
    let mut at = 6;
    while at < argv.len() {
        let arg = argv[at];
        if arg.eq_ignore_ascii_case(b"keys") {
            if argv[3].is_empty() {
                first = at + 1;
                count = argv.len() - first;
            } else {
                count = 0; // a syntax error MIGRATE itself reports
            }
            break;
        }
        if arg.eq_ignore_ascii_case(b"auth") {
            at += 1;
        } else if arg.eq_ignore_ascii_case(b"auth2") {
            at += 2;
        }
        at += 1;
    }
    (first..first + count)
        .map(|at| (at, RW | ACCESS | DELETE))
        .collect()
}

/// `georadiusGetKeys`: the key and the last STORE/STOREDIST destination.
fn georadius_keys(argv: &[&[u8]]) -> Vec<(usize, u32)> {
    let mut stored = None;
    let mut at = 5;
    while at < argv.len() {
        let arg = argv[at];
        let stores = arg.eq_ignore_ascii_case(b"store") || arg.eq_ignore_ascii_case(b"storedist");
        if stores && at + 1 < argv.len() {
            stored = Some(at + 1);
            at += 1;
        }
        at += 1;
    }
    let mut keys = vec![(1, 0)];
    keys.extend(stored.map(|at| (at, 0)));
    keys
}

/// `xreadGetKeys`: the first half of the arguments after STREAMS.
fn xread_keys(argv: &[&[u8]]) -> Vec<(usize, u32)> {
    let mut streams_at = None;
    let mut at = 1;
    while at < argv.len() {
        let arg = argv[at];
        if arg.eq_ignore_ascii_case(b"block") || arg.eq_ignore_ascii_case(b"count") {
            at += 1;
        } else if arg.eq_ignore_ascii_case(b"group") {
            at += 2;
        } else if arg.eq_ignore_ascii_case(b"streams") {
            streams_at = Some(at);
            break;
        } else if !arg.eq_ignore_ascii_case(b"noack") {
            break;
        }
        at += 1;
    }
    let Some(streams_at) = streams_at else {
        return Vec::new();
    };
    let rest = argv.len() - streams_at - 1;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Vec::new();
    }
    (streams_at + 1..streams_at + 1 + rest / 2)
        .map(|at| (at, 0))
        .collect()
}

/// `bitfieldGetKeys`: read-only when every operation is a GET (or OVERFLOW).
fn bitfield_flags(argv: &[&[u8]]) -> u32 {
    use key_flags::*;
    let mut read_only = true;
    let mut at = 2;
    while at < argv.len() {
        let remaining = argv.len() - at - 1;
        let arg = argv[at];
        if arg.eq_ignore_ascii_case(b"get") && remaining >= 2 {
            at += 2;
        } else if (arg.eq_ignore_ascii_case(b"set") || arg.eq_ignore_ascii_case(b"incrby"))
            && remaining >= 3
        {
            read_only = false;
            break;
        } else if arg.eq_ignore_ascii_case(b"overflow") && remaining >= 1 {
            at += 1;
        } else {
            read_only = false; // a syntax error: assume a write, as Redis does
            break;
        }
        at += 1;
    }
    if read_only {
        RO | ACCESS
    } else {
        RW | ACCESS | UPDATE
    }
}

/// What GETKEYS needs to know of a command.
pub struct KeyModel<'a> {
    pub arity: i64,
    pub specs: Cow<'a, [KeySpec]>,
    pub proc: Option<GetKeysProc>,
    /// Redis's `no_mandatory_keys` flag: no keys found is an empty answer, not an error.
    pub no_mandatory_keys: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum GetKeysError {
    NoKeyArguments,
    WrongArity,
    InvalidArguments,
}

impl GetKeysError {
    pub fn message(&self) -> &'static str {
        match self {
            GetKeysError::NoKeyArguments => "ERR The command has no key arguments",
            GetKeysError::WrongArity => "ERR Invalid number of arguments specified for command",
            GetKeysError::InvalidArguments => "ERR Invalid arguments specified for command",
        }
    }
}

impl KeyModel<'_> {
    /// Whether some spec names real keys (not only `not_key` ones).
    fn has_key_specs(&self) -> bool {
        self.specs
            .iter()
            .any(|spec| spec.flags & key_flags::NOT_KEY == 0)
    }

    fn has_variable_flags(&self) -> bool {
        self.specs
            .iter()
            .any(|spec| spec.flags & key_flags::VARIABLE_FLAGS != 0)
    }

    /// COMMAND GETKEYSANDFLAGS's answer for `argv` (the command name first): `getKeysSubcommandImpl`.
    pub fn get_keys(&self, argv: &[&[u8]]) -> Result<Vec<(usize, u32)>, GetKeysError> {
        if self.proc.is_none() && !self.has_key_specs() {
            return Err(GetKeysError::NoKeyArguments);
        }
        let argc = argv.len() as i64;
        if (self.arity > 0 && self.arity != argc) || argc < -self.arity {
            return Err(GetKeysError::WrongArity);
        }
        let keys = self.keys_with_specs(argv);
        if !keys.is_empty() || self.no_mandatory_keys {
            Ok(keys)
        } else {
            Err(GetKeysError::InvalidArguments)
        }
    }

    /// `getKeysFromCommandWithSpecs`: the specs when they are complete and their flags fixed, else the proc.
    fn keys_with_specs(&self, argv: &[&[u8]]) -> Vec<(usize, u32)> {
        if self.has_key_specs() && !self.has_variable_flags() {
            if let Some(keys) = keys_from_specs(&self.specs, self.arity, argv) {
                return keys;
            }
        }
        self.proc.map_or_else(Vec::new, |proc| proc.keys(argv))
    }
}

/// `getKeysUsingKeySpecs` without partial results: None when a spec cannot be followed (unknown, a bad
/// numkeys, out of range, or incomplete), so the caller falls back to the proc.
pub fn keys_from_specs(specs: &[KeySpec], arity: i64, argv: &[&[u8]]) -> Option<Vec<(usize, u32)>> {
    let argc = argv.len() as i64;
    let mut keys = Vec::new();
    for spec in specs {
        if spec.flags & key_flags::NOT_KEY != 0 {
            continue;
        }
        let Some(first) = begin_search(&spec.begin_search, argv)? else {
            continue; // keyword not found: this spec names no keys here
        };
        let (first, last, step) = find_keys(&spec.find_keys, first, argv)?;
        if last >= argc || last < first || first >= argc {
            return None;
        }
        let mut at = first;
        while at <= last {
            // Only reachable for a variadic command whose arguments do not fit its spec; the command
            // itself reports the error (Redis panics for fixed arities, which its table never has).
            assert!(arity < 0 || at < argc, "spec out of a fixed arity");
            if at < argc {
                keys.push((at as usize, spec.flags));
            }
            at += step;
        }
        if spec.flags & key_flags::INCOMPLETE != 0 {
            return None;
        }
    }
    Some(keys)
}

/// Where a spec's keys start: Some(None) when its keyword is absent, None for an unknown search.
fn begin_search(search: &BeginSearch, argv: &[&[u8]]) -> Option<Option<i64>> {
    let argc = argv.len() as i64;
    match search {
        BeginSearch::Index(index) => Some(Some(*index)),
        BeginSearch::Keyword { keyword, startfrom } => {
            let start = if *startfrom > 0 {
                *startfrom
            } else {
                argc + startfrom
            };
            let end = if *startfrom > 0 { argc - 1 } else { 1 };
            let mut at = start;
            while at != end {
                if at >= argc || at < 1 {
                    break;
                }
                if argv[at as usize].eq_ignore_ascii_case(keyword.as_bytes()) {
                    return Some(Some(at + 1));
                }
                at += if start <= end { 1 } else { -1 };
            }
            Some(None)
        }
        BeginSearch::Unknown => None,
    }
}

/// (first, last, step) of a spec's keys from where they start; None for an unknown or unparsable spec.
fn find_keys(find: &FindKeys, first: i64, argv: &[&[u8]]) -> Option<(i64, i64, i64)> {
    let argc = argv.len() as i64;
    match *find {
        FindKeys::Range {
            lastkey,
            keystep,
            limit,
        } => {
            let last = if lastkey >= 0 {
                first + lastkey
            } else if limit == 0 {
                argc + lastkey
            } else {
                first + ((argc - first) / limit + lastkey)
            };
            Some((first, last, keystep))
        }
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            keystep,
        } => {
            if keynumidx >= argc {
                return None;
            }
            let count_at = usize::try_from(first + keynumidx).ok()?;
            let count = fallow_proto::resp::parse_i64(argv.get(count_at)?)?;
            if count < 0 {
                return None;
            }
            let first = first + firstkey;
            // Redis adds `(int)numkeys`: a count beyond 32 bits wraps the same way here.
            Some((first, first + count as i32 as i64 - 1, keystep))
        }
        FindKeys::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::key_flags::*;
    use super::*;

    fn spec(begin_search: BeginSearch, find_keys: FindKeys, flags: u32) -> KeySpec {
        KeySpec {
            notes: None,
            flags,
            begin_search,
            find_keys,
        }
    }

    fn args(text: &'static str) -> Vec<&'static [u8]> {
        text.split(' ').map(str::as_bytes).collect()
    }

    fn positions(specs: &[KeySpec], arity: i64, text: &'static str) -> Option<Vec<usize>> {
        keys_from_specs(specs, arity, &args(text)).map(|keys| keys.iter().map(|k| k.0).collect())
    }

    #[test]
    fn keyword_search_runs_forwards_or_backwards_from_startfrom() {
        let range = FindKeys::Range {
            lastkey: 0,
            keystep: 1,
            limit: 0,
        };
        let forwards = BeginSearch::Keyword {
            keyword: "STORE".into(),
            startfrom: 2,
        };
        let specs = [spec(forwards, range.clone(), OW | UPDATE)];
        assert_eq!(
            positions(&specs, -2, "c x store a store b"),
            Some(vec![3]),
            "the first"
        );
        assert_eq!(
            positions(&specs, -2, "c store a"),
            Some(vec![]),
            "before startfrom"
        );
        let backwards = BeginSearch::Keyword {
            keyword: "STORE".into(),
            startfrom: -1,
        };
        let specs = [spec(backwards, range, OW | UPDATE)];
        assert_eq!(positions(&specs, -2, "c x store a store b"), Some(vec![5]));
    }

    #[test]
    fn range_limit_takes_a_share_of_the_rest() {
        // XREAD's STREAMS spec: half of what follows the keyword are keys.
        let streams = spec(
            BeginSearch::Keyword {
                keyword: "STREAMS".into(),
                startfrom: 1,
            },
            FindKeys::Range {
                lastkey: -1,
                keystep: 1,
                limit: 2,
            },
            RO | ACCESS,
        );
        let specs = [streams];
        assert_eq!(
            positions(&specs, -4, "xread streams a b c 0 0 0"),
            Some(vec![2, 3, 4])
        );
    }

    #[test]
    fn keynum_refuses_bad_counts_and_wraps_like_a_c_int() {
        let numkeys = spec(
            BeginSearch::Index(2),
            FindKeys::Keynum {
                keynumidx: 0,
                firstkey: 1,
                keystep: 1,
            },
            RO | ACCESS,
        );
        let specs = [numkeys];
        assert_eq!(positions(&specs, -3, "eval s 2 a b x"), Some(vec![3, 4]));
        assert_eq!(
            positions(&specs, -3, "eval s 02 a b"),
            None,
            "not canonical"
        );
        assert_eq!(positions(&specs, -3, "eval s -1 a"), None);
        assert_eq!(positions(&specs, -3, "eval s 3 a b"), None, "past the end");
        // (int)4294967297 == 1 in Redis.
        assert_eq!(positions(&specs, -3, "eval s 4294967297 a"), Some(vec![3]));
    }

    #[test]
    fn incomplete_and_unknown_specs_defer_to_the_proc() {
        let incomplete = spec(
            BeginSearch::Index(1),
            FindKeys::Range {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
            RO | INCOMPLETE,
        );
        assert_eq!(positions(&[incomplete], -2, "c a"), None);
        let unknown = spec(BeginSearch::Unknown, FindKeys::Unknown, RW);
        assert_eq!(positions(&[unknown], -2, "c a"), None);
        let not_key = spec(BeginSearch::Index(1), FindKeys::Unknown, NOT_KEY);
        assert_eq!(
            positions(std::slice::from_ref(&not_key), -2, "c a"),
            Some(vec![])
        );
        let model = KeyModel {
            arity: -2,
            specs: Cow::Owned(vec![not_key]),
            proc: None,
            no_mandatory_keys: false,
        };
        assert_eq!(
            model.get_keys(&args("c a")),
            Err(GetKeysError::NoKeyArguments)
        );
    }

    #[test]
    fn glibc_atoi() {
        assert_eq!(atoi(b" 12abc"), 12);
        assert_eq!(atoi(b"-3"), -3);
        assert_eq!(atoi(b"x"), 0);
        assert_eq!(atoi(b"99999999999999999999"), -1, "LONG_MAX as an int");
    }

    #[test]
    fn bad_spec_data_is_refused() {
        let parse = |text: &str| serde_json::from_str::<KeySpec>(text).map(|_| ());
        let ok = r#"{"flags":["RO"],"begin_search":{"type":"index","spec":{"index":1}},
            "find_keys":{"type":"range","spec":{"lastkey":0,"keystep":1,"limit":0}}}"#;
        assert!(parse(ok).is_ok());
        for bad in [
            ok.replace("\"RO\"", "\"XX\""),
            ok.replace("\"index\",", "\"nosuch\","),
            ok.replace("\"keystep\":1", "\"keystep\":0"),
            ok.replace("{\"index\":1}", "{}"),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }
}
