//! One tier-2 record: what the log holds for a key (its whole value), a deletion, or a keyspace-wide
//! event, with a checksum so a torn or corrupt record is detected and never served.
//!
//! Layout (little endian, 8-byte aligned; the record's bytes are padded with zeros to a multiple of 8):
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0  | 4 | magic `RECORD_MAGIC` |
//! | 4  | 4 | CRC-32 of bytes 8..`record_bytes` |
//! | 8  | 4 | `record_bytes`: header + key + value, unpadded |
//! | 12 | 1 | `RecordKind` |
//! | 13 | 1 | `RecordClass` (swap: persistent data; clean: a copy of ephemeral data) |
//! | 14 | 2 | reserved, 0 |
//! | 16 | 8 | keyspace address (`crate::pool::keyspace`) |
//! | 24 | 8 | log sequence number, increasing over the log's life |
//! | 32 | 8 | expiry, Unix ms (0 = none) |
//! | 40 | 4 | client flags (memcached) |
//! | 44 | 4 | key bytes |
//! | 48 | 4 | value bytes |
//! | 52 | 4 | region sequence (low 32 bits): a record left over from the region's earlier life does not match |
//! | 56 | . | key, then value |
use crate::types::Kind;

pub const RECORD_MAGIC: u32 = 0x3252_4c46; // "FLR2"
pub const RECORD_HEADER_BYTES: usize = 56;
pub const RECORD_ALIGN_BYTES: usize = 8;

/// What a record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// The key's whole value of this data type (strings raw, collections by `Collection::encode`).
    Value(Kind),
    /// The key was deleted (DEL, overwritten by an ephemeral writer, RENAME's source...).
    Tombstone,
    /// FLUSHDB of one keyspace, on one shard: the value holds (shard, shard count) as two u32.
    FlushDb,
    /// SWAPDB: the value holds the other keyspace address (u64).
    SwapDb,
}

impl RecordKind {
    const TOMBSTONE: u8 = 0x40;
    const FLUSH_DB: u8 = 0x41;
    const SWAP_DB: u8 = 0x42;

    pub fn to_u8(self) -> u8 {
        match self {
            RecordKind::Value(kind) => kind as u8,
            RecordKind::Tombstone => Self::TOMBSTONE,
            RecordKind::FlushDb => Self::FLUSH_DB,
            RecordKind::SwapDb => Self::SWAP_DB,
        }
    }

    pub fn from_u8(byte: u8) -> Option<RecordKind> {
        match byte {
            Self::TOMBSTONE => Some(RecordKind::Tombstone),
            Self::FLUSH_DB => Some(RecordKind::FlushDb),
            Self::SWAP_DB => Some(RecordKind::SwapDb),
            byte => Kind::try_from_u8(byte).map(RecordKind::Value),
        }
    }
}

/// Which region of Ex-Tmem a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordClass {
    /// Persistent data: never discarded while live; replayed after any restart.
    Swap = 0,
    /// A copy of ephemeral data: may be discarded; kept over a clean restart only.
    Clean = 1,
}

/// The fixed part of a record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub class: RecordClass,
    pub keyspace: u64,
    pub lsn: u64,
    pub expire_at_ms: u64,
    pub client_flags: u32,
    pub key_bytes: u32,
    pub value_bytes: u32,
    pub region_sequence: u32,
}

impl RecordHeader {
    pub fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.key_bytes as usize + self.value_bytes as usize
    }

    /// Bytes the record takes in the log, padding included.
    pub fn padded_bytes(&self) -> usize {
        self.record_bytes().next_multiple_of(RECORD_ALIGN_BYTES)
    }
}

/// Why bytes are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// No record starts here (zeros, or the end of what was written).
    NoRecord,
    /// A record header whose lengths or kind make no sense, or a checksum that does not match.
    Corrupt,
}

/// Appends the record to `out` (padded); the region sequence is filled in by the log.
pub fn encode(header: &RecordHeader, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    assert_eq!(header.key_bytes as usize, key.len());
    assert_eq!(header.value_bytes as usize, value.len());
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(header.record_bytes() as u32).to_le_bytes());
    out.push(header.kind.to_u8());
    out.push(header.class as u8);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&header.keyspace.to_le_bytes());
    out.extend_from_slice(&header.lsn.to_le_bytes());
    out.extend_from_slice(&header.expire_at_ms.to_le_bytes());
    out.extend_from_slice(&header.client_flags.to_le_bytes());
    out.extend_from_slice(&header.key_bytes.to_le_bytes());
    out.extend_from_slice(&header.value_bytes.to_le_bytes());
    out.extend_from_slice(&header.region_sequence.to_le_bytes());
    debug_assert_eq!(out.len() - start, RECORD_HEADER_BYTES);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    seal(&mut out[start..]);
    out.resize(start + header.padded_bytes(), 0);
}

/// Recomputes the checksum of an encoded (unpadded or padded) record in place.
pub fn seal(record: &mut [u8]) {
    let record_bytes = u32_at(record, 8) as usize;
    let crc = crc32fast::hash(&record[8..record_bytes]);
    record[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Sets the region sequence of an encoded record (and re-seals it).
pub fn set_region_sequence(record: &mut [u8], region_sequence: u32) {
    record[52..56].copy_from_slice(&region_sequence.to_le_bytes());
    seal(record);
}

/// Sets the log sequence number of an encoded record (and re-seals it).
pub fn set_lsn(record: &mut [u8], lsn: u64) {
    record[24..32].copy_from_slice(&lsn.to_le_bytes());
    seal(record);
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes the record at the start of `bytes` and checks it; Ok gives the header (key and value follow
/// it: see `key_of` and `value_of`).
pub fn decode(bytes: &[u8]) -> Result<RecordHeader, RecordError> {
    let record_bytes = record_bytes_of(bytes)?;
    if crc32fast::hash(&bytes[8..record_bytes]) != u32_at(bytes, 4) {
        return Err(RecordError::Corrupt);
    }
    header_of(bytes)
}

/// `decode` without the checksum, for bytes whose checksum a tier-2 read has already verified
/// (`Tier2::read`, `Tier2::read_async`): a second pass over a 50 KB value costs about as much as
/// copying it.
pub fn decode_verified(bytes: &[u8]) -> Result<RecordHeader, RecordError> {
    record_bytes_of(bytes)?;
    header_of(bytes)
}

/// The length the record at the start of `bytes` says it has, when its magic and lengths agree.
fn record_bytes_of(bytes: &[u8]) -> Result<usize, RecordError> {
    if bytes.len() < RECORD_HEADER_BYTES || u32_at(bytes, 0) != RECORD_MAGIC {
        return Err(RecordError::NoRecord);
    }
    let record_bytes = u32_at(bytes, 8) as usize;
    let key_bytes = u32_at(bytes, 44) as usize;
    let value_bytes = u32_at(bytes, 48) as usize;
    let consistent = record_bytes == RECORD_HEADER_BYTES + key_bytes + value_bytes
        && record_bytes <= bytes.len();
    if !consistent {
        return Err(RecordError::Corrupt);
    }
    Ok(record_bytes)
}

/// The header fields of a record whose lengths `record_bytes_of` accepted.
fn header_of(bytes: &[u8]) -> Result<RecordHeader, RecordError> {
    let key_bytes = u32_at(bytes, 44);
    let value_bytes = u32_at(bytes, 48);
    let kind = RecordKind::from_u8(bytes[12]).ok_or(RecordError::Corrupt)?;
    let class = match bytes[13] {
        0 => RecordClass::Swap,
        1 => RecordClass::Clean,
        _ => return Err(RecordError::Corrupt),
    };
    Ok(RecordHeader {
        kind,
        class,
        keyspace: u64_at(bytes, 16),
        lsn: u64_at(bytes, 24),
        expire_at_ms: u64_at(bytes, 32),
        client_flags: u32_at(bytes, 40),
        key_bytes,
        value_bytes,
        region_sequence: u32_at(bytes, 52),
    })
}

/// The key of a decoded record.
pub fn key_of<'a>(header: &RecordHeader, bytes: &'a [u8]) -> &'a [u8] {
    &bytes[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + header.key_bytes as usize]
}

/// The value of a decoded record.
pub fn value_of<'a>(header: &RecordHeader, bytes: &'a [u8]) -> &'a [u8] {
    let start = RECORD_HEADER_BYTES + header.key_bytes as usize;
    &bytes[start..start + header.value_bytes as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RecordHeader {
        RecordHeader {
            kind: RecordKind::Value(Kind::String),
            class: RecordClass::Swap,
            keyspace: 3,
            lsn: 42,
            expire_at_ms: 7,
            client_flags: 9,
            key_bytes: 3,
            value_bytes: 5,
            region_sequence: 11,
        }
    }

    #[test]
    fn every_value_kind_has_a_record_kind() {
        for byte in 1..=8 {
            let kind = RecordKind::Value(Kind::from_u8(byte));
            assert_eq!(RecordKind::from_u8(kind.to_u8()), Some(kind));
        }
        assert_eq!(RecordKind::from_u8(9), None);
        assert_eq!(RecordKind::from_u8(0), None);
    }

    #[test]
    fn records_round_trip_padded() {
        let mut out = Vec::new();
        encode(&sample(), b"key", b"value", &mut out);
        assert_eq!(out.len(), 64);
        let header = decode(&out).unwrap();
        assert_eq!(header, sample());
        assert_eq!(key_of(&header, &out), b"key");
        assert_eq!(value_of(&header, &out), b"value");
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut out = Vec::new();
        encode(&sample(), b"key", b"value", &mut out);
        for byte in 0..sample().record_bytes() {
            for bit in 0..8 {
                let mut bad = out.clone();
                bad[byte] ^= 1 << bit;
                assert!(decode(&bad).is_err(), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn truncated_records_and_zeros_are_not_records() {
        let mut out = Vec::new();
        encode(&sample(), b"key", b"value", &mut out);
        for len in 0..sample().record_bytes() {
            assert!(decode(&out[..len]).is_err(), "{len} bytes");
        }
        assert_eq!(decode(&[0; 64]), Err(RecordError::NoRecord));
    }

    #[test]
    fn resealing_keeps_records_valid() {
        let mut out = Vec::new();
        encode(&sample(), b"key", b"value", &mut out);
        set_region_sequence(&mut out, 99);
        set_lsn(&mut out, 100);
        let header = decode(&out).unwrap();
        assert_eq!((header.region_sequence, header.lsn), (99, 100));
    }
}
