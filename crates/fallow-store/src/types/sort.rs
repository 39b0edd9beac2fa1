//! SORT and SORT_RO (Redis 7.0's sort.c): option parsing, loading the elements of a list, set or sorted set,
//! weighing them (by themselves or by the values BY's pattern names), ordering them with Redis's sorts
//! (`redis_sort`, so equal weights come out in Redis's order) and the LIMIT window. Reading the keys that
//! BY and GET patterns name is the caller's: it passes a reader, and `lookup_of` says what a pattern names
//! for an element.
//!
//! Redis's rules kept here: a BY pattern without `*` (`BY nosort`) skips sorting, and a list or sorted set
//! then keeps its own order (reversed by DESC) with LIMIT taken from it directly; a set is sorted ALPHA
//! instead when the result is stored or the command runs in a script, so the result is deterministic. A
//! numeric weight is parsed as C's strtod parses it (leading blanks, the string up to a NUL, an empty
//! string is 0), and one that does not parse fails the command. Equal numeric weights order by the
//! elements' bytes; ALPHA compares bytes (strcmp up to a NUL, as strcoll does in the C locale, or the
//! whole bytes when storing).
use super::list::ListValue;
use super::redis_sort::{merge_sort, partial_quicksort};
use super::set::SetValue;
use super::zset::ZSetValue;
use std::borrow::Cow;
use std::cmp::Ordering;

/// A numeric weight that does not parse: the whole command fails with this reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnparsedWeight;

impl UnparsedWeight {
    pub fn message(self) -> &'static str {
        "ERR One or more scores can't be converted into double"
    }
}

/// Why SORT's options were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionError {
    Syntax,
    NotInteger,
    /// BY with a real pattern, for a user who may not read every key.
    ByDenied,
    /// GET, for a user who may not read every key.
    GetDenied,
}

impl OptionError {
    /// The reply, as Redis words it.
    pub fn message(self) -> &'static str {
        match self {
            OptionError::Syntax => "ERR syntax error",
            OptionError::NotInteger => "ERR value is not an integer or out of range",
            OptionError::ByDenied => {
                "ERR BY option of SORT denied due to insufficient ACL permissions."
            }
            OptionError::GetDenied => {
                "ERR GET option of SORT denied due to insufficient ACL permissions."
            }
        }
    }
}

/// SORT's options.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SortOptions<'a> {
    pub desc: bool,
    pub alpha: bool,
    /// LIMIT offset count.
    pub limit: Option<(i64, i64)>,
    /// STORE's destination and its position among the options.
    pub store: Option<(&'a [u8], usize)>,
    /// The last BY pattern.
    pub by: Option<&'a [u8]>,
    /// Some BY pattern had no `*`: nothing is sorted (Redis keeps this even when a later BY has one).
    pub dont_sort: bool,
    /// GET patterns, in order.
    pub gets: Vec<&'a [u8]>,
}

/// The bytes C string functions see: up to the first NUL.
fn c_string(bytes: &[u8]) -> &[u8] {
    bytes.split(|&byte| byte == 0).next().unwrap_or_default()
}

/// Whether a pattern substitutes the element (holds `*`, as strchr finds it).
pub fn has_star(pattern: &[u8]) -> bool {
    c_string(pattern).contains(&b'*')
}

fn is(arg: &[u8], option: &str) -> bool {
    arg.eq_ignore_ascii_case(option.as_bytes())
}

/// Parses the options after SORT's key, as Redis does, stopping at the first error. `read_only`: SORT_RO,
/// which has no STORE. `patterns_allowed`: the user may read every key (Redis refuses BY with a `*` and
/// GET otherwise, at the option).
pub fn parse<'a>(
    options: &[&'a [u8]],
    read_only: bool,
    patterns_allowed: bool,
) -> Result<SortOptions<'a>, OptionError> {
    let mut parsed = SortOptions::default();
    let mut index = 0;
    while index < options.len() {
        let option = options[index];
        let left = options.len() - index - 1;
        if is(option, "asc") {
            parsed.desc = false;
        } else if is(option, "desc") {
            parsed.desc = true;
        } else if is(option, "alpha") {
            parsed.alpha = true;
        } else if is(option, "limit") && left >= 2 {
            let parse = |arg: &[u8]| crate::parse_i64_strict(arg).ok_or(OptionError::NotInteger);
            let offset = parse(options[index + 1])?;
            let count = parse(options[index + 2])?;
            parsed.limit = Some((offset, count));
            index += 2;
        } else if !read_only && is(option, "store") && left >= 1 {
            parsed.store = Some((options[index + 1], index + 1));
            index += 1;
        } else if is(option, "by") && left >= 1 {
            let pattern = options[index + 1];
            if !has_star(pattern) {
                parsed.dont_sort = true;
            } else if !patterns_allowed {
                return Err(OptionError::ByDenied);
            }
            parsed.by = Some(pattern);
            index += 1;
        } else if is(option, "get") && left >= 1 {
            if !patterns_allowed {
                return Err(OptionError::GetDenied);
            }
            parsed.gets.push(options[index + 1]);
            index += 1;
        } else {
            return Err(OptionError::Syntax);
        }
        index += 1;
    }
    Ok(parsed)
}

impl SortOptions<'_> {
    /// Whether the command reads keys its arguments do not name: BY with a `*` (unless nothing is sorted)
    /// or GET with one.
    pub fn reads_other_keys(&self) -> bool {
        let sorts_by_pattern = !self.dont_sort && self.by.is_some_and(has_star);
        sorts_by_pattern || self.gets.iter().any(|pattern| has_star(pattern))
    }
}

// ----- patterns ---------------------------------------------------------------------------------------

/// What a BY or GET pattern names for one element (Redis's lookupKeyByPattern).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup<'p> {
    /// `#`: the element itself.
    Element,
    /// The string value at a key.
    Key(Vec<u8>),
    /// A field of the hash at a key (`pattern->field`).
    HashField { key: Vec<u8>, field: &'p [u8] },
    /// No `*`: nothing (a fixed key is not looked up).
    Nothing,
}

/// The first `*` of the pattern becomes the element; a `->field` after it (non-empty) names a hash field.
pub fn lookup_of<'p>(pattern: &'p [u8], element: &[u8]) -> Lookup<'p> {
    let c_pattern = c_string(pattern);
    if c_pattern == b"#" {
        return Lookup::Element;
    }
    let Some(star) = c_pattern.iter().position(|&byte| byte == b'*') else {
        return Lookup::Nothing;
    };
    let after_star = &c_pattern[star + 1..];
    let arrow = after_star
        .windows(2)
        .position(|pair| pair == b"->")
        .map(|at| star + 1 + at)
        .filter(|&at| at + 2 < c_pattern.len());
    let key_end = arrow.unwrap_or(pattern.len());
    let mut key = Vec::with_capacity(key_end - 1 + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&pattern[star + 1..key_end]);
    match arrow {
        Some(arrow) => Lookup::HashField {
            key,
            field: &pattern[arrow + 2..],
        },
        None => Lookup::Key(key),
    }
}

/// What a pattern gives for an element: the element, or what `read` finds (a string value, or a hash
/// field's value: `read(key, Some(field))`); None when there is none.
pub fn resolve<'e>(
    pattern: &[u8],
    element: &'e [u8],
    read: &mut impl FnMut(&[u8], Option<&[u8]>) -> Option<Vec<u8>>,
) -> Option<Cow<'e, [u8]>> {
    match lookup_of(pattern, element) {
        Lookup::Element => Some(Cow::Borrowed(element)),
        Lookup::Key(key) => read(&key, None).map(Cow::Owned),
        Lookup::HashField { key, field } => read(&key, Some(field)).map(Cow::Owned),
        Lookup::Nothing => None,
    }
}

// ----- numeric weights --------------------------------------------------------------------------------

/// A weight as SORT's strtod call reads it: the string up to a NUL, leading blanks skipped; the rest must
/// be a decimal number or an infinity, neither NaN nor out of range (overflow, underflow). An empty string
/// is 0 (strtod converts nothing and stops at its end). Hexadecimal floats (`0x1.8p3`) are read too.
pub fn weight_of(bytes: &[u8]) -> Option<f64> {
    let text = c_string(bytes);
    if text.is_empty() {
        return Some(0.0);
    }
    let unblanked = text.trim_ascii_start();
    let (negative, unsigned) = match unblanked.first() {
        Some(b'-') => (true, &unblanked[1..]),
        Some(b'+') => (false, &unblanked[1..]),
        _ => (false, unblanked),
    };
    if is(unsigned, "inf") || is(unsigned, "infinity") {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    let (value, significant) = match unsigned
        .strip_prefix(b"0x")
        .or_else(|| unsigned.strip_prefix(b"0X"))
    {
        Some(hex) => hex_float(hex)?,
        None => {
            let significant = decimal_significand(unsigned)?;
            let value: f64 = std::str::from_utf8(unsigned).ok()?.parse().ok()?;
            (value, significant)
        }
    };
    let value = if negative { -value } else { value };
    let out_of_range = value.is_infinite()
        || (value == 0.0 && significant)
        || (value != 0.0 && value.abs() < f64::MIN_POSITIVE);
    (!out_of_range).then_some(value)
}

/// A hexadecimal float after its `0x`: `hexdigits[.hexdigits][p[sign]digits]`, at least one digit. The value,
/// correctly rounded in the normal range (a subnormal one is refused by the caller, as strtod's underflow),
/// and whether a digit is not zero.
fn hex_float(text: &[u8]) -> Option<(f64, bool)> {
    let mantissa_end = text
        .iter()
        .position(|byte| !byte.is_ascii_hexdigit() && *byte != b'.')
        .unwrap_or(text.len());
    let (mantissa, exponent_text) = text.split_at(mantissa_end);
    let dot = mantissa.iter().position(|&byte| byte == b'.');
    let digits: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(|&byte| byte != b'.')
        .collect();
    if digits.is_empty() || mantissa.iter().filter(|&&byte| byte == b'.').count() > 1 {
        return None;
    }
    let mut exponent: i64 = 0;
    if !exponent_text.is_empty() {
        let rest = exponent_text
            .strip_prefix(b"p")
            .or_else(|| exponent_text.strip_prefix(b"P"))?;
        let (negative, rest) = match rest.first() {
            Some(b'-') => (true, &rest[1..]),
            Some(b'+') => (false, &rest[1..]),
            _ => (false, rest),
        };
        if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Past any double's range either way; saturating keeps huge exponents finite here.
        let magnitude = rest.iter().fold(0i64, |value, digit| {
            (value * 10 + i64::from(digit - b'0')).min(1 << 20)
        });
        exponent = if negative { -magnitude } else { magnitude };
    }
    let fraction_digits = dot.map_or(0, |dot| mantissa.len() - dot - 1) as i64;
    exponent -= 4 * fraction_digits;
    // Up to 15 digits (60 bits) exactly; later ones shift the exponent and only matter as a sticky bit
    // below the rounding position.
    let significant: Vec<u8> = digits.iter().copied().skip_while(|&d| d == b'0').collect();
    let mut bits: u64 = 0;
    let mut sticky = false;
    for (index, digit) in significant.iter().enumerate() {
        let value = (*digit as char).to_digit(16).expect("a hex digit") as u64;
        if index < 15 {
            bits = bits << 4 | value;
        } else {
            exponent += 4;
            sticky |= value != 0;
        }
    }
    if sticky {
        bits |= 1;
    }
    let half = (exponent / 2).clamp(-1000, 1000) as i32;
    let rest = (exponent - i64::from(half)).clamp(-2000, 2000) as i32;
    let value = bits as f64 * 2f64.powi(half) * 2f64.powi(rest);
    Some((value, bits != 0))
}

/// Checks `digits[.digits][e[sign]digits]` (at least one digit before the exponent) and tells whether a
/// digit of the significand is not zero; None when the text is not such a number.
fn decimal_significand(text: &[u8]) -> Option<bool> {
    let mantissa_end = text
        .iter()
        .position(|byte| !byte.is_ascii_digit() && *byte != b'.')
        .unwrap_or(text.len());
    let mantissa = &text[..mantissa_end];
    let dots = mantissa.iter().filter(|&&byte| byte == b'.').count();
    let digits = mantissa.len() - dots;
    if dots > 1 || digits == 0 {
        return None;
    }
    let exponent = &text[mantissa_end..];
    if !exponent.is_empty() {
        let rest = exponent
            .strip_prefix(b"e")
            .or_else(|| exponent.strip_prefix(b"E"))?;
        let rest = rest
            .strip_prefix(b"-")
            .or_else(|| rest.strip_prefix(b"+"))
            .unwrap_or(rest);
        if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
            return None;
        }
    }
    Some(mantissa.iter().any(|byte| (b'1'..=b'9').contains(byte)))
}

// ----- loading, weighing, ordering --------------------------------------------------------------------

/// The value SORT reads.
#[derive(Clone, Copy)]
pub enum Source<'v> {
    List(&'v ListValue),
    Set(&'v SetValue),
    ZSet(&'v ZSetValue),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::List(list) => list.len(),
            Source::Set(set) => set.len(),
            Source::ZSet(zset) => zset.len(),
        }
    }
}

/// One element and its weight.
#[derive(Clone, Debug)]
struct Item {
    element: Box<[u8]>,
    score: f64,
    /// ALPHA BY: the value the pattern named (None when there was none).
    by_value: Option<Vec<u8>>,
}

/// A SORT under way: the elements loaded, how they are ordered, and the window to return.
#[derive(Debug)]
pub struct Sorting<'a> {
    items: Vec<Item>,
    /// The window, inclusive; empty when end < start.
    start: i64,
    end: i64,
    dont_sort: bool,
    alpha: bool,
    desc: bool,
    storing: bool,
    by: Option<&'a [u8]>,
}

impl<'a> SortOptions<'a> {
    /// Loads the elements of the value at the key (None: missing, sorted as an empty list). `in_script`:
    /// the command runs in a script (a set with nothing to sort by is then sorted).
    pub fn load(&self, source: Option<Source>, in_script: bool) -> Sorting<'a> {
        let len = source.map_or(0, |source| source.len()) as i64;
        let (offset, count) = self.limit.unwrap_or((0, -1));
        let mut start = offset.max(0).min(len);
        let count = count.max(-1).min(len);
        let mut end = if count < 0 {
            len - 1
        } else {
            start + count - 1
        };
        if start >= len {
            start = len - 1;
            end = len - 2;
        }
        end = end.min(len - 1);
        let mut sorting = Sorting {
            items: Vec::new(),
            start,
            end,
            dont_sort: self.dont_sort,
            alpha: self.alpha,
            desc: self.desc,
            storing: self.store.is_some(),
            by: self.by,
        };
        let is_set = matches!(source, Some(Source::Set(_)));
        if sorting.dont_sort && is_set && (sorting.storing || in_script) {
            sorting.dont_sort = false;
            sorting.alpha = true;
            sorting.by = None;
        }
        if let Some(source) = source {
            sorting.items = sorting.elements(source, len);
        }
        sorting
    }
}

impl Sorting<'_> {
    /// The elements to sort; a list or sorted set with nothing to sort yields just the window, in its own
    /// order (reversed by DESC), and the window then starts at 0.
    fn elements(&mut self, source: Source, len: i64) -> Vec<Item> {
        let item = |element: &[u8]| Item {
            element: element.into(),
            score: 0.0,
            by_value: None,
        };
        let window = (self.end - self.start + 1).max(0) as usize;
        let skip = self.start.max(0) as usize;
        let windowed = |sorting: &mut Sorting| {
            sorting.end -= sorting.start;
            sorting.start = 0;
        };
        match source {
            Source::List(list) if self.dont_sort => {
                if self.end < self.start {
                    return Vec::new();
                }
                let picked: Vec<Item> = if self.desc {
                    list.iter()
                        .rev()
                        .skip(skip)
                        .take(window)
                        .map(item)
                        .collect()
                } else {
                    list.iter().skip(skip).take(window).map(item).collect()
                };
                windowed(self);
                picked
            }
            Source::ZSet(zset) if self.dont_sort => {
                let take = if self.start != 0 || self.end != len - 1 {
                    window
                } else {
                    len as usize
                };
                let members = zset.iter().map(|(member, _)| member);
                let picked: Vec<Item> = if self.desc {
                    members.rev().skip(skip).take(take).map(item).collect()
                } else {
                    members.skip(skip).take(take).map(item).collect()
                };
                windowed(self);
                picked
            }
            Source::List(list) => list.iter().map(item).collect(),
            Source::Set(set) => set.iter().map(item).collect(),
            Source::ZSet(zset) => zset.iter().map(|(member, _)| item(member)).collect(),
        }
    }

    /// Weighs the elements (nothing to do when not sorting): by the values BY's pattern names (read
    /// through `read`, see `resolve`; an element whose value is missing weighs 0, or sorts first with
    /// ALPHA) or by themselves. Err when a numeric weight does not parse.
    pub fn weigh(
        &mut self,
        mut read: impl FnMut(&[u8], Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<(), UnparsedWeight> {
        if self.dont_sort {
            return Ok(());
        }
        let mut unparsed = false;
        for item in &mut self.items {
            let value = match self.by {
                Some(pattern) => match resolve(pattern, &item.element, &mut read) {
                    Some(value) => value.into_owned(),
                    None => continue,
                },
                None if self.alpha => continue,
                None => item.element.to_vec(),
            };
            if self.alpha {
                item.by_value = Some(value);
            } else {
                match weight_of(&value) {
                    Some(score) => item.score = score,
                    None => unparsed = true,
                }
            }
        }
        if unparsed {
            Err(UnparsedWeight)
        } else {
            Ok(())
        }
    }

    /// Orders the elements as Redis does: a partial quicksort of the window when sorting by a pattern with
    /// a LIMIT, else glibc's stable merge sort.
    pub fn sort(&mut self) {
        if self.dont_sort || self.end < self.start {
            return;
        }
        let (alpha, desc, storing, by_pattern) =
            (self.alpha, self.desc, self.storing, self.by.is_some());
        let compare = |a: &Item, b: &Item| {
            let order = compare_items(a, b, alpha, storing, by_pattern);
            if desc {
                order.reverse()
            } else {
                order
            }
        };
        let len = self.items.len() as i64;
        if by_pattern && (self.start != 0 || self.end != len - 1) {
            partial_quicksort(
                &mut self.items,
                compare,
                self.start as usize,
                self.end as usize,
            );
        } else {
            merge_sort(&mut self.items, compare);
        }
    }

    /// The elements in the window, in order.
    pub fn window(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        let range = if self.end < self.start {
            0..0
        } else {
            self.start as usize..self.end as usize + 1
        };
        self.items[range].iter().map(|item| &*item.element)
    }
}

/// Redis's sortCompare (before DESC): numeric weights, ties by the elements' bytes; ALPHA by pattern
/// values (a missing one first) or by the elements, strcmp-like unless storing.
fn compare_items(a: &Item, b: &Item, alpha: bool, storing: bool, by_pattern: bool) -> Ordering {
    let bytes = |x: &[u8], y: &[u8]| {
        if storing {
            x.cmp(y)
        } else {
            c_string(x).cmp(c_string(y))
        }
    };
    if !alpha {
        if a.score > b.score {
            Ordering::Greater
        } else if a.score < b.score {
            Ordering::Less
        } else {
            a.element.cmp(&b.element)
        }
    } else if by_pattern {
        match (&a.by_value, &b.by_value) {
            (Some(x), Some(y)) => bytes(x, y),
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
        }
    } else {
        bytes(&a.element, &b.element)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<&[u8]> {
        text.split(' ')
            .filter(|arg| !arg.is_empty())
            .map(str::as_bytes)
            .collect()
    }

    #[test]
    fn options_parse_like_redis() {
        let parsed = parse(
            &args("limit 1 2 desc alpha by w_* get # get o_*->f store d"),
            false,
            true,
        )
        .unwrap();
        assert_eq!(parsed.limit, Some((1, 2)));
        assert!(parsed.desc && parsed.alpha && !parsed.dont_sort);
        assert_eq!(parsed.store, Some((&b"d"[..], 12)));
        assert_eq!(parsed.gets, [&b"#"[..], b"o_*->f"]);
        assert!(parsed.reads_other_keys());
        assert_eq!(
            parse(&args("store d"), true, true),
            Err(OptionError::Syntax)
        );
        assert_eq!(
            parse(&args("limit 1"), false, true),
            Err(OptionError::Syntax)
        );
        assert_eq!(
            parse(&args("limit x 1"), false, true),
            Err(OptionError::NotInteger)
        );
        assert_eq!(
            parse(&args("by w_*"), false, false),
            Err(OptionError::ByDenied)
        );
        assert_eq!(
            parse(&args("get #"), false, false),
            Err(OptionError::GetDenied)
        );
        let nosort = parse(&args("by nosort by w_*"), false, false);
        assert_eq!(nosort, Err(OptionError::ByDenied));
        let nosort = parse(&args("by nosort"), false, false).unwrap();
        assert!(nosort.dont_sort && !nosort.reads_other_keys());
    }

    #[test]
    fn patterns_name_keys_and_fields() {
        assert_eq!(lookup_of(b"#", b"x"), Lookup::Element);
        assert_eq!(lookup_of(b"#\0tail", b"x"), Lookup::Element);
        assert_eq!(lookup_of(b"nosort", b"x"), Lookup::Nothing);
        assert_eq!(lookup_of(b"w_*", b"x"), Lookup::Key(b"w_x".to_vec()));
        assert_eq!(lookup_of(b"a*b*c", b"x"), Lookup::Key(b"axb*c".to_vec()));
        assert_eq!(
            lookup_of(b"h_*->f", b"x"),
            Lookup::HashField {
                key: b"h_x".to_vec(),
                field: b"f"
            }
        );
        // "->" with nothing after it is part of the key; one before the '*' is too.
        assert_eq!(lookup_of(b"h_*->", b"x"), Lookup::Key(b"h_x->".to_vec()));
        assert_eq!(lookup_of(b"a->b*", b"x"), Lookup::Key(b"a->bx".to_vec()));
    }

    #[test]
    fn weights_parse_like_strtod() {
        assert_eq!(weight_of(b"1.5"), Some(1.5));
        assert_eq!(weight_of(b"  -2e3"), Some(-2000.0));
        assert_eq!(weight_of(b""), Some(0.0));
        assert_eq!(weight_of(b"7\0junk"), Some(7.0));
        assert_eq!(weight_of(b"+inf"), Some(f64::INFINITY));
        assert_eq!(weight_of(b".5"), Some(0.5));
        assert_eq!(weight_of(b"5."), Some(5.0));
        assert_eq!(weight_of(b" 0x10"), Some(16.0));
        assert_eq!(weight_of(b"-0x1.8p1"), Some(-3.0));
        assert_eq!(weight_of(b"0X.8"), Some(0.5));
        assert_eq!(weight_of(b"0x1P-2"), Some(0.25));
        assert_eq!(
            weight_of(b"0x1234567890abcdef1"),
            Some(0x1234567890abcdef1u128 as f64)
        );
        for refused in [
            &b"nan"[..],
            b"1 ",
            b" ",
            b"abc",
            b"1e",
            b"1e400",
            b"1e-400",
            b"0x",
            b"0x1p",
            b"0xg",
            b"0x1p99999",
            b"--1",
        ] {
            assert_eq!(
                weight_of(refused),
                None,
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
        assert_eq!(weight_of(b"0e-400"), Some(0.0));
    }

    fn list_of(items: &[&str]) -> ListValue {
        let mut list = ListValue::default();
        for item in items {
            list.push_back(item.as_bytes());
        }
        list
    }

    fn run(options: &str, source: Source, in_script: bool) -> Vec<String> {
        let options = args(options);
        let parsed = parse(&options, false, true).unwrap();
        let mut sorting = parsed.load(Some(source), in_script);
        sorting.weigh(|_, _| None).unwrap();
        sorting.sort();
        sorting
            .window()
            .map(|element| String::from_utf8_lossy(element).into_owned())
            .collect()
    }

    #[test]
    fn numeric_alpha_and_limits() {
        let list = list_of(&["3", "10", "2", "10"]);
        assert_eq!(run("", Source::List(&list), false), ["2", "3", "10", "10"]);
        assert_eq!(
            run("desc limit 1 2", Source::List(&list), false),
            ["10", "3"]
        );
        assert_eq!(
            run("alpha", Source::List(&list), false),
            ["10", "10", "2", "3"]
        );
        assert_eq!(
            run("limit 5 1", Source::List(&list), false),
            Vec::<String>::new()
        );
        assert_eq!(
            run("limit -3 -7", Source::List(&list), false),
            ["2", "3", "10", "10"]
        );
        let bad = list_of(&["1", "x"]);
        let options = parse(&[], false, true).unwrap();
        let mut sorting = options.load(Some(Source::List(&bad)), false);
        assert_eq!(sorting.weigh(|_, _| None), Err(UnparsedWeight));
    }

    #[test]
    fn nothing_to_sort_keeps_the_value_order() {
        let list = list_of(&["c", "a", "b"]);
        assert_eq!(
            run("by nosort", Source::List(&list), false),
            ["c", "a", "b"]
        );
        assert_eq!(
            run("by nosort desc limit 1 5", Source::List(&list), false),
            ["a", "c"]
        );
        let mut zset = ZSetValue::default();
        zset.insert(b"z", 1.0);
        zset.insert(b"y", 2.0);
        zset.insert(b"x", 3.0);
        assert_eq!(
            run("by nosort", Source::ZSet(&zset), false),
            ["z", "y", "x"]
        );
        assert_eq!(
            run("by nosort desc limit 0 2", Source::ZSet(&zset), false),
            ["x", "y"]
        );
        let mut set = SetValue::default();
        for member in ["b", "c", "a"] {
            set.insert(member.as_bytes());
        }
        assert_eq!(run("by nosort", Source::Set(&set), false), ["b", "c", "a"]);
        assert_eq!(run("by nosort", Source::Set(&set), true), ["a", "b", "c"]);
        assert_eq!(
            run("by nosort store d desc", Source::Set(&set), false),
            ["c", "b", "a"]
        );
    }

    #[test]
    fn weights_by_pattern() {
        let list = list_of(&["a", "b", "c"]);
        let weights = |key: &[u8], field: Option<&[u8]>| -> Option<Vec<u8>> {
            assert!(field.is_none());
            match key {
                b"w_a" => Some(b"3".to_vec()),
                b"w_b" => Some(b"1".to_vec()),
                _ => None,
            }
        };
        let options = args("by w_*");
        let parsed = parse(&options, false, true).unwrap();
        let mut sorting = parsed.load(Some(Source::List(&list)), false);
        sorting.weigh(weights).unwrap();
        sorting.sort();
        let order: Vec<&[u8]> = sorting.window().collect();
        assert_eq!(order, [&b"c"[..], b"b", b"a"]);
    }
}
