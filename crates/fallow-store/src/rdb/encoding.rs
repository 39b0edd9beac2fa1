//! Mirrors the RDB length and string encodings of Redis 7.0.15 `src/rdb.c`:
//! rdbSaveLen / rdbLoadLenByRef, rdbEncodeInteger / rdbTryIntegerEncoding,
//! rdbSaveLzfBlob / rdbSaveLzfStringObject / rdbSaveRawString and
//! rdbGenericLoadStringObject, plus `string2ll` from `src/util.c`.
//!
//! Length encoding (first byte, top two bits):
//!   00LLLLLL                      6-bit length
//!   01LLLLLL LLLLLLLL             14-bit length, big endian
//!   10000000 + 4 bytes            32-bit length, big endian
//!   10000001 + 8 bytes            64-bit length, big endian
//!   11EEEEEE                      special string encoding E:
//!     0: INT8  + 1 byte  (signed)
//!     1: INT16 + 2 bytes (signed, little endian)
//!     2: INT32 + 4 bytes (signed, little endian)
//!     3: LZF   + <len compressed> <len original> <compressed bytes>
//!
//! String saving rules (rdbSaveRawString):
//!   1. len <= 11 and the bytes are a canonical integer (string2ll) that fits
//!      in 32 bits: INT8/INT16/INT32, smallest that fits.
//!   2. else, if rdbcompression is on and len > 20: LZF with an output buffer
//!      of len - 4 bytes; used whenever liblzf succeeds within that buffer.
//!   3. else: length + raw bytes.
//!
//! Documented differences: decoding rejects an LZF string whose declared
//! original length is 0 (Redis's lzf_decompress returns 0 on overflow, which
//! Redis then mistakes for success when the declared length is 0) and any LZF
//! string whose declared length exceeds what the compressed bytes could
//! possibly expand to (88x), or the caller's decompression budget.

use super::lzf;
use super::DumpError;

/// Top-two-bits tag of a special string encoding.
const ENCVAL_TAG: u8 = 3;
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;
const LEN_32BIT: u8 = 0x80;
const LEN_64BIT: u8 = 0x81;

/// Longest string Redis tries to store as an INT8/16/32 encoding.
const MAX_INT_ENCODED_STRING_BYTES: usize = 11;
/// Strings must be longer than this before Redis tries LZF.
const MIN_LZF_STRING_BYTES: usize = 20;
/// One 3-byte LZF back reference expands to at most 264 bytes.
const MAX_LZF_EXPANSION: usize = 88;

/// Bounded cursor over a payload. All reads check the remaining input
/// first, and LZF output is charged against `lzf_budget_bytes`.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    lzf_budget_bytes: usize,
}

/// A length field: a plain length or a special string encoding tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LenField {
    Plain(u64),
    Special(u8),
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], lzf_budget_bytes: usize) -> Self {
        Reader {
            data,
            pos: 0,
            lzf_budget_bytes,
        }
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], DumpError> {
        if len > self.remaining() {
            return Err(DumpError::BadFormat("truncated payload"));
        }
        let start = self.pos;
        self.pos += len;
        Ok(&self.data[start..self.pos])
    }

    pub fn byte(&mut self) -> Result<u8, DumpError> {
        Ok(self.take(1)?[0])
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DumpError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// rdbLoadLenByRef.
    pub fn len_field(&mut self) -> Result<LenField, DumpError> {
        let first = self.byte()?;
        match first >> 6 {
            0 => Ok(LenField::Plain(u64::from(first & 0x3f))),
            1 => {
                let second = self.byte()?;
                Ok(LenField::Plain(
                    (u64::from(first & 0x3f) << 8) | u64::from(second),
                ))
            }
            ENCVAL_TAG => Ok(LenField::Special(first & 0x3f)),
            _ if first == LEN_32BIT => Ok(LenField::Plain(u64::from(u32::from_be_bytes(
                self.array()?,
            )))),
            _ if first == LEN_64BIT => Ok(LenField::Plain(u64::from_be_bytes(self.array()?))),
            _ => Err(DumpError::BadFormat("unknown length encoding")),
        }
    }

    /// rdbLoadLen where an encoded value is an error.
    pub fn len(&mut self) -> Result<u64, DumpError> {
        match self.len_field()? {
            LenField::Plain(len) => Ok(len),
            LenField::Special(_) => Err(DumpError::BadFormat("unexpected encoded length")),
        }
    }

    /// A count of items that each take at least `min_item_bytes` of the
    /// remaining input: rejects counts the input cannot hold.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, DumpError> {
        let count = self.len()?;
        let max = (self.remaining() / min_item_bytes.max(1)) as u64;
        if count > max {
            return Err(DumpError::BadFormat("element count exceeds payload"));
        }
        Ok(count as usize)
    }

    /// rdbGenericLoadStringObject: any string encoding, as plain bytes.
    pub fn string(&mut self) -> Result<Vec<u8>, DumpError> {
        match self.len_field()? {
            LenField::Plain(len) => {
                let len = usize::try_from(len)
                    .map_err(|_| DumpError::BadFormat("string length overflow"))?;
                Ok(self.take(len)?.to_vec())
            }
            LenField::Special(ENC_INT8) => Ok(int_string(i64::from(self.byte()? as i8))),
            LenField::Special(ENC_INT16) => {
                Ok(int_string(i64::from(i16::from_le_bytes(self.array()?))))
            }
            LenField::Special(ENC_INT32) => {
                Ok(int_string(i64::from(i32::from_le_bytes(self.array()?))))
            }
            LenField::Special(ENC_LZF) => self.lzf_string(),
            LenField::Special(_) => Err(DumpError::BadFormat("unknown string encoding")),
        }
    }

    fn lzf_string(&mut self) -> Result<Vec<u8>, DumpError> {
        let packed_len = self.len()?;
        let original_len = self.len()?;
        let packed_len =
            usize::try_from(packed_len).map_err(|_| DumpError::BadFormat("lzf length overflow"))?;
        let packed = self.take(packed_len)?;
        let bound = packed.len().saturating_mul(MAX_LZF_EXPANSION) as u64;
        if original_len == 0 || original_len > bound {
            return Err(DumpError::BadFormat("impossible lzf length"));
        }
        let original_len = original_len as usize;
        if original_len > self.lzf_budget_bytes {
            return Err(DumpError::BadFormat("decompressed size limit exceeded"));
        }
        self.lzf_budget_bytes -= original_len;
        lzf::decompress(packed, original_len).map_err(|_| DumpError::BadFormat("bad lzf data"))
    }
}

fn int_string(value: i64) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// rdbSaveLen.
pub fn write_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(((len >> 8) as u8) | 0x40);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(LEN_32BIT);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(LEN_64BIT);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// rdbEncodeInteger: the INT8/16/32 form of `value`, if it fits.
fn integer_encoding(value: i64) -> Option<Vec<u8>> {
    let tag = ENCVAL_TAG << 6;
    if let Ok(small) = i8::try_from(value) {
        Some(vec![tag | ENC_INT8, small as u8])
    } else if let Ok(medium) = i16::try_from(value) {
        let bytes = medium.to_le_bytes();
        Some(vec![tag | ENC_INT16, bytes[0], bytes[1]])
    } else if let Ok(large) = i32::try_from(value) {
        let mut out = vec![tag | ENC_INT32];
        out.extend_from_slice(&large.to_le_bytes());
        Some(out)
    } else {
        None
    }
}

/// rdbSaveLzfBlob: an LZF-encoded string from already compressed bytes.
pub fn write_lzf_blob(out: &mut Vec<u8>, packed: &[u8], original_len: usize) {
    out.push((ENCVAL_TAG << 6) | ENC_LZF);
    write_len(out, packed.len() as u64);
    write_len(out, original_len as u64);
    out.extend_from_slice(packed);
}

/// rdbSaveRawString: integer encoding, then LZF (when `compression`), then
/// verbatim, exactly as Redis picks among them.
pub fn write_string(out: &mut Vec<u8>, bytes: &[u8], compression: bool) {
    if bytes.len() <= MAX_INT_ENCODED_STRING_BYTES {
        if let Some(encoded) = crate::parse_i64_strict(bytes).and_then(integer_encoding) {
            out.extend_from_slice(&encoded);
            return;
        }
    }
    if compression && bytes.len() > MIN_LZF_STRING_BYTES {
        if let Some(packed) = lzf::compress(bytes, bytes.len() - 4) {
            write_lzf_blob(out, &packed, bytes.len());
            return;
        }
    }
    write_len(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_string(&mut out, bytes, true);
        out
    }

    fn decoded(bytes: &[u8]) -> Result<Vec<u8>, DumpError> {
        let mut reader = Reader::new(bytes, usize::MAX);
        let value = reader.string()?;
        assert!(reader.is_empty());
        Ok(value)
    }

    #[test]
    fn lengths_use_the_smallest_form() {
        for (len, expected) in [
            (0u64, vec![0x00]),
            (63, vec![0x3f]),
            (64, vec![0x40, 0x40]),
            (16383, vec![0x7f, 0xff]),
            (16384, vec![0x80, 0, 0, 0x40, 0]),
            (u64::from(u32::MAX), vec![0x80, 0xff, 0xff, 0xff, 0xff]),
            (1 << 32, vec![0x81, 0, 0, 0, 1, 0, 0, 0, 0]),
        ] {
            let mut out = Vec::new();
            write_len(&mut out, len);
            assert_eq!(out, expected, "len {len}");
            assert_eq!(Reader::new(&out, 0).len().unwrap(), len);
        }
    }

    #[test]
    fn strict_integer_parsing_matches_string2ll() {
        assert_eq!(crate::parse_i64_strict(b"0"), Some(0));
        assert_eq!(crate::parse_i64_strict(b"-1"), Some(-1));
        assert_eq!(
            crate::parse_i64_strict(b"9223372036854775807"),
            Some(i64::MAX)
        );
        assert_eq!(
            crate::parse_i64_strict(b"-9223372036854775808"),
            Some(i64::MIN)
        );
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"007",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"1a",
        ] {
            assert_eq!(crate::parse_i64_strict(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn integer_strings_use_int_encodings() {
        assert_eq!(encoded(b"12345"), vec![0xc1, 0x39, 0x30]);
        assert_eq!(encoded(b"-1"), vec![0xc0, 0xff]);
        assert_eq!(encoded(b"-2147483648"), vec![0xc2, 0, 0, 0, 0x80]);
        assert_eq!(
            encoded(b"2147483648"),
            [&[10u8][..], b"2147483648"].concat()
        );
        assert_eq!(encoded(b"007"), [&[3u8][..], b"007"].concat());
    }

    #[test]
    fn strings_round_trip() {
        let long = b"abcabcabcabcabcabcabcabcabcabcabcabc".to_vec();
        for value in [&b""[..], b"x", b"127", b"-32769", b"007", &long] {
            assert_eq!(decoded(&encoded(value)).unwrap(), value);
        }
        assert_eq!(encoded(&long)[0], 0xc3, "compressible long string uses LZF");
    }

    #[test]
    fn hostile_lengths_are_rejected_without_allocating() {
        assert!(decoded(&[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(
            decoded(&[0xc3, 0x01, 0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0])
                .is_err()
        );
        assert!(decoded(&[0xc3, 0x02, 0x00, 0x00, b'a']).is_err());
        assert!(decoded(&[0xc4]).is_err());
        assert!(decoded(&[0x82]).is_err());
    }
}
