//! Bit operations on byte strings, as Redis 7.0's bitops.c defines them: a bitmap is a plain string value,
//! bit 0 is the most significant bit of byte 0, and bytes past the end read as zero. BITCOUNT and BITPOS
//! ranges (`resolve_range`), BITPOS's answer when no bit matches, BITOP's zero padding of shorter sources
//! and BITFIELD's integers (`FieldType`) with their overflow rules (`Overflow`) live here; the server only
//! parses arguments, sizes the string (through its memory accounting) and calls these.

/// Whether a BITCOUNT/BITPOS range counts bytes (the default) or bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeUnit {
    Byte,
    Bit,
}

/// An inclusive range of bit offsets inside a string: `first_bit <= last_bit < 8 * len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitRange {
    pub first_bit: u64,
    pub last_bit: u64,
}

/// The byte holding bit `offset`, and that bit's mask in it.
fn locate(offset: u64) -> (usize, u8) {
    ((offset >> 3) as usize, 0x80 >> (offset & 7))
}

/// The bit at `offset`; bits past the end are 0 (GETBIT).
pub fn get_bit(bytes: &[u8], offset: u64) -> bool {
    let (byte, mask) = locate(offset);
    bytes.get(byte).is_some_and(|&value| value & mask != 0)
}

/// Sets the bit at `offset` (which must lie inside `bytes`) and returns its previous value (SETBIT).
pub fn set_bit(bytes: &mut [u8], offset: u64, on: bool) -> bool {
    let (byte, mask) = locate(offset);
    let was_on = bytes[byte] & mask != 0;
    if on {
        bytes[byte] |= mask;
    } else {
        bytes[byte] &= !mask;
    }
    was_on
}

/// The string length in bytes that holds bit `offset`.
pub fn len_for_bit(offset: u64) -> u64 {
    (offset >> 3) + 1
}

/// Resolves Redis's inclusive [start, end] over a string of `len_bytes` bytes, counted in `unit`:
/// negative indexes count from the end, then both ends are clamped into the string. None when the range
/// is empty (an empty string, or start past end after clamping).
pub fn resolve_range(start: i64, end: i64, len_bytes: usize, unit: RangeUnit) -> Option<BitRange> {
    let total = match unit {
        RangeUnit::Byte => len_bytes as i64,
        RangeUnit::Bit => (len_bytes as i64) << 3,
    };
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }
        .max(0)
        .min(total - 1);
    if start > end {
        return None;
    }
    Some(match unit {
        RangeUnit::Byte => BitRange {
            first_bit: (start as u64) << 3,
            last_bit: ((end as u64) << 3) + 7,
        },
        RangeUnit::Bit => BitRange {
            first_bit: start as u64,
            last_bit: end as u64,
        },
    })
}

/// Set bits in `bytes`, eight bytes at a time.
pub fn popcount(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut count: u64 = words
        .by_ref()
        .map(|word| u64::from_ne_bytes(word.try_into().expect("8 bytes")).count_ones() as u64)
        .sum();
    count += words
        .remainder()
        .iter()
        .map(|byte| byte.count_ones() as u64)
        .sum::<u64>();
    count
}

/// Mask of the bits of a byte at and after bit `index` (0 = most significant).
fn from_bit_mask(index: u64) -> u8 {
    0xff >> (index & 7)
}

/// Mask of the bits of a byte at and before bit `index`.
fn to_bit_mask(index: u64) -> u8 {
    !(0x7f_u8 >> (index & 7))
}

/// Set bits inside `range`, which must lie inside `bytes`.
pub fn count_ones(bytes: &[u8], range: BitRange) -> u64 {
    let (first_byte, last_byte) = (
        (range.first_bit >> 3) as usize,
        (range.last_bit >> 3) as usize,
    );
    let outside_first = bytes[first_byte] & !from_bit_mask(range.first_bit);
    let outside_last = bytes[last_byte] & !to_bit_mask(range.last_bit);
    popcount(&bytes[first_byte..=last_byte])
        - outside_first.count_ones() as u64
        - outside_last.count_ones() as u64
}

/// BITCOUNT: the set bits of the whole string, or of `[start, end]` in `unit`. A range whose ends are both
/// negative with start after end is empty before clamping (Redis checks it first: `-1 -5` on a 3-byte
/// string counts nothing, where clamping alone would count byte 0).
pub fn bitcount(bytes: &[u8], range: Option<(i64, i64, RangeUnit)>) -> u64 {
    let resolved = match range {
        None => resolve_range(0, -1, bytes.len(), RangeUnit::Byte),
        Some((start, end, _)) if start < 0 && end < 0 && start > end => None,
        Some((start, end, unit)) => resolve_range(start, end, bytes.len(), unit),
    };
    resolved.map_or(0, |range| count_ones(bytes, range))
}

/// The offset of the first bit equal to `bit` inside `range` (which must lie inside `bytes`).
pub fn find_bit(bytes: &[u8], bit: bool, range: BitRange) -> Option<u64> {
    let (first_byte, last_byte) = (
        (range.first_bit >> 3) as usize,
        (range.last_bit >> 3) as usize,
    );
    // Looking for a 0 is looking for a 1 in the complement.
    let flip = if bit { 0 } else { 0xff };
    let in_range = |index: usize| {
        let mut mask = 0xff;
        if index == first_byte {
            mask &= from_bit_mask(range.first_bit);
        }
        if index == last_byte {
            mask &= to_bit_mask(range.last_bit);
        }
        (bytes[index] ^ flip) & mask
    };
    let hit = |index: usize, value: u8| ((index as u64) << 3) + value.leading_zeros() as u64;
    let head = in_range(first_byte);
    if head != 0 {
        return Some(hit(first_byte, head));
    }
    if last_byte == first_byte {
        return None;
    }
    // Whole bytes between the ends: skip eight at a time those with no wanted bit.
    let skip = u64::from_ne_bytes([flip; 8]);
    let mut index = first_byte + 1;
    while index + 8 <= last_byte {
        let word = u64::from_ne_bytes(bytes[index..index + 8].try_into().expect("8 bytes"));
        if word != skip {
            break;
        }
        index += 8;
    }
    while index < last_byte {
        let value = bytes[index] ^ flip;
        if value != 0 {
            return Some(hit(index, value));
        }
        index += 1;
    }
    let tail = in_range(last_byte);
    (tail != 0).then(|| hit(last_byte, tail))
}

/// BITPOS over a string that exists: the first bit equal to `bit` from `start` (to `end` when given), in
/// `unit`, or -1. When a 0 is sought without an explicit end and every bit of the range is 1, the answer is
/// the bit just past the string (Redis treats the string as padded with zeros on the right); with an
/// explicit end it is -1. An empty range answers -1 for either bit.
pub fn bitpos(
    bytes: &[u8],
    bit: bool,
    start: Option<i64>,
    end: Option<i64>,
    unit: RangeUnit,
) -> i64 {
    // Without an end Redis takes the last byte (or bit): the same as -1.
    let range = resolve_range(start.unwrap_or(0), end.unwrap_or(-1), bytes.len(), unit);
    let Some(range) = range else {
        return -1;
    };
    match find_bit(bytes, bit, range) {
        Some(offset) => offset as i64,
        None if bit || end.is_some() => -1,
        None => range.last_bit as i64 + 1,
    }
}

/// A BITOP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// Folds BITOP's sources one at a time, so the caller never holds two of them (each may be in another
/// shard). Shorter sources, and missing keys (empty), count as zero bytes up to the longest source.
pub struct BitOpFold {
    op: BitOp,
    result: Vec<u8>,
    sources: usize,
}

impl BitOpFold {
    pub fn new(op: BitOp) -> BitOpFold {
        BitOpFold {
            op,
            result: Vec::new(),
            sources: 0,
        }
    }

    /// Adds the next source (NOT takes exactly one).
    pub fn push(&mut self, source: &[u8]) {
        let first = self.sources == 0;
        self.sources += 1;
        if first {
            self.result = match self.op {
                BitOp::Not => source.iter().map(|byte| !byte).collect(),
                _ => source.to_vec(),
            };
            return;
        }
        let overlap = source.len().min(self.result.len());
        match self.op {
            // Zero padding: what only one side covers ANDs to zero.
            BitOp::And => self.result[overlap..].fill(0),
            BitOp::Or | BitOp::Xor => {
                self.result.extend_from_slice(&source[overlap..]);
            }
            BitOp::Not => unreachable!("NOT has one source"),
        }
        self.result.resize(self.result.len().max(source.len()), 0);
        let pairs = self.result[..overlap].iter_mut().zip(&source[..overlap]);
        match self.op {
            BitOp::And => pairs.for_each(|(out, byte)| *out &= byte),
            BitOp::Or => pairs.for_each(|(out, byte)| *out |= byte),
            BitOp::Xor => pairs.for_each(|(out, byte)| *out ^= byte),
            BitOp::Not => {}
        }
    }

    /// The result: as long as the longest source, empty when every source is.
    pub fn finish(self) -> Vec<u8> {
        self.result
    }
}

/// BITOP over `sources` at once.
pub fn bitop(op: BitOp, sources: &[&[u8]]) -> Vec<u8> {
    let mut fold = BitOpFold::new(op);
    sources.iter().for_each(|source| fold.push(source));
    fold.finish()
}

// ----- BITFIELD -------------------------------------------------------------------------------------

/// A BITFIELD integer type: `i1`..`i64` or `u1`..`u63` (Redis replies with signed 64-bit integers, so
/// `u64` does not exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldType {
    pub signed: bool,
    pub bits: u32,
}

impl FieldType {
    /// The type, or None when the width is out of range for its signedness.
    pub fn new(signed: bool, bits: i64) -> Option<FieldType> {
        let bits_max = if signed { 64 } else { 63 };
        (1..=bits_max).contains(&bits).then_some(FieldType {
            signed,
            bits: bits as u32,
        })
    }

    /// The last bit a field of this type at `offset` covers.
    pub fn last_bit(self, offset: u64) -> u64 {
        offset + self.bits as u64 - 1
    }
}

/// What BITFIELD SET and INCRBY do when the result does not fit the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Keep the low bits (two's complement for signed types). The default.
    Wrap,
    /// Saturate at the type's minimum or maximum.
    Sat,
    /// Write nothing and answer nil.
    Fail,
}

/// A BITFIELD write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldWrite {
    /// Stores the value and answers the old one.
    Set(i64),
    /// Adds to the field and answers the new value.
    IncrBy(i64),
}

/// What a BITFIELD write answered and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldOutcome {
    /// The reply: None when the write failed under `Overflow::Fail`.
    pub reply: Option<i64>,
    /// Whether a bit of the string changed.
    pub changed: bool,
}

/// The unsigned integer of `bits` bits at bit `offset`, most significant bit first; bits past the end of
/// `bytes` read as 0.
fn read_unsigned(bytes: &[u8], offset: u64, bits: u32) -> u64 {
    (0..bits as u64).fold(0, |value, index| {
        (value << 1) | get_bit(bytes, offset + index) as u64
    })
}

/// Writes the low `bits` bits of `value` at bit `offset`, which must lie inside `bytes`.
fn write_unsigned(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for index in 0..bits as u64 {
        let on = value >> (bits as u64 - 1 - index) & 1 == 1;
        set_bit(bytes, offset + index, on);
    }
}

/// The low `bits` bits of `value` as a two's complement integer (higher bits are ignored).
fn sign_extend(value: u64, bits: u32) -> i64 {
    if bits == 64 {
        return value as i64;
    }
    let high = u64::MAX << bits;
    if value & (1 << (bits - 1)) != 0 {
        (value | high) as i64
    } else {
        (value & !high) as i64
    }
}

/// The field of type `field` at bit `offset` (BITFIELD GET): unsigned values are at most 2^63-1, so both
/// fit an i64. Bits past the end of `bytes` read as 0.
pub fn read_field(bytes: &[u8], offset: u64, field: FieldType) -> i64 {
    let raw = read_unsigned(bytes, offset, field.bits);
    if field.signed {
        sign_extend(raw, field.bits)
    } else {
        raw as i64
    }
}

/// Redis's checkUnsignedBitfieldOverflow: Some(the value to store) when `value + incr` does not fit `bits`
/// unsigned bits (under Fail the value is meaningless), None when it fits. `value` may itself be out of
/// range (SET passes the new value with no increment; a negative one is a huge u64).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let incr_max = max.wrapping_sub(value) as i64;
    let incr_min = (value as i64).wrapping_neg();
    let wrapped = || value.wrapping_add(incr as u64) & !(u64::MAX << bits);
    if value > max || (incr > 0 && incr > incr_max) {
        Some(match overflow {
            Overflow::Wrap => wrapped(),
            _ => max,
        })
    } else if incr < 0 && incr < incr_min {
        Some(match overflow {
            Overflow::Wrap => wrapped(),
            _ => 0,
        })
    } else {
        None
    }
}

/// Redis's checkSignedBitfieldOverflow, with its wrapping arithmetic kept as it is (so extreme SET values
/// saturate as Redis's do): Some(the value to store) when `value + incr` does not fit `bits` signed bits.
fn signed_overflow(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let incr_max = (max as u64).wrapping_sub(value as u64) as i64;
    let incr_min = min.wrapping_sub(value);
    let wrapped = || {
        let sum = (value as u64).wrapping_add(incr as u64);
        sign_extend(sum, bits)
    };
    let too_big = value > max
        || (bits != 64 && incr > incr_max)
        || (value >= 0 && incr > 0 && incr > incr_max);
    let too_small = value < min
        || (bits != 64 && incr < incr_min)
        || (value < 0 && incr < 0 && incr < incr_min);
    if too_big {
        Some(match overflow {
            Overflow::Wrap => wrapped(),
            _ => max,
        })
    } else if too_small {
        Some(match overflow {
            Overflow::Wrap => wrapped(),
            _ => min,
        })
    } else {
        None
    }
}

/// BITFIELD SET or INCRBY of the field at bit `offset`; `bytes` must already hold the field's last bit.
pub fn write_field(
    bytes: &mut [u8],
    offset: u64,
    field: FieldType,
    write: FieldWrite,
    overflow: Overflow,
) -> FieldOutcome {
    let old = read_field(bytes, offset, field);
    // (value to store, reply, whether it overflowed)
    let (new, reply, overflowed) = if field.signed {
        match write {
            FieldWrite::IncrBy(incr) => match signed_overflow(old, incr, field.bits, overflow) {
                Some(limit) => (limit, limit, true),
                None => (old.wrapping_add(incr), old.wrapping_add(incr), false),
            },
            FieldWrite::Set(value) => match signed_overflow(value, 0, field.bits, overflow) {
                Some(limit) => (limit, old, true),
                None => (value, old, false),
            },
        }
    } else {
        let old_unsigned = old as u64;
        match write {
            FieldWrite::IncrBy(incr) => {
                match unsigned_overflow(old_unsigned, incr, field.bits, overflow) {
                    Some(limit) => (limit as i64, limit as i64, true),
                    None => {
                        let sum = old_unsigned.wrapping_add(incr as u64) as i64;
                        (sum, sum, false)
                    }
                }
            }
            FieldWrite::Set(value) => {
                match unsigned_overflow(value as u64, 0, field.bits, overflow) {
                    Some(limit) => (limit as i64, old, true),
                    None => (value, old, false),
                }
            }
        }
    };
    if overflowed && overflow == Overflow::Fail {
        return FieldOutcome {
            reply: None,
            changed: false,
        };
    }
    write_unsigned(bytes, offset, field.bits, new as u64);
    FieldOutcome {
        reply: Some(reply),
        changed: old != new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field(signed: bool, bits: i64) -> FieldType {
        FieldType::new(signed, bits).unwrap()
    }

    #[test]
    fn bits_are_numbered_from_the_most_significant() {
        let mut bytes = vec![0u8; 2];
        assert!(!set_bit(&mut bytes, 1, true));
        assert!(!set_bit(&mut bytes, 15, true));
        assert_eq!(bytes, [0b0100_0000, 0b0000_0001]);
        assert!(get_bit(&bytes, 1) && get_bit(&bytes, 15) && !get_bit(&bytes, 0));
        assert!(!get_bit(&bytes, 1 << 40), "past the end reads 0");
        assert!(set_bit(&mut bytes, 1, false));
        assert_eq!(bytes[0], 0);
        assert_eq!(len_for_bit(0), 1);
        assert_eq!(len_for_bit(7), 1);
        assert_eq!(len_for_bit(8), 2);
        assert_eq!(len_for_bit((1 << 32) - 1), 512 << 20);
    }

    #[test]
    fn bitcount_counts_bytes_or_bits() {
        let foobar = b"foobar";
        assert_eq!(bitcount(foobar, None), 26);
        assert_eq!(bitcount(foobar, Some((0, 0, RangeUnit::Byte))), 4);
        assert_eq!(bitcount(foobar, Some((1, 1, RangeUnit::Byte))), 6);
        assert_eq!(bitcount(foobar, Some((5, 30, RangeUnit::Bit))), 17);
        assert_eq!(bitcount(foobar, Some((-2, -1, RangeUnit::Byte))), 7);
        assert_eq!(bitcount(foobar, Some((0, -1, RangeUnit::Bit))), 26);
        assert_eq!(bitcount(foobar, Some((100, 200, RangeUnit::Byte))), 0);
        assert_eq!(bitcount(b"", None), 0);
        assert_eq!(bitcount(b"abc", Some((-1, -5, RangeUnit::Byte))), 0);
        assert_eq!(
            bitcount(b"abc", Some((-5, -9, RangeUnit::Byte))),
            0,
            "reversed negative range is empty before clamping"
        );
        assert_eq!(bitcount(b"\xff", Some((3, 3, RangeUnit::Bit))), 1);
        assert_eq!(bitcount(b"\xff\xff", Some((7, 8, RangeUnit::Bit))), 2);
    }

    #[test]
    fn bitpos_finds_first_bits_and_pads_with_zeros() {
        assert_eq!(
            bitpos(b"\xff\xf0\x00", false, None, None, RangeUnit::Byte),
            12
        );
        assert_eq!(
            bitpos(b"\x00\xff\xf0", true, Some(0), None, RangeUnit::Byte),
            8
        );
        assert_eq!(
            bitpos(b"\x00\xff\xf0", true, Some(2), Some(-1), RangeUnit::Byte),
            16
        );
        assert_eq!(
            bitpos(b"\x00\x00\x00", true, None, None, RangeUnit::Byte),
            -1
        );
        assert_eq!(bitpos(b"\xff\xff", false, None, None, RangeUnit::Byte), 16);
        assert_eq!(
            bitpos(b"\xff\xff", false, Some(1), None, RangeUnit::Byte),
            16
        );
        assert_eq!(
            bitpos(b"\xff\xff", false, Some(0), Some(-1), RangeUnit::Byte),
            -1
        );
        assert_eq!(
            bitpos(b"\xff\xff", false, Some(3), None, RangeUnit::Bit),
            16
        );
        assert_eq!(
            bitpos(b"\x00\x01", true, Some(7), Some(15), RangeUnit::Bit),
            15
        );
        assert_eq!(
            bitpos(b"\x00\x01", true, Some(7), Some(14), RangeUnit::Bit),
            -1
        );
        assert_eq!(
            bitpos(b"\xfe\xff", false, Some(7), Some(7), RangeUnit::Bit),
            7
        );
        assert_eq!(bitpos(b"", false, None, None, RangeUnit::Byte), -1);
        assert_eq!(bitpos(b"", true, None, None, RangeUnit::Byte), -1);
        assert_eq!(bitpos(b"\x00", true, Some(2), Some(1), RangeUnit::Byte), -1);
        let mut long = vec![0u8; 100];
        long[77] = 0x10;
        assert_eq!(bitpos(&long, true, None, None, RangeUnit::Byte), 77 * 8 + 3);
        assert_eq!(bitpos(&long, true, Some(78), None, RangeUnit::Byte), -1);
    }

    #[test]
    fn bitop_pads_shorter_sources_with_zeros() {
        let (a, b): (&[u8], &[u8]) = (b"\xff\x0f\xaa", b"\xf0");
        assert_eq!(bitop(BitOp::And, &[a, b]), b"\xf0\x00\x00");
        assert_eq!(bitop(BitOp::And, &[b, a]), b"\xf0\x00\x00");
        assert_eq!(bitop(BitOp::Or, &[b, a]), b"\xff\x0f\xaa");
        assert_eq!(bitop(BitOp::Xor, &[a, b, b"\x0f\x0f"]), b"\x00\x00\xaa");
        assert_eq!(bitop(BitOp::Not, &[a]), b"\x00\xf0\x55");
        assert_eq!(bitop(BitOp::And, &[a, b""]), b"\x00\x00\x00");
        assert!(bitop(BitOp::Or, &[b"", b""]).is_empty());
        assert!(bitop(BitOp::Not, &[b""]).is_empty());
    }

    #[test]
    fn field_types_are_bounded() {
        assert!(FieldType::new(true, 64).is_some());
        assert!(FieldType::new(false, 64).is_none());
        assert!(FieldType::new(false, 63).is_some());
        assert!(FieldType::new(true, 0).is_none());
        assert_eq!(field(false, 8).last_bit(100), 107);
    }

    #[test]
    fn fields_read_and_write_unaligned() {
        let mut bytes = vec![0u8; 3];
        let outcome = write_field(
            &mut bytes,
            5,
            field(false, 10),
            FieldWrite::Set(0x3ff),
            Overflow::Wrap,
        );
        assert_eq!(
            outcome,
            FieldOutcome {
                reply: Some(0),
                changed: true
            }
        );
        assert_eq!(bytes, [0b0000_0111, 0b1111_1110, 0]);
        assert_eq!(read_field(&bytes, 5, field(false, 10)), 0x3ff);
        assert_eq!(read_field(&bytes, 5, field(true, 10)), -1);
        assert_eq!(
            read_field(&bytes, 20, field(true, 64)),
            0,
            "past the end reads 0"
        );
        let mut bytes = vec![0u8; 8];
        write_field(
            &mut bytes,
            0,
            field(true, 64),
            FieldWrite::Set(i64::MIN),
            Overflow::Wrap,
        );
        assert_eq!(read_field(&bytes, 0, field(true, 64)), i64::MIN);
        assert_eq!(read_field(&bytes, 0, field(false, 63)), 1 << 62);
    }

    #[test]
    fn overflow_wraps_saturates_or_fails() {
        let run = |signed, bits, write, overflow| {
            let mut bytes = vec![0u8; 9];
            let setup = FieldWrite::Set(if signed { 100 } else { 200 });
            write_field(&mut bytes, 0, field(signed, bits), setup, Overflow::Wrap);
            write_field(&mut bytes, 0, field(signed, bits), write, overflow).reply
        };
        assert_eq!(
            run(false, 8, FieldWrite::IncrBy(100), Overflow::Wrap),
            Some(44)
        );
        assert_eq!(
            run(false, 8, FieldWrite::IncrBy(100), Overflow::Sat),
            Some(255)
        );
        assert_eq!(run(false, 8, FieldWrite::IncrBy(100), Overflow::Fail), None);
        assert_eq!(
            run(false, 8, FieldWrite::IncrBy(-300), Overflow::Sat),
            Some(0)
        );
        assert_eq!(
            run(false, 8, FieldWrite::IncrBy(-300), Overflow::Wrap),
            Some(156)
        );
        assert_eq!(
            run(true, 8, FieldWrite::IncrBy(100), Overflow::Wrap),
            Some(-56)
        );
        assert_eq!(
            run(true, 8, FieldWrite::IncrBy(100), Overflow::Sat),
            Some(127)
        );
        assert_eq!(
            run(true, 8, FieldWrite::IncrBy(-300), Overflow::Sat),
            Some(-128)
        );
        assert_eq!(run(true, 8, FieldWrite::IncrBy(-300), Overflow::Fail), None);
        assert_eq!(
            run(true, 64, FieldWrite::IncrBy(i64::MAX), Overflow::Sat),
            Some(i64::MAX)
        );
        assert_eq!(
            run(true, 64, FieldWrite::IncrBy(i64::MAX), Overflow::Wrap),
            Some(100i64.wrapping_add(i64::MAX))
        );
        // SET answers the old value and stores the value as the policy makes it fit.
        let mut bytes = vec![0u8; 1];
        let u8_field = field(false, 8);
        let set = |bytes: &mut Vec<u8>, value, overflow| {
            write_field(bytes, 0, u8_field, FieldWrite::Set(value), overflow)
        };
        assert_eq!(set(&mut bytes, -1, Overflow::Sat).reply, Some(0));
        assert_eq!(bytes, [255]);
        assert_eq!(set(&mut bytes, 256, Overflow::Wrap).reply, Some(255));
        assert_eq!(bytes, [0]);
        let failed = set(&mut bytes, 300, Overflow::Fail);
        assert_eq!(
            failed,
            FieldOutcome {
                reply: None,
                changed: false
            }
        );
        // Redis's wrapping comparison makes i64::MIN saturate high for a narrow signed type.
        let mut bytes = vec![0u8; 1];
        let i8_field = field(true, 8);
        write_field(
            &mut bytes,
            0,
            i8_field,
            FieldWrite::Set(i64::MIN),
            Overflow::Sat,
        );
        assert_eq!(read_field(&bytes, 0, i8_field), 127);
        write_field(
            &mut bytes,
            0,
            i8_field,
            FieldWrite::Set(-200),
            Overflow::Sat,
        );
        assert_eq!(read_field(&bytes, 0, i8_field), -128);
    }

    proptest! {
        #[test]
        fn counts_and_positions_agree_with_a_bit_by_bit_model(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
            start in -400i64..400,
            end in -400i64..400,
            bit_unit in any::<bool>(),
            bit in any::<bool>(),
        ) {
            let unit = if bit_unit { RangeUnit::Bit } else { RangeUnit::Byte };
            let bits: Vec<bool> = (0..bytes.len() as u64 * 8).map(|offset| get_bit(&bytes, offset)).collect();
            if let Some(range) = resolve_range(start, end, bytes.len(), unit) {
                let window = &bits[range.first_bit as usize..=range.last_bit as usize];
                prop_assert_eq!(count_ones(&bytes, range), window.iter().filter(|&&on| on).count() as u64);
                let expected = window.iter().position(|&on| on == bit).map(|index| range.first_bit + index as u64);
                prop_assert_eq!(find_bit(&bytes, bit, range), expected);
            }
        }

        #[test]
        fn fields_round_trip(offset in 0u64..64, bits in 1i64..=64, signed in any::<bool>(), value in any::<i64>()) {
            prop_assume!(signed || bits < 64);
            let field = field(signed, bits);
            let mut bytes = vec![0u8; 17];
            write_field(&mut bytes, offset, field, FieldWrite::Set(value), Overflow::Wrap);
            let kept = if signed { sign_extend(value as u64 & (u64::MAX >> (64 - bits)), bits as u32) }
                else { (value as u64 & (u64::MAX >> (64 - bits))) as i64 };
            prop_assert_eq!(read_field(&bytes, offset, field), kept);
            // Only the field's bits are touched.
            for other in (0..offset).chain(offset + bits as u64..17 * 8) {
                prop_assert!(!get_bit(&bytes, other));
            }
        }
    }
}
