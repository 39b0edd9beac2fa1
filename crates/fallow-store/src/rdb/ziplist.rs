//! Mirrors the reading side of Redis 7.0.15 `src/ziplist.c`
//! (ziplistValidateIntegrity(deep=1), zipEntrySafe, ZIP_DECODE_*), for
//! payloads written by Redis 3.2 to 6.2: RDB_TYPE_LIST_ZIPLIST (10),
//! RDB_TYPE_ZSET_ZIPLIST (12), RDB_TYPE_HASH_ZIPLIST (13) and the nodes of
//! RDB_TYPE_LIST_QUICKLIST (14). Read only: Redis 7 never writes ziplists.
//!
//! Layout (header fields little endian):
//!   <zlbytes: u32> <zltail: u32 offset of last entry> <zllen: u16, 65535 =
//!   unknown> <entry>* <0xFF>
//! entry = <prevlen> <encoding> <data>
//!   prevlen: 1 byte if < 254, else 0xFE + u32 LE
//!   00LLLLLL                     string, 6-bit length
//!   01LLLLLL LLLLLLLL            string, 14-bit length (big endian)
//!   10______ + u32 BE            string, 32-bit length
//!   0xC0 i16 | 0xD0 i32 | 0xE0 i64 | 0xF0 i24 | 0xFE i8 (all LE)
//!   0xF1..=0xFD                  immediate 0..=12 (low nibble - 1)
//!
//! Differences: none known for valid input; validation is the deep one
//! (prevlen chain, zltail, count unless 65535) and rejects an empty ziplist
//! only where the caller needs elements.

use super::DumpError;

const HEADER_BYTES: usize = 10;
const END_BYTE: u8 = 0xff;
const BIG_PREVLEN: u8 = 0xfe;

/// Parses and validates a ziplist; integers come back as decimal strings.
pub fn parse(blob: &[u8]) -> Result<Vec<Vec<u8>>, DumpError> {
    let bad = DumpError::BadFormat("ziplist integrity check failed");
    if blob.len() < HEADER_BYTES + 1 {
        return Err(bad);
    }
    let total = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    let tail = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]) as usize;
    let declared_count = u16::from_le_bytes([blob[8], blob[9]]);
    let end = blob.len() - 1;
    if total != blob.len() || blob[end] != END_BYTE || tail > end {
        return Err(bad);
    }
    let mut entries = Vec::new();
    let mut pos = HEADER_BYTES;
    let mut prev_len = 0usize;
    let mut last_start = None;
    while pos < end {
        let (value, entry_len, stated_prev) = read_entry(&blob[..end], pos).ok_or(bad)?;
        if stated_prev != prev_len {
            return Err(bad);
        }
        entries.push(value);
        last_start = Some(pos);
        prev_len = entry_len;
        pos += entry_len;
    }
    if pos != end || last_start.is_some_and(|start| start != tail) {
        return Err(bad);
    }
    if declared_count != u16::MAX && usize::from(declared_count) != entries.len() {
        return Err(bad);
    }
    Ok(entries)
}

/// Decodes one entry: (value, total entry size, stated previous size).
fn read_entry(body: &[u8], pos: usize) -> Option<(Vec<u8>, usize, usize)> {
    let (prev_len, prev_size) = if *body.get(pos)? == BIG_PREVLEN {
        let raw = body.get(pos + 1..pos + 5)?;
        (
            u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize,
            5,
        )
    } else {
        (usize::from(body[pos]), 1)
    };
    let enc_pos = pos + prev_size;
    let encoding = *body.get(enc_pos)?;
    let (value, body_size) = match encoding >> 6 {
        0 => string_at(body, enc_pos + 1, usize::from(encoding & 0x3f), 1)?,
        1 => {
            let low = *body.get(enc_pos + 1)?;
            let len = (usize::from(encoding & 0x3f) << 8) | usize::from(low);
            string_at(body, enc_pos + 2, len, 2)?
        }
        2 => {
            let raw = body.get(enc_pos + 1..enc_pos + 5)?;
            let len = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
            string_at(body, enc_pos + 5, len, 5)?
        }
        _ => int_at(body, enc_pos, encoding)?,
    };
    Some((value, prev_size + body_size, prev_len))
}

fn string_at(body: &[u8], start: usize, len: usize, header: usize) -> Option<(Vec<u8>, usize)> {
    let bytes = body.get(start..start.checked_add(len)?)?;
    Some((bytes.to_vec(), header + len))
}

fn int_at(body: &[u8], enc_pos: usize, encoding: u8) -> Option<(Vec<u8>, usize)> {
    let width = match encoding {
        0xc0 => 2,
        0xd0 => 4,
        0xe0 => 8,
        0xf0 => 3,
        0xfe => 1,
        0xf1..=0xfd => {
            let value = i64::from(encoding & 0x0f) - 1;
            return Some((value.to_string().into_bytes(), 1));
        }
        _ => return None,
    };
    let raw = body.get(enc_pos + 1..enc_pos + 1 + width)?;
    let fill = if raw[width - 1] & 0x80 != 0 { 0xff } else { 0 };
    let mut wide = [fill; 8];
    wide[..width].copy_from_slice(raw);
    let value = i64::from_le_bytes(wide);
    Some((value.to_string().into_bytes(), 1 + width))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Test-only ziplist writer (the encoding old Redis versions chose).
    pub fn build(elements: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev_len = 0usize;
        let mut tail = HEADER_BYTES;
        for element in elements {
            let start = body.len();
            tail = HEADER_BYTES + start;
            if prev_len < 254 {
                body.push(prev_len as u8);
            } else {
                body.push(BIG_PREVLEN);
                body.extend_from_slice(&(prev_len as u32).to_le_bytes());
            }
            push_value(&mut body, element);
            prev_len = body.len() - start;
        }
        let mut out = Vec::new();
        out.extend_from_slice(&((HEADER_BYTES + body.len() + 1) as u32).to_le_bytes());
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(elements.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(END_BYTE);
        out
    }

    fn push_value(body: &mut Vec<u8>, element: &[u8]) {
        match crate::parse_i64_strict(element) {
            Some(v @ 0..=12) => body.push(0xf1 + v as u8),
            Some(v) if i8::try_from(v).is_ok() => body.extend_from_slice(&[0xfe, v as u8]),
            Some(v) if i16::try_from(v).is_ok() => {
                body.push(0xc0);
                body.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Some(v) if (-8_388_608..=8_388_607).contains(&v) => {
                body.push(0xf0);
                body.extend_from_slice(&v.to_le_bytes()[..3]);
            }
            Some(v) if i32::try_from(v).is_ok() => {
                body.push(0xd0);
                body.extend_from_slice(&(v as i32).to_le_bytes());
            }
            Some(v) => {
                body.push(0xe0);
                body.extend_from_slice(&v.to_le_bytes());
            }
            None if element.len() < 64 => {
                body.push(element.len() as u8);
                body.extend_from_slice(element);
            }
            None if element.len() < 16384 => {
                body.push(0x40 | (element.len() >> 8) as u8);
                body.push(element.len() as u8);
                body.extend_from_slice(element);
            }
            None => {
                body.push(0x80);
                body.extend_from_slice(&(element.len() as u32).to_be_bytes());
                body.extend_from_slice(element);
            }
        }
    }

    #[test]
    fn round_trips_all_encodings() {
        let long = vec![b'z'; 300];
        let huge = vec![b'y'; 17000];
        let elements: Vec<&[u8]> = vec![
            b"",
            b"0",
            b"12",
            b"13",
            b"-1",
            b"300",
            b"-70000",
            b"5000000",
            b"3000000000",
            b"hello",
            &long,
            &huge,
            b"007",
        ];
        let blob = build(&elements);
        let parsed = parse(&blob).unwrap();
        let expected: Vec<Vec<u8>> = elements.iter().map(|e| e.to_vec()).collect();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn rejects_corruption() {
        let blob = build(&[b"a", b"b"]);
        for index in 0..blob.len() {
            let mut copy = blob.clone();
            copy[index] ^= 0x41;
            if let Ok(parsed) = parse(&copy) {
                assert_eq!(parsed.len(), 2, "byte {index}");
            }
        }
        let mut bad_tail = blob.clone();
        bad_tail[4] += 1;
        assert!(parse(&bad_tail).is_err());
        assert!(parse(&blob[..blob.len() - 1]).is_err());
    }
}
