//! Mirrors Redis 7.0.15 `src/rdb.c` rdbSaveObjectType / rdbSaveObject (what
//! DUMP writes for strings, lists, sets, sorted sets and hashes) and
//! rdbLoadObject (what RESTORE reads, including the older encodings), with
//! the encoding choices of `src/t_hash.c`, `src/t_set.c`, `src/t_zset.c`.
//!
//! Type byte and body per value kind:
//!   String  0   RDB string (integer / LZF / raw, see encoding.rs)
//!   List    18  QUICKLIST_2 body (see quicklist.rs)
//!   Set     11  intset blob as an RDB string: every member a canonical i64
//!               and count <= set-max-intset-entries
//!           2   <count> <member string>*                  otherwise
//!   Zset    17  listpack [member, score]* sorted by (score, member) as an
//!               RDB string: count <= zset-max-listpack-entries and every
//!               member <= zset-max-listpack-value bytes; a score that is an
//!               integer within +-2^62 is a listpack integer, any other is
//!               its "%.17g" / "inf" / "-inf" text (zzlInsertAt)
//!           5   <count> (<member string> <score f64 LE>)* from the highest
//!               (score, member) to the lowest               otherwise
//!   Hash    16  listpack [field, value]* in the given order as an RDB
//!               string: count <= hash-max-listpack-entries and every field
//!               and value <= hash-max-listpack-value bytes
//!           4   <count> (<field string> <value string>)*   otherwise
//! Also read: 1 LIST, 3 ZSET (text scores), 9 HASH_ZIPMAP, 10 LIST_ZIPLIST,
//! 12 ZSET_ZIPLIST, 13 HASH_ZIPLIST, 14 LIST_QUICKLIST.
//!
//! Differences (see mod.rs for the full list): collections are expected to
//! hold distinct members (the encoder does not deduplicate, except that an
//! intset cannot hold duplicates); empty collections are written but Redis
//! refuses them, as does our decoder; decoding refuses duplicates and NaN
//! scores; streams and modules are `UnsupportedType`. Scores are written as
//! given, so a -0 stays -0 in a ZSET_2 body (Redis has 0 there whenever the
//! member was added while the zset was still a listpack).

use std::collections::HashSet;

use super::encoding::{self, Reader};
use super::{append_footer, verify_footer, DumpError, Pairs, DEFAULT_MAX_DECOMPRESSED_BYTES};
use super::{double, intset, listpack, quicklist, ziplist, zipmap};

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_MODULE: u8 = 6;
const TYPE_MODULE_2: u8 = 7;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_STREAM_LISTPACKS: u8 = 15;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_STREAM_LISTPACKS_2: u8 = 19;

/// Text-double markers of the old ZSET type (rdbLoadDoubleValue).
const TEXT_DOUBLE_NAN: u8 = 253;
const TEXT_DOUBLE_POS_INF: u8 = 254;
const TEXT_DOUBLE_NEG_INF: u8 = 255;

/// A Redis value as DUMP carries it, independent of encoding.
#[derive(Debug, Clone, PartialEq)]
pub enum RdbValue {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    SortedSet(Vec<(Vec<u8>, f64)>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

/// The redis.conf settings that decide encodings (defaults = Redis 7.0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodingLimits {
    pub hash_max_listpack_entries: usize,
    pub hash_max_listpack_value_bytes: usize,
    pub zset_max_listpack_entries: usize,
    pub zset_max_listpack_value_bytes: usize,
    pub set_max_intset_entries: usize,
    /// list-max-listpack-size: negative = size class (-2 = 8 KiB per node),
    /// positive = elements per node.
    pub list_max_listpack_size: i32,
    /// list-compress-depth: nodes left uncompressed at each end (0 = none).
    pub list_compress_depth_nodes: usize,
    /// rdbcompression.
    pub rdb_compression: bool,
    /// Quicklist `packed_threshold`: list elements this long get a PLAIN
    /// node (1 GiB; only DEBUG QUICKLIST-PACKED-THRESHOLD changes it).
    pub list_plain_threshold_bytes: usize,
}

impl EncodingLimits {
    /// Whether Redis keeps a hash of `len` such fields as a listpack.
    pub fn hash_fits_listpack<'a>(
        &self,
        len: usize,
        mut pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> bool {
        let max_value = self.hash_max_listpack_value_bytes;
        len <= self.hash_max_listpack_entries
            && pairs.all(|(field, value)| field.len() <= max_value && value.len() <= max_value)
    }

    /// Whether Redis keeps a sorted set of `len` such members as a listpack.
    pub fn zset_fits_listpack<'a>(
        &self,
        len: usize,
        mut members: impl Iterator<Item = &'a [u8]>,
    ) -> bool {
        len <= self.zset_max_listpack_entries
            && members.all(|member| member.len() <= self.zset_max_listpack_value_bytes)
    }

    /// Whether Redis keeps a set of `len` such members as an intset.
    pub fn set_fits_intset<'a>(
        &self,
        len: usize,
        mut members: impl Iterator<Item = &'a [u8]>,
    ) -> bool {
        len != 0
            && len <= self.set_max_intset_entries
            && members.all(|member| crate::parse_i64_strict(member).is_some())
    }
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits {
            hash_max_listpack_entries: 128,
            hash_max_listpack_value_bytes: 64,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value_bytes: 64,
            set_max_intset_entries: 512,
            list_max_listpack_size: -2,
            list_compress_depth_nodes: 0,
            rdb_compression: true,
            list_plain_threshold_bytes: 1 << 30,
        }
    }
}

/// The DUMP payload Redis 7.0.15 would produce for `value`.
pub fn encode_dump(value: &RdbValue, limits: &EncodingLimits) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        RdbValue::String(bytes) => {
            out.push(TYPE_STRING);
            encoding::write_string(&mut out, bytes, limits.rdb_compression);
        }
        RdbValue::List(elements) => {
            out.push(TYPE_LIST_QUICKLIST_2);
            quicklist::write_body(&mut out, elements, limits);
        }
        RdbValue::Set(members) => write_set(&mut out, members, limits),
        RdbValue::SortedSet(pairs) => write_zset(&mut out, pairs, limits),
        RdbValue::Hash(pairs) => write_hash(&mut out, pairs, limits),
    }
    append_footer(&mut out);
    out
}

fn write_set(out: &mut Vec<u8>, members: &[Vec<u8>], limits: &EncodingLimits) {
    let as_slices = || members.iter().map(Vec::as_slice);
    if limits.set_fits_intset(members.len(), as_slices()) {
        let ints: Vec<i64> = as_slices()
            .map(|member| crate::parse_i64_strict(member).expect("an intset member"))
            .collect();
        out.push(TYPE_SET_INTSET);
        encoding::write_string(out, &intset::encode(&ints), limits.rdb_compression);
    } else {
        out.push(TYPE_SET);
        encoding::write_len(out, members.len() as u64);
        for member in members {
            encoding::write_string(out, member, limits.rdb_compression);
        }
    }
}

/// Skiplist / listpack order: score ascending, then member bytes.
fn zset_order(a: &(Vec<u8>, f64), b: &(Vec<u8>, f64)) -> std::cmp::Ordering {
    a.1.partial_cmp(&b.1)
        .unwrap_or(std::cmp::Ordering::Equal)
        .then_with(|| a.0.cmp(&b.0))
}

fn write_zset(out: &mut Vec<u8>, pairs: &[(Vec<u8>, f64)], limits: &EncodingLimits) {
    let mut sorted: Vec<&(Vec<u8>, f64)> = pairs.iter().collect();
    sorted.sort_by(|a, b| zset_order(a, b));
    let fits_listpack = limits.zset_fits_listpack(
        pairs.len(),
        pairs.iter().map(|(member, _)| member.as_slice()),
    );
    if fits_listpack {
        let mut builder = listpack::Builder::new();
        for (member, score) in sorted {
            builder.append(member);
            match double::exact_i64(*score) {
                Some(int) => builder.append_int(int),
                None => builder.append(double::score_text(*score).as_bytes()),
            }
        }
        out.push(TYPE_ZSET_LISTPACK);
        encoding::write_string(out, &builder.finish(), limits.rdb_compression);
    } else {
        out.push(TYPE_ZSET_2);
        encoding::write_len(out, pairs.len() as u64);
        for (member, score) in sorted.into_iter().rev() {
            encoding::write_string(out, member, limits.rdb_compression);
            out.extend_from_slice(&score.to_le_bytes());
        }
    }
}

fn write_hash(out: &mut Vec<u8>, pairs: &[(Vec<u8>, Vec<u8>)], limits: &EncodingLimits) {
    let fits_listpack = limits.hash_fits_listpack(
        pairs.len(),
        pairs
            .iter()
            .map(|(field, value)| (field.as_slice(), value.as_slice())),
    );
    if fits_listpack {
        let mut builder = listpack::Builder::new();
        for (field, value) in pairs {
            builder.append(field);
            builder.append(value);
        }
        out.push(TYPE_HASH_LISTPACK);
        encoding::write_string(out, &builder.finish(), limits.rdb_compression);
    } else {
        out.push(TYPE_HASH);
        encoding::write_len(out, pairs.len() as u64);
        for (field, value) in pairs {
            encoding::write_string(out, field, limits.rdb_compression);
            encoding::write_string(out, value, limits.rdb_compression);
        }
    }
}

/// RESTORE's reading of a payload, with the default decompression cap.
pub fn decode_dump(payload: &[u8]) -> Result<RdbValue, DumpError> {
    decode_dump_with_limit(payload, DEFAULT_MAX_DECOMPRESSED_BYTES)
}

/// RESTORE's reading of a payload; LZF strings may expand to at most
/// `max_decompressed_bytes` in total.
pub fn decode_dump_with_limit(
    payload: &[u8],
    max_decompressed_bytes: usize,
) -> Result<RdbValue, DumpError> {
    let body = verify_footer(payload)?;
    let mut reader = Reader::new(body, max_decompressed_bytes);
    let kind = reader.byte()?;
    let value = read_value(kind, &mut reader)?;
    if !reader.is_empty() {
        return Err(DumpError::BadFormat("trailing bytes after value"));
    }
    Ok(value)
}

fn read_value(kind: u8, reader: &mut Reader<'_>) -> Result<RdbValue, DumpError> {
    match kind {
        TYPE_STRING => Ok(RdbValue::String(reader.string()?)),
        TYPE_LIST => Ok(RdbValue::List(non_empty(read_strings(reader)?)?)),
        TYPE_LIST_QUICKLIST => Ok(RdbValue::List(quicklist::read_body(reader, false)?)),
        TYPE_LIST_QUICKLIST_2 => Ok(RdbValue::List(quicklist::read_body(reader, true)?)),
        TYPE_LIST_ZIPLIST => Ok(RdbValue::List(non_empty(ziplist::parse(
            &reader.string()?,
        )?)?)),
        TYPE_SET => set_value(read_strings(reader)?),
        TYPE_SET_INTSET => {
            let ints = intset::decode(&reader.string()?)?;
            set_value(ints.iter().map(|v| v.to_string().into_bytes()).collect())
        }
        TYPE_ZSET | TYPE_ZSET_2 => zset_value(read_zset_pairs(reader, kind == TYPE_ZSET_2)?),
        TYPE_ZSET_ZIPLIST => zset_value(text_score_pairs(ziplist::parse(&reader.string()?)?)?),
        TYPE_ZSET_LISTPACK => zset_value(listpack_score_pairs(&reader.string()?)?),
        TYPE_HASH => hash_value(read_hash_pairs(reader)?),
        TYPE_HASH_ZIPMAP => hash_value(zipmap::parse(&reader.string()?)?),
        TYPE_HASH_ZIPLIST => hash_value(pairs_of(ziplist::parse(&reader.string()?)?)?),
        TYPE_HASH_LISTPACK => {
            let entries = listpack::parse_owned(&reader.string()?)?;
            hash_value(pairs_of(entries)?)
        }
        TYPE_MODULE | TYPE_MODULE_2 | TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 => {
            Err(DumpError::UnsupportedType(kind))
        }
        _ => Err(DumpError::BadFormat("unknown object type")),
    }
}

fn non_empty<T>(items: Vec<T>) -> Result<Vec<T>, DumpError> {
    if items.is_empty() {
        return Err(DumpError::BadFormat("empty collection"));
    }
    Ok(items)
}

fn read_strings(reader: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DumpError> {
    let count = reader.count(1)?;
    (0..count).map(|_| reader.string()).collect()
}

fn read_hash_pairs(reader: &mut Reader<'_>) -> Result<Pairs, DumpError> {
    let count = reader.count(2)?;
    (0..count)
        .map(|_| Ok((reader.string()?, reader.string()?)))
        .collect()
}

fn read_zset_pairs(
    reader: &mut Reader<'_>,
    binary: bool,
) -> Result<Vec<(Vec<u8>, f64)>, DumpError> {
    let count = reader.count(if binary { 9 } else { 2 })?;
    (0..count)
        .map(|_| {
            let member = reader.string()?;
            let score = if binary {
                f64::from_le_bytes(reader.array()?)
            } else {
                read_text_double(reader)?
            };
            Ok((member, score))
        })
        .collect()
}

/// rdbLoadDoubleValue: u8 length (or NaN/inf markers) + text.
fn read_text_double(reader: &mut Reader<'_>) -> Result<f64, DumpError> {
    match reader.byte()? {
        TEXT_DOUBLE_NAN => Ok(f64::NAN),
        TEXT_DOUBLE_POS_INF => Ok(f64::INFINITY),
        TEXT_DOUBLE_NEG_INF => Ok(f64::NEG_INFINITY),
        len => {
            let text = reader.take(usize::from(len))?;
            double::parse_score(text).ok_or(DumpError::BadFormat("bad double value"))
        }
    }
}

fn pairs_of(flat: Vec<Vec<u8>>) -> Result<Pairs, DumpError> {
    if !flat.len().is_multiple_of(2) {
        return Err(DumpError::BadFormat("odd number of pair elements"));
    }
    let mut iter = flat.into_iter();
    let mut pairs = Vec::with_capacity(iter.len() / 2);
    while let (Some(first), Some(second)) = (iter.next(), iter.next()) {
        pairs.push((first, second));
    }
    Ok(pairs)
}

fn text_score_pairs(flat: Vec<Vec<u8>>) -> Result<Vec<(Vec<u8>, f64)>, DumpError> {
    pairs_of(flat)?
        .into_iter()
        .map(|(member, text)| {
            let score = double::parse_score(&text).ok_or(DumpError::BadFormat("bad zset score"))?;
            Ok((member, score))
        })
        .collect()
}

fn listpack_score_pairs(blob: &[u8]) -> Result<Vec<(Vec<u8>, f64)>, DumpError> {
    let entries = listpack::parse(blob)?;
    if entries.len() % 2 != 0 {
        return Err(DumpError::BadFormat("odd number of pair elements"));
    }
    entries
        .chunks_exact(2)
        .map(|pair| {
            let score = match pair[1] {
                listpack::Entry::Int(int) => int as f64,
                listpack::Entry::Bytes(text) => {
                    double::parse_score(text).ok_or(DumpError::BadFormat("bad zset score"))?
                }
            };
            Ok((pair[0].to_bytes(), score))
        })
        .collect()
}

fn set_value(members: Vec<Vec<u8>>) -> Result<RdbValue, DumpError> {
    ensure_distinct(members.iter().map(Vec::as_slice))?;
    Ok(RdbValue::Set(non_empty(members)?))
}

fn zset_value(pairs: Vec<(Vec<u8>, f64)>) -> Result<RdbValue, DumpError> {
    if pairs.iter().any(|(_, score)| score.is_nan()) {
        return Err(DumpError::BadFormat("zset with NaN score"));
    }
    ensure_distinct(pairs.iter().map(|(member, _)| member.as_slice()))?;
    Ok(RdbValue::SortedSet(non_empty(pairs)?))
}

fn hash_value(pairs: Pairs) -> Result<RdbValue, DumpError> {
    ensure_distinct(pairs.iter().map(|(field, _)| field.as_slice()))?;
    Ok(RdbValue::Hash(non_empty(pairs)?))
}

fn ensure_distinct<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Result<(), DumpError> {
    let mut seen = HashSet::new();
    for key in keys {
        if !seen.insert(key) {
            return Err(DumpError::BadFormat("duplicate members"));
        }
    }
    Ok(())
}
