//! Mirrors Redis 7.0.15 `src/listpack.c`: building with lpAppend /
//! lpAppendInteger (lpEncodeGetType, lpEncodeIntegerGetType, lpEncodeString,
//! lpEncodeBacklen) and reading with lpValidateIntegrity(deep=1) /
//! lpValidateNext / lpGet.
//!
//! Layout:
//!   <total bytes: u32 LE> <element count: u16 LE, 65535 = "unknown">
//!   <entry>* <0xFF>
//! entry = <encoding+data> <backlen>, where backlen is the size of
//! <encoding+data> written big-end-first in 7-bit groups, every byte except
//! the first written one having bit 7 set (1..=5 bytes; note Redis's quirk:
//! 16383 already takes 3 bytes).
//! Encodings (first byte):
//!   0xxxxxxx                    7-bit unsigned int 0..=127
//!   10LLLLLL <L bytes>          string shorter than 64 bytes
//!   110xxxxx yyyyyyyy           13-bit signed int (-4096..=4095), big-end first
//!   1110LLLL LLLLLLLL <bytes>   string 64..=4095 bytes
//!   11110000 <u32 LE len> <..>  string of 4096 bytes or more
//!   0xF1 <i16 LE> | 0xF2 <i24 LE> | 0xF3 <i32 LE> | 0xF4 <i64 LE>
//!   0xFF                        end of listpack
//! lpAppend stores an element as an integer whenever it is a canonical decimal
//! i64 (lpStringToInt64), using the smallest integer encoding that fits.
//! The header count saturates at 65535 (lpInsert stops updating it).
//!
//! Differences: parsing is always "deep" (every entry checked, count checked
//! unless 65535) and requires the declared total to equal the blob length,
//! exactly like lpValidateIntegrity(deep=1).

use super::DumpError;

const HEADER_BYTES: usize = 6;
const EOF_BYTE: u8 = 0xff;
const COUNT_UNKNOWN: u16 = u16::MAX;

/// Size of an empty listpack (header + EOF), `lpNew`'s `LP_HDR_SIZE+1`.
pub const EMPTY_LISTPACK_BYTES: usize = HEADER_BYTES + 1;

/// One element read back from a listpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

impl Entry<'_> {
    /// The element as Redis returns it to clients (integers in decimal).
    pub fn to_bytes(self) -> Vec<u8> {
        match self {
            Entry::Bytes(bytes) => bytes.to_vec(),
            Entry::Int(value) => value.to_string().into_bytes(),
        }
    }
}

/// Incremental listpack writer (a sequence of lpAppend calls on lpNew(0)).
#[derive(Debug, Clone, Default)]
pub struct Builder {
    entries: Vec<u8>,
    count: usize,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `lpBytes` of the listpack built so far.
    pub fn size_bytes(&self) -> usize {
        HEADER_BYTES + self.entries.len() + 1
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// lpAppend: integer encoding when the bytes are a canonical i64.
    pub fn append(&mut self, element: &[u8]) {
        match crate::parse_i64_strict(element) {
            Some(value) => self.append_int(value),
            None => self.append_string(element),
        }
    }

    /// lpAppendInteger.
    pub fn append_int(&mut self, value: i64) {
        let start = self.entries.len();
        encode_int(&mut self.entries, value);
        self.finish_entry(start);
    }

    fn append_string(&mut self, element: &[u8]) {
        let start = self.entries.len();
        let len = element.len();
        if len < 64 {
            self.entries.push(0x80 | len as u8);
        } else if len < 4096 {
            self.entries.push(0xe0 | (len >> 8) as u8);
            self.entries.push(len as u8);
        } else {
            self.entries.push(0xf0);
            self.entries.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.entries.extend_from_slice(element);
        self.finish_entry(start);
    }

    fn finish_entry(&mut self, start: usize) {
        let entry_len = (self.entries.len() - start) as u64;
        write_backlen(&mut self.entries, entry_len);
        self.count += 1;
    }

    /// The complete listpack blob.
    pub fn finish(&self) -> Vec<u8> {
        let total = self.size_bytes();
        let count = self.count.min(usize::from(COUNT_UNKNOWN)) as u16;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&self.entries);
        out.push(EOF_BYTE);
        out
    }
}

/// lpEncodeIntegerGetType.
fn encode_int(out: &mut Vec<u8>, value: i64) {
    if (0..=127).contains(&value) {
        out.push(value as u8);
    } else if (-4096..=4095).contains(&value) {
        let unsigned = (value as u64) & 0x1fff;
        out.push(0xc0 | (unsigned >> 8) as u8);
        out.push(unsigned as u8);
    } else if let Ok(small) = i16::try_from(value) {
        out.push(0xf1);
        out.extend_from_slice(&small.to_le_bytes());
    } else if (-8_388_608..=8_388_607).contains(&value) {
        out.push(0xf2);
        out.extend_from_slice(&value.to_le_bytes()[..3]);
    } else if let Ok(medium) = i32::try_from(value) {
        out.push(0xf3);
        out.extend_from_slice(&medium.to_le_bytes());
    } else {
        out.push(0xf4);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// lpEncodeBacklen.
fn write_backlen(out: &mut Vec<u8>, len: u64) {
    let groups = if len <= 127 {
        1
    } else if len < 16383 {
        2
    } else if len < 2_097_151 {
        3
    } else if len < 268_435_455 {
        4
    } else {
        5
    };
    for index in (0..groups).rev() {
        let group = ((len >> (7 * index)) & 127) as u8;
        let is_first_written = index == groups - 1;
        out.push(if is_first_written { group } else { group | 128 });
    }
}

fn backlen_size(len: u64) -> usize {
    let mut scratch = Vec::with_capacity(5);
    write_backlen(&mut scratch, len);
    scratch.len()
}

/// lpDecodeBacklen reading backwards from `end` (exclusive).
fn read_backlen(bytes: &[u8], end: usize, start: usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    let mut pos = end;
    loop {
        if pos <= start {
            return None;
        }
        pos -= 1;
        let byte = bytes[pos];
        value |= u64::from(byte & 127) << shift;
        if byte & 128 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// Parses and fully validates a listpack blob.
pub fn parse(blob: &[u8]) -> Result<Vec<Entry<'_>>, DumpError> {
    let bad = DumpError::BadFormat("listpack integrity check failed");
    if blob.len() < EMPTY_LISTPACK_BYTES {
        return Err(bad);
    }
    let total = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    let declared_count = u16::from_le_bytes([blob[4], blob[5]]);
    if total != blob.len() || blob[total - 1] != EOF_BYTE {
        return Err(bad);
    }
    let body_end = total - 1;
    let mut entries = Vec::new();
    let mut pos = HEADER_BYTES;
    while pos < body_end {
        let (entry, entry_len) = read_entry(&blob[..body_end], pos).ok_or(bad)?;
        let backlen_len = backlen_size(entry_len as u64);
        let next = pos + entry_len + backlen_len;
        if next > body_end {
            return Err(bad);
        }
        let stored = read_backlen(blob, next, pos + entry_len).ok_or(bad)?;
        if stored != entry_len as u64 {
            return Err(bad);
        }
        entries.push(entry);
        pos = next;
    }
    if declared_count != COUNT_UNKNOWN && usize::from(declared_count) != entries.len() {
        return Err(bad);
    }
    Ok(entries)
}

/// `parse` with every element as bytes (integers in decimal).
pub fn parse_owned(blob: &[u8]) -> Result<Vec<Vec<u8>>, DumpError> {
    Ok(parse(blob)?.into_iter().map(Entry::to_bytes).collect())
}

/// Decodes the entry at `pos` (without its backlen): value and size.
fn read_entry(body: &[u8], pos: usize) -> Option<(Entry<'_>, usize)> {
    let first = body[pos];
    let int_at = |len: usize| -> Option<[u8; 8]> {
        let bytes = body.get(pos + 1..pos + 1 + len)?;
        let fill = if bytes[len - 1] & 0x80 != 0 { 0xff } else { 0 };
        let mut wide = [fill; 8];
        wide[..len].copy_from_slice(bytes);
        Some(wide)
    };
    let string_at = |header: usize, len: usize| -> Option<(Entry<'_>, usize)> {
        let start = pos + header;
        let bytes = body.get(start..start.checked_add(len)?)?;
        Some((Entry::Bytes(bytes), header + len))
    };
    match first {
        0x00..=0x7f => Some((Entry::Int(i64::from(first)), 1)),
        0x80..=0xbf => string_at(1, usize::from(first & 0x3f)),
        0xc0..=0xdf => {
            let low = *body.get(pos + 1)?;
            let raw = (u16::from(first & 0x1f) << 8) | u16::from(low);
            let value = if raw >= 1 << 12 {
                i64::from(raw) - (1 << 13)
            } else {
                i64::from(raw)
            };
            Some((Entry::Int(value), 2))
        }
        0xe0..=0xef => {
            let low = *body.get(pos + 1)?;
            string_at(2, (usize::from(first & 0x0f) << 8) | usize::from(low))
        }
        0xf0 => {
            let len = body.get(pos + 1..pos + 5)?;
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            string_at(5, len)
        }
        0xf1 => Some((Entry::Int(i64::from_le_bytes(int_at(2)?)), 3)),
        0xf2 => Some((Entry::Int(i64::from_le_bytes(int_at(3)?)), 4)),
        0xf3 => Some((Entry::Int(i64::from_le_bytes(int_at(4)?)), 5)),
        0xf4 => Some((Entry::Int(i64::from_le_bytes(int_at(8)?)), 9)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(elements: &[&[u8]]) -> Vec<u8> {
        let mut builder = Builder::new();
        for element in elements {
            builder.append(element);
        }
        builder.finish()
    }

    #[test]
    fn empty_listpack_layout() {
        assert_eq!(build(&[]), vec![7, 0, 0, 0, 0, 0, 0xff]);
    }

    #[test]
    fn small_entries_match_redis_layout() {
        // Known Redis 7.0 listpack for RPUSH l a 1 -> two entries.
        let blob = build(&[b"a", b"1"]);
        assert_eq!(blob, vec![12, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0x01, 1, 0xff]);
    }

    #[test]
    fn integer_widths_round_trip() {
        let values: Vec<i64> = vec![
            0,
            127,
            128,
            -1,
            4095,
            -4096,
            4096,
            -4097,
            32767,
            -32768,
            32768,
            8_388_607,
            -8_388_608,
            8_388_608,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
            i64::from(i32::MAX) + 1,
            i64::MAX,
            i64::MIN,
        ];
        let strings: Vec<Vec<u8>> = values.iter().map(|v| v.to_string().into_bytes()).collect();
        let refs: Vec<&[u8]> = strings.iter().map(Vec::as_slice).collect();
        let blob = build(&refs);
        let parsed = parse(&blob).unwrap();
        let back: Vec<Entry> = values.iter().map(|&v| Entry::Int(v)).collect();
        assert_eq!(parsed, back);
    }

    #[test]
    fn string_lengths_and_backlens_round_trip() {
        for len in [
            0usize, 63, 64, 125, 126, 127, 128, 4095, 4096, 16380, 16383, 20000,
        ] {
            let element = vec![b'x'; len];
            let blob = build(&[&element, b"tail"]);
            let parsed = parse(&blob).unwrap();
            assert_eq!(parsed[0].to_bytes(), element, "len {len}");
            assert_eq!(parsed[1].to_bytes(), b"tail");
        }
    }

    #[test]
    fn backlen_quirk_at_16383() {
        let mut out = Vec::new();
        write_backlen(&mut out, 16382);
        assert_eq!(out.len(), 2);
        out.clear();
        write_backlen(&mut out, 16383);
        assert_eq!(out, vec![0x00, 0xff, 0xff]);
    }

    #[test]
    fn corrupt_listpacks_are_rejected() {
        let blob = build(&[b"a", b"1"]);
        let mut wrong_total = blob.clone();
        wrong_total[0] += 1;
        assert!(parse(&wrong_total).is_err());
        let mut wrong_count = blob.clone();
        wrong_count[4] = 3;
        assert!(parse(&wrong_count).is_err());
        let mut wrong_backlen = blob.clone();
        wrong_backlen[8] = 3;
        assert!(parse(&wrong_backlen).is_err());
        let mut bad_encoding = blob;
        bad_encoding[9] = 0xf5;
        assert!(parse(&bad_encoding).is_err());
    }
}
