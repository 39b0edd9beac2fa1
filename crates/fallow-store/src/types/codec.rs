//! Shared pieces of the collection codec: the error type, the writers and a bounds-checked reader.
//!
//! Every collection type encodes itself as a leading version byte followed by its fields; each type's
//! file opens its codec section with its layout. Common conventions:
//! - counts and byte-string lengths are unsigned LEB128 varints (7 bits a byte, least significant group
//!   first, at most 10 bytes), written in their shortest form; a longer form is rejected, so every value
//!   has exactly one encoding;
//! - a byte string is its length varint then its raw bytes;
//! - fixed-width numbers (f64 bits, i64, i128) are little-endian.
//!
//! Decoding never trusts the input: every read is bounds-checked, a count is rejected when the bytes left
//! cannot hold that many elements (so pre-allocations are bounded by the input's length), and bytes left
//! over after the value are an error.
use super::Kind;
use std::fmt;

/// Why bytes do not decode to a collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ends inside a field.
    Truncated,
    /// A count that the remaining input cannot hold (each element needs at least some bytes).
    BadLength {
        /// What was counted.
        what: &'static str,
        /// The count read.
        len: u64,
    },
    /// A varint longer than its shortest form, or past 64 bits.
    BadVarint,
    /// A version byte this build does not know.
    BadVersion { kind: Kind, version: u8 },
    /// Not a collection kind (strings live inline in segment items).
    BadKind(Kind),
    /// Bytes left over after the value.
    TrailingBytes(usize),
    /// A score that no sorted set holds (NaN, or -0.0, which is stored as 0.0); the f64's bits.
    InvalidFloat(u64),
    /// A field or member that appears twice.
    Duplicate(&'static str),
    /// Elements out of the order the encoder writes them in.
    BadOrder(&'static str),
    /// A state no sequence of commands produces (a TopN's k out of range, an impossible summary).
    Invalid(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated collection encoding"),
            DecodeError::BadLength { what, len } => {
                write!(f, "bad length: {len} {what} cannot fit the remaining input")
            }
            DecodeError::BadVarint => write!(f, "bad varint: overlong or past 64 bits"),
            DecodeError::BadVersion { kind, version } => {
                write!(f, "unknown {} encoding version {version}", kind.name())
            }
            DecodeError::BadKind(kind) => write!(f, "{} is not a collection kind", kind.name()),
            DecodeError::TrailingBytes(count) => {
                write!(f, "{count} trailing bytes after the collection")
            }
            DecodeError::InvalidFloat(bits) => {
                write!(
                    f,
                    "invalid score {} (bits {bits:#018x})",
                    f64::from_bits(*bits)
                )
            }
            DecodeError::Duplicate(what) => write!(f, "duplicate {what}"),
            DecodeError::BadOrder(what) => write!(f, "{what} out of order"),
            DecodeError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Appends `value` as an unsigned LEB128 varint (shortest form).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a length (as a varint).
pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) {
    put_varint(out, len as u64);
}

/// Appends a byte string: its length varint, then its bytes.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads an encoding front to back; every read checks the bounds.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The next `len` bytes.
    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.rest.len() {
            return Err(DecodeError::Truncated);
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().expect("take returns N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    /// The leading version byte, which must be `expected`.
    pub(crate) fn version(&mut self, kind: Kind, expected: u8) -> Result<(), DecodeError> {
        match self.u8()? {
            version if version == expected => Ok(()),
            version => Err(DecodeError::BadVersion { kind, version }),
        }
    }

    /// An unsigned LEB128 varint in its shortest form.
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            // The tenth byte holds only bit 63.
            if shift == 63 && byte > 1 {
                return Err(DecodeError::BadVarint);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                // A zero last group (after the first) means a shorter form existed.
                if byte == 0 && shift > 0 {
                    return Err(DecodeError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(DecodeError::BadVarint)
    }

    /// A count of elements that each take at least `min_element_bytes` of input: rejected when the
    /// remaining input cannot hold that many, so a caller may pre-allocate the count.
    pub(crate) fn count(
        &mut self,
        what: &'static str,
        min_element_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let len = self.varint()?;
        let fits = self.remaining() / min_element_bytes.max(1);
        match usize::try_from(len) {
            Ok(count) if count <= fits => Ok(count),
            _ => Err(DecodeError::BadLength { what, len }),
        }
    }

    /// A byte string: its length varint, then that many bytes.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated)?;
        self.take(len)
    }

    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i128(&mut self) -> Result<i128, DecodeError> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_bits(u64::from_le_bytes(self.array()?)))
    }

    /// Ends the decoding: nothing may be left.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.rest.len() {
            0 => Ok(()),
            left => Err(DecodeError::TrailingBytes(left)),
        }
    }
}

/// Checks shared by every type's codec tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::DecodeError;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    /// Every strict prefix of a valid encoding fails to decode (and does not panic).
    pub(crate) fn rejects_every_prefix<T>(
        encoded: &[u8],
        decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
    ) -> Result<(), TestCaseError> {
        for len in 0..encoded.len() {
            prop_assert!(
                decode(&encoded[..len]).is_err(),
                "a prefix of {} of the {} bytes {:?} decoded",
                len,
                encoded.len(),
                encoded
            );
        }
        Ok(())
    }

    /// Arbitrary bytes never panic the decoder, and whatever they decode to encodes back to exactly
    /// those bytes (the format has one encoding per value, so nothing was silently dropped or fixed).
    pub(crate) fn canonical_or_rejected<T>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
        encode: impl Fn(&T, &mut Vec<u8>),
    ) -> Result<(), TestCaseError> {
        if let Ok(value) = decode(bytes) {
            let mut again = Vec::new();
            encode(&value, &mut again);
            prop_assert_eq!(&again[..], bytes, "decoded, but re-encodes differently");
        }
        Ok(())
    }

    /// `encoded` with the byte at `position` (modulo its length) replaced by `byte`.
    pub(crate) fn mutated(encoded: &[u8], position: usize, byte: u8) -> Vec<u8> {
        let mut bytes = encoded.to_vec();
        if !bytes.is_empty() {
            let position = position % bytes.len();
            bytes[position] = byte;
        }
        bytes
    }

    /// A version byte followed by random bytes, the likeliest garbage to get past the first check.
    pub(crate) fn versioned(version: u8, tail: &[u8]) -> Vec<u8> {
        [version].into_iter().chain(tail.iter().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varints_are_shortest_and_bounded() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!(Reader::new(&out).varint(), Ok(300));
        // 0 written in two bytes, and 1 << 64.
        assert_eq!(
            Reader::new(&[0x80, 0x00]).varint(),
            Err(DecodeError::BadVarint)
        );
        let past = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        assert_eq!(Reader::new(&past).varint(), Err(DecodeError::BadVarint));
        let mut max = Vec::new();
        put_varint(&mut max, u64::MAX);
        assert_eq!(max.len(), 10);
        assert_eq!(Reader::new(&max).varint(), Ok(u64::MAX));
        assert_eq!(Reader::new(&max[..9]).varint(), Err(DecodeError::Truncated));
    }

    #[test]
    fn counts_are_bounded_by_the_input() {
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX);
        let mut reader = Reader::new(&out);
        assert!(matches!(
            reader.count("members", 1),
            Err(DecodeError::BadLength { len: u64::MAX, .. })
        ));
        let mut reader = Reader::new(&[3, 0, 0, 0, 0, 0]);
        assert!(reader.count("members", 2).is_err(), "3 x 2 bytes > 5 left");
        let mut reader = Reader::new(&[2, 0, 0, 0, 0]);
        assert_eq!(reader.count("members", 2), Ok(2));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            DecodeError::TrailingBytes(3).to_string(),
            "3 trailing bytes after the collection"
        );
        let version = DecodeError::BadVersion {
            kind: Kind::Hash,
            version: 9,
        };
        assert_eq!(version.to_string(), "unknown hash encoding version 9");
        assert!(DecodeError::InvalidFloat(f64::NAN.to_bits())
            .to_string()
            .contains("NaN"));
    }

    proptest! {
        #[test]
        fn varints_round_trip(value in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(reader.varint(), Ok(value));
            prop_assert!(reader.finish().is_ok());
        }

        #[test]
        fn arbitrary_varints_are_canonical_or_rejected(bytes in prop::collection::vec(any::<u8>(), 0..12)) {
            let mut reader = Reader::new(&bytes);
            if let Ok(value) = reader.varint() {
                let mut out = Vec::new();
                put_varint(&mut out, value);
                prop_assert_eq!(&out[..], &bytes[..out.len()]);
            }
        }
    }
}
