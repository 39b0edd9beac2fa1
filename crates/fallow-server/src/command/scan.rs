//! What the SCAN family shares (SCAN, HSCAN, SSCAN, ZSCAN): cursor parsing, the MATCH/COUNT/TYPE options
//! with each command's allowed set, the positions one step visits, and the reply. Each command keeps only
//! what is its own: where its cursor points (shards for SCAN, positions or ranks in a collection). A leaf
//! beside the families: any of them may use it without depending on another family.
use super::{is, parse_int, NOT_INTEGER, SYNTAX};
use fallow_proto::ReplyWriter;
use fallow_store::{glob, Kind};
use std::ops::Range;

pub const INVALID_CURSOR: &str = "ERR invalid cursor";

/// How a command reads a cursor with a minus sign. Redis's strtoul wraps any negative number modulo 2^64;
/// the commands have grown apart on this edge and each keeps its reading, so their replies stay as they
/// were (choosing `Wrap` for all would make them one, as in Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegativeCursor {
    /// Wraps modulo 2^64, as strtoul does (HSCAN, SSCAN).
    Wrap,
    /// Wraps only within the i64 range: `-1` is 2^64 - 1, `-9223372036854775809` is invalid (SCAN).
    WrapI64,
    /// Invalid (ZSCAN).
    Refuse,
}

/// What one SCAN-family command accepts.
#[derive(Clone, Copy, Debug)]
pub struct ScanRules {
    /// Whether TYPE is an option (SCAN only; elsewhere it is a syntax error).
    pub type_option: bool,
    /// The largest COUNT honoured: a larger one is cut to it (it bounds the time a step holds locks).
    pub count_max: usize,
    pub negative_cursor: NegativeCursor,
}

/// The options of one SCAN-family call.
#[derive(Debug, PartialEq, Eq)]
pub struct ScanOptions<'a> {
    pub count: usize,
    /// None = everything (no MATCH, or MATCH *).
    pub pattern: Option<&'a [u8]>,
    /// SCAN's TYPE: Some(None) is a type no value has, which matches nothing.
    pub kind: Option<Option<Kind>>,
}

impl ScanOptions<'_> {
    /// Whether an element (a key, field or member) passes MATCH.
    pub fn matches(&self, text: &[u8]) -> bool {
        self.pattern
            .is_none_or(|pattern| glob::matches(pattern, text))
    }

    /// Whether a key of `kind` passes TYPE and MATCH.
    pub fn wants(&self, key: &[u8], kind: Kind) -> bool {
        self.kind.is_none_or(|wanted| wanted == Some(kind)) && self.matches(key)
    }
}

impl ScanRules {
    /// Parses a cursor as Redis's strtoul-based parsing does: an optional sign, then decimal digits,
    /// nothing else (no spaces); a minus sign as `negative_cursor` says.
    pub fn parse_cursor(&self, arg: &[u8]) -> Result<u64, &'static str> {
        parse_cursor(arg, self.negative_cursor).ok_or(INVALID_CURSOR)
    }

    /// Parses `[MATCH pattern] [COUNT count]` and, where allowed, `[TYPE type]` from `args` (what
    /// follows the cursor).
    pub fn parse_options<'a>(&self, args: &[&'a [u8]]) -> Result<ScanOptions<'a>, &'static str> {
        let mut options = ScanOptions {
            count: 10,
            pattern: None,
            kind: None,
        };
        let mut index = 0;
        while index < args.len() {
            let Some(&value) = args.get(index + 1) else {
                return Err(SYNTAX);
            };
            let option = args[index];
            if is(option, "count") {
                let count = parse_int(value).ok_or(NOT_INTEGER)?;
                if count < 1 {
                    return Err(SYNTAX);
                }
                options.count = usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .min(self.count_max);
            } else if is(option, "match") {
                // "*" matches everything; skipping it saves the per-element match, as Redis does.
                options.pattern = (value != b"*").then_some(value);
            } else if self.type_option && is(option, "type") {
                options.kind = Some(Kind::from_name(value));
            } else {
                return Err(SYNTAX);
            }
            index += 2;
        }
        Ok(options)
    }
}

/// See `ScanRules::parse_cursor`.
fn parse_cursor(arg: &[u8], negative_cursor: NegativeCursor) -> Option<u64> {
    let (negative, digits) = match arg.first() {
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if !negative {
        return Some(value);
    }
    match negative_cursor {
        NegativeCursor::Wrap => Some(value.wrapping_neg()),
        NegativeCursor::WrapI64 => (value <= i64::MIN.unsigned_abs()).then(|| value.wrapping_neg()),
        NegativeCursor::Refuse => None,
    }
}

/// The positions one HSCAN/SSCAN step visits in a collection of `len`, and the cursor that follows (0
/// when the collection is done). A scan walks down from the end: cursor c (0 = start) means positions
/// 0..c are still to visit. Removal swaps the last element into the hole and insertion appends, so the
/// unvisited positions only ever lose their own removed elements: every element present for the whole
/// scan is returned, as Redis guarantees (a moved, already visited one may come twice).
pub fn scan_window(cursor: u64, count: usize, len: usize) -> (u64, Range<usize>) {
    let end = match cursor {
        0 => len,
        cursor => usize::try_from(cursor).unwrap_or(usize::MAX).min(len),
    };
    let start = end.saturating_sub(count);
    (start as u64, start..end)
}

/// Collections up to this size are returned by ZSCAN in one call, as Redis does for listpack encodings.
pub const SINGLE_CALL_LEN_MAX: usize = 128;

/// The ranks one ZSCAN step visits in a sorted set of `len`, and the cursor that follows (0 when done):
/// the cursor is the first rank to visit; a small set comes back whole.
pub fn rank_window(cursor: u64, count: usize, len: usize) -> (u64, Range<usize>) {
    if len <= SINGLE_CALL_LEN_MAX {
        return (0, 0..len);
    }
    let start = usize::try_from(cursor).unwrap_or(usize::MAX);
    let end = start.saturating_add(count).min(len);
    let next = if end >= len { 0 } else { end };
    (next as u64, start.min(end)..end)
}

/// Writes the reply of a SCAN-family command: the next cursor, then the elements.
pub fn write_scan_reply<'a>(
    out: &mut ReplyWriter,
    next_cursor: u64,
    elements: impl ExactSizeIterator<Item = &'a [u8]>,
) {
    out.array_len(2);
    out.bulk(itoa::Buffer::new().format(next_cursor).as_bytes());
    out.bulks(elements);
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_store::types::HashValue;

    const COLLECTION: ScanRules = ScanRules {
        type_option: false,
        count_max: usize::MAX,
        negative_cursor: NegativeCursor::Wrap,
    };

    #[test]
    fn cursors_parse_like_strtoul() {
        let parse = |arg: &[u8]| COLLECTION.parse_cursor(arg).ok();
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"+12"), Some(12));
        assert_eq!(parse(b"-1"), Some(u64::MAX));
        assert_eq!(parse(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse(b"18446744073709551616"), None);
        assert_eq!(parse(b" 1"), None);
        assert_eq!(parse(b"1x"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(COLLECTION.parse_cursor(b"x"), Err(INVALID_CURSOR));
    }

    #[test]
    fn negative_cursors_follow_each_command() {
        let parse = |negative_cursor, arg: &[u8]| parse_cursor(arg, negative_cursor);
        // SCAN: an unsigned 64-bit number, negatives wrapping within the i64 range.
        assert_eq!(
            parse(NegativeCursor::WrapI64, b"18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(parse(NegativeCursor::WrapI64, b"-1"), Some(u64::MAX));
        assert_eq!(
            parse(NegativeCursor::WrapI64, b"-9223372036854775808"),
            Some(1 << 63)
        );
        assert_eq!(
            parse(NegativeCursor::WrapI64, b"-9223372036854775809"),
            None
        );
        assert_eq!(
            parse(NegativeCursor::WrapI64, b"18446744073709551616"),
            None
        );
        assert_eq!(parse(NegativeCursor::WrapI64, b"abc"), None);
        assert_eq!(
            parse(NegativeCursor::Wrap, b"-9223372036854775809"),
            Some((1 << 63) - 1)
        );
        // ZSCAN: no sign but '+'.
        assert_eq!(parse(NegativeCursor::Refuse, b"-1"), None);
        assert_eq!(parse(NegativeCursor::Refuse, b"-0"), None);
        assert_eq!(parse(NegativeCursor::Refuse, b"+7"), Some(7));
    }

    #[test]
    fn scan_options_parse_like_redis() {
        let options = COLLECTION
            .parse_options(&[b"MATCH", b"f*", b"count", b"5"])
            .unwrap();
        assert_eq!(options.count, 5);
        assert!(options.matches(b"foo") && !options.matches(b"bar"));
        assert!(COLLECTION
            .parse_options(&[b"match", b"*"])
            .unwrap()
            .pattern
            .is_none());
        assert_eq!(
            COLLECTION.parse_options(&[b"count", b"0"]).err(),
            Some(SYNTAX)
        );
        assert_eq!(
            COLLECTION.parse_options(&[b"count", b"x"]).err(),
            Some(NOT_INTEGER)
        );
        assert_eq!(COLLECTION.parse_options(&[b"match"]).err(), Some(SYNTAX));
        assert_eq!(
            COLLECTION.parse_options(&[b"type", b"string"]).err(),
            Some(SYNTAX)
        );
        assert_eq!(
            COLLECTION
                .parse_options(&[b"count", b"99999999999"])
                .unwrap()
                .count,
            99999999999
        );
    }

    #[test]
    fn scan_windows_walk_down_the_positions() {
        assert_eq!(scan_window(0, 10, 25), (15, 15..25));
        assert_eq!(scan_window(15, 10, 25), (5, 5..15));
        assert_eq!(scan_window(5, 10, 25), (0, 0..5));
        assert_eq!(scan_window(0, usize::MAX, 25), (0, 0..25));
        assert_eq!(scan_window(u64::MAX, 10, 25), (15, 15..25));
        // The collection shrank below the cursor: the rest is still visited.
        assert_eq!(scan_window(20, 10, 12), (2, 2..12));
    }

    #[test]
    fn rank_windows_walk_up_the_ranks() {
        assert_eq!(
            rank_window(7, 10, 100),
            (0, 0..100),
            "small sets come whole"
        );
        assert_eq!(rank_window(0, 30, 300), (30, 0..30));
        assert_eq!(rank_window(270, 30, 300), (0, 270..300));
        assert_eq!(rank_window(u64::MAX, 30, 300), (0, 300..300));
    }

    #[test]
    fn scans_survive_removals_and_insertions() {
        let mut hash = HashValue::default();
        for index in 0..100 {
            hash.insert(format!("f{index}").as_bytes(), b"v");
        }
        let (mut cursor, mut seen, mut step) = (0, Vec::new(), 0);
        loop {
            let (next, window) = scan_window(cursor, 7, hash.len());
            seen.extend(window.map(|index| hash.get_index(index).unwrap().0.to_vec()));
            // Between steps, remove visited and unvisited fields and add new ones.
            hash.remove(format!("f{}", step * 3).as_bytes());
            hash.remove(format!("f{}", 99 - step).as_bytes());
            hash.insert(format!("new{step}").as_bytes(), b"v");
            step += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        for (field, _) in hash.iter().filter(|(field, _)| field.starts_with(b"f")) {
            assert!(
                seen.iter().any(|seen| seen == field),
                "missed a field present throughout"
            );
        }
    }
}
