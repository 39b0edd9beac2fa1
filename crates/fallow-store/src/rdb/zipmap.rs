//! Mirrors the reading side of Redis 7.0.15 `src/zipmap.c`
//! (zipmapValidateIntegrity(deep=1), zipmapNext) for RDB_TYPE_HASH_ZIPMAP (9),
//! the small-hash encoding written by Redis 2.4 and older. Read only.
//!
//! Layout:
//!   <count: u8, 254 = unknown> ( <len> key <len> <free: u8> value <free
//!   unused bytes> )* <0xFF>
//!   len = 1 byte if < 254, else 0xFE + u32 (host order; little endian on
//!   every platform Redis ran on)
//!
//! Differences: stricter than Redis in two corners Redis never wrote: the map
//! must end exactly at the final byte, and a value length byte of 0xFF (the
//! end marker) is rejected instead of being read as a 5-byte length.

use super::{DumpError, Pairs};

const BIG_LEN: u8 = 254;
const END_BYTE: u8 = 255;

/// Parses a zipmap into (field, value) pairs in stored order.
pub fn parse(blob: &[u8]) -> Result<Pairs, DumpError> {
    let bad = DumpError::BadFormat("zipmap integrity check failed");
    if blob.len() < 2 || blob[blob.len() - 1] != END_BYTE {
        return Err(bad);
    }
    let mut pairs = Vec::new();
    let mut pos = 1usize;
    while blob[pos] != END_BYTE {
        let (field, after_field) = read_string(blob, pos, false).ok_or(bad)?;
        let (value, after_value) = read_string(blob, after_field, true).ok_or(bad)?;
        pairs.push((field.to_vec(), value.to_vec()));
        pos = after_value;
        if pos >= blob.len() {
            return Err(bad);
        }
    }
    if pos != blob.len() - 1 || pairs.is_empty() {
        return Err(bad);
    }
    if blob[0] != BIG_LEN && usize::from(blob[0]) != pairs.len() {
        return Err(bad);
    }
    Ok(pairs)
}

/// Reads `<len> [free] bytes [free bytes]` at `pos`; returns the bytes and
/// the position after them.
fn read_string(blob: &[u8], pos: usize, has_free: bool) -> Option<(&[u8], usize)> {
    let first = *blob.get(pos)?;
    let (len, mut cursor) = match first {
        END_BYTE if has_free => return None,
        BIG_LEN..=END_BYTE => {
            let raw = blob.get(pos + 1..pos + 5)?;
            (
                u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize,
                pos + 5,
            )
        }
        _ => (usize::from(first), pos + 1),
    };
    let mut free = 0usize;
    if has_free {
        free = usize::from(*blob.get(cursor)?);
        cursor += 1;
    }
    let bytes = blob.get(cursor..cursor.checked_add(len)?)?;
    Some((bytes, cursor + len + free))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_doc_example() {
        let blob = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        let pairs = parse(blob).unwrap();
        assert_eq!(
            pairs,
            vec![
                (b"foo".to_vec(), b"bar".to_vec()),
                (b"hello".to_vec(), b"world".to_vec())
            ]
        );
    }

    #[test]
    fn skips_free_bytes_and_reads_big_lengths() {
        let mut blob = vec![BIG_LEN, BIG_LEN];
        blob.extend_from_slice(&300u32.to_le_bytes());
        blob.extend_from_slice(&[b'k'; 300]);
        blob.extend_from_slice(&[2, 3]);
        blob.extend_from_slice(b"hi");
        blob.extend_from_slice(&[0, 0, 0, END_BYTE]);
        let pairs = parse(&blob).unwrap();
        assert_eq!(pairs, vec![(vec![b'k'; 300], b"hi".to_vec())]);
    }

    #[test]
    fn rejects_corruption() {
        assert!(parse(b"\x01\x03foo\x03\x00ba\xff").is_err());
        assert!(
            parse(b"\x02\x03foo\x03\x00bar\xff").is_err(),
            "count mismatch"
        );
        assert!(parse(b"\x00\xff").is_err(), "empty");
        assert!(
            parse(b"\x01\x03foo\x03\x00bar\xff\xff").is_err(),
            "trailing"
        );
    }
}
