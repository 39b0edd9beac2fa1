//! Reader for `tests/fixtures/dump_cases.txt` (written by
//! `tools/gen_fixtures.py`; the format is described there), shared by the
//! fixture tests and `examples/encode_fixtures.rs`.

#![allow(dead_code)]

use fallow_store::rdb::{EncodingLimits, RdbValue};

pub const CASES_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/rdb/fixtures/dump_cases.txt"
);
pub const RESTORE_CHECKS_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/rdb/fixtures/restore_checks.txt"
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Exact,
    Decode,
    Legacy,
}

#[derive(Debug, Clone)]
pub enum Subject {
    Value(RdbValue),
    Functions(Vec<Vec<u8>>),
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub mode: Mode,
    pub limits: EncodingLimits,
    pub subject: Subject,
    pub payload: Vec<u8>,
}

pub fn unhex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn apply_config(limits: &mut EncodingLimits, name: &str, value: &str) {
    let number = || value.parse::<usize>().expect("numeric config");
    match name {
        "hash-max-listpack-entries" => limits.hash_max_listpack_entries = number(),
        "hash-max-listpack-value" => limits.hash_max_listpack_value_bytes = number(),
        "zset-max-listpack-entries" => limits.zset_max_listpack_entries = number(),
        "zset-max-listpack-value" => limits.zset_max_listpack_value_bytes = number(),
        "set-max-intset-entries" => limits.set_max_intset_entries = number(),
        "list-max-listpack-size" => limits.list_max_listpack_size = value.parse().expect("fill"),
        "list-compress-depth" => limits.list_compress_depth_nodes = number(),
        "rdbcompression" => limits.rdb_compression = value == "yes",
        "debug-quicklist-packed-threshold" => limits.list_plain_threshold_bytes = number(),
        other => panic!("unknown config {other}"),
    }
}

#[derive(Default)]
struct Draft {
    name: String,
    mode: Option<Mode>,
    limits: EncodingLimits,
    kind: String,
    elements: Vec<Vec<u8>>,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    scored: Vec<(Vec<u8>, f64)>,
    payload: Vec<u8>,
}

impl Draft {
    fn finish(self) -> Case {
        let subject = match self.kind.as_str() {
            "string" => Subject::Value(RdbValue::String(self.elements.concat())),
            "list" => Subject::Value(RdbValue::List(self.elements)),
            "set" => Subject::Value(RdbValue::Set(self.elements)),
            "zset" => Subject::Value(RdbValue::SortedSet(self.scored)),
            "hash" => Subject::Value(RdbValue::Hash(self.pairs)),
            "function" => Subject::Functions(self.elements),
            other => panic!("unknown type {other}"),
        };
        Case {
            name: self.name,
            mode: self.mode.expect("mode line"),
            limits: self.limits,
            subject,
            payload: self.payload,
        }
    }
}

/// Loads the committed fixtures, or the file named by `RDB_CASES` (for
/// ad-hoc runs on `tools/gen_fixtures.py --stress N` output).
pub fn load_cases() -> Vec<Case> {
    let path = std::env::var("RDB_CASES").unwrap_or_else(|_| CASES_PATH.to_string());
    let text = std::fs::read_to_string(path).expect("read fixture cases");
    let mut cases = Vec::new();
    let mut draft: Option<Draft> = None;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut words = line.split(' ');
        let tag = words.next().unwrap();
        let mut next = || words.next().expect("field");
        if tag == "case" {
            draft = Some(Draft {
                name: next().to_string(),
                ..Draft::default()
            });
            continue;
        }
        let current = draft.as_mut().expect("line outside a case");
        match tag {
            "mode" => {
                current.mode = Some(match next() {
                    "exact" => Mode::Exact,
                    "decode" => Mode::Decode,
                    "legacy" => Mode::Legacy,
                    other => panic!("mode {other}"),
                })
            }
            "config" => {
                let (name, value) = (next(), next());
                apply_config(&mut current.limits, name, value);
            }
            "type" => current.kind = next().to_string(),
            "e" => current.elements.push(unhex(next())),
            "p" => current.pairs.push((unhex(next()), unhex(next()))),
            "z" => {
                let member = unhex(next());
                let bits = u64::from_str_radix(next(), 16).expect("score bits");
                current.scored.push((member, f64::from_bits(bits)));
            }
            "dump" => current.payload = unhex(next()),
            "end" => cases.push(draft.take().unwrap().finish()),
            other => panic!("unknown line tag {other}"),
        }
    }
    assert!(draft.is_none(), "unterminated case");
    cases
}

/// Order-insensitive form for comparing sets, hashes and sorted sets.
pub fn normalized(value: &RdbValue) -> RdbValue {
    match value {
        RdbValue::Set(members) => {
            let mut members = members.clone();
            members.sort();
            RdbValue::Set(members)
        }
        RdbValue::Hash(pairs) => {
            let mut pairs = pairs.clone();
            pairs.sort();
            RdbValue::Hash(pairs)
        }
        RdbValue::SortedSet(pairs) => {
            let mut pairs = pairs.clone();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            RdbValue::SortedSet(pairs)
        }
        other => other.clone(),
    }
}
