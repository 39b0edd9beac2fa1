//! Redis 7.0.15 DUMP / RESTORE and FUNCTION DUMP / FUNCTION RESTORE payloads.
//!
//! Mirrors `createDumpPayload` / `verifyDumpPayload` in Redis 7.0.15
//! `src/cluster.c` and `functionDumpCommand` / `functionRestoreCommand` in
//! `src/functions.c`, with the value encodings of `src/rdb.c`.
//!
//! Payload layout:
//!   <object type: 1 byte> <object body (RDB encoding)>
//!   <RDB version: u16 LE, 10 for Redis 7.0> <CRC64 (jones) of all previous
//!   bytes: u64 LE>
//! FUNCTION DUMP replaces the object by, per library, the opcode 245
//! (RDB_OPCODE_FUNCTION2) and the library source as an RDB string.
//!
//! Module map:
//!   value.rs      RdbValue <-> payload (type choice, bodies, footer)
//!   function.rs   FUNCTION DUMP / RESTORE payloads
//!   encoding.rs   RDB lengths and strings (integer and LZF encodings)
//!   lzf.rs        liblzf 3.6 compressor / decompressor
//!   crc64.rs      Redis crc64
//!   listpack.rs   listpack build / parse
//!   quicklist.rs  list node splitting, compression, QUICKLIST bodies
//!   intset.rs     intset build / parse
//!   ziplist.rs    ziplist parse (pre-7.0 payloads)
//!   zipmap.rs     zipmap parse (Redis 2.4-era payloads)
//!   double.rs     score <-> text as Redis formats it
//!
//! Verified against Redis 7.0.15 (crates/fallow-store/tests/rdb/): every payload in
//! the fixtures whose encoding Redis produces deterministically is
//! reproduced byte for byte, and Redis RESTOREs every payload we produce
//! (with sanitize-dump-payload yes).
//!
//! Differences from Redis, in one place (each file repeats its own):
//! - Hash tables: Redis's element order for hashtable-encoded sets and hashes
//!   (and the library order of a multi-library FUNCTION DUMP) follows its
//!   seeded hash function and is not reproducible; we write the order given.
//! - History-dependent layouts are written in their canonical form: intset
//!   width is the narrowest that fits (Redis never narrows), list nodes are
//!   split as RPUSH would split them, and the encoding is chosen from the
//!   final contents (Redis never converts a hashtable/skiplist back). A -0
//!   score is written as given; Redis turns it into 0 when the member went
//!   through a listpack before its zset became a skiplist.
//! - liblzf's uninitialised hash table can in principle make Redis pick a
//!   different (equally valid) match than our clean-table compressor; not
//!   observed in any recorded or stress-tested payload.
//! - The encoder trusts its input: members are not deduplicated (except in
//!   an intset), empty collections are written (Redis refuses to RESTORE
//!   them) and NaN scores are written as they are.
//! - Decoding is stricter than RESTORE's default (sanitize-dump-payload no):
//!   bytes left between the value and the footer, duplicate members in any
//!   encoding, unsorted intsets and NaN scores are errors; so are an LZF
//!   string whose declared length is 0 or beyond 88x its compressed size, and
//!   more than `max_decompressed_bytes` of LZF output in one payload.
//! - Streams (types 15, 19) and modules (6, 7) decode to
//!   `DumpError::UnsupportedType`; RdbValue has no variant for them.

mod crc64;
mod double;
mod encoding;
mod function;
mod intset;
mod listpack;
pub mod lzf;
mod quicklist;
mod value;
mod ziplist;
mod zipmap;

pub use self::crc64::crc64;
pub use function::{decode_function_dump, encode_function_dump, encode_function_dump_with};
pub use value::{decode_dump, decode_dump_with_limit, encode_dump, EncodingLimits, RdbValue};

use std::fmt;

/// RDB format version Redis 7.0 writes into every payload footer.
pub const RDB_VERSION: u16 = 10;
/// Footer size: 2 version bytes + 8 CRC bytes.
const FOOTER_BYTES: usize = 10;
/// Default cap on the total bytes LZF strings in one payload may expand to
/// (Redis's default proto-max-bulk-len is 512 MiB).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 512 << 20;

/// (field, value) pairs of a hash, in stored order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a DUMP or FUNCTION DUMP payload was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpError {
    /// Shorter than the footer, RDB version above 10, or CRC mismatch.
    VersionOrChecksum,
    /// The body does not decode; the text says where (for logs only).
    BadFormat(&'static str),
    /// A valid object type this codec has no value for (stream, module).
    UnsupportedType(u8),
    /// FUNCTION RESTORE body errors; holds Redis's full reply text.
    Function(&'static str),
}

impl DumpError {
    /// The error reply Redis 7.0.15 sends for this failure.
    pub fn redis_message(&self) -> &'static str {
        match self {
            DumpError::VersionOrChecksum => "ERR DUMP payload version or checksum are wrong",
            DumpError::BadFormat(_) | DumpError::UnsupportedType(_) => "ERR Bad data format",
            DumpError::Function(text) => text,
        }
    }
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::BadFormat(detail) => write!(f, "{} ({detail})", self.redis_message()),
            DumpError::UnsupportedType(kind) => {
                write!(f, "{} (unsupported type {kind})", self.redis_message())
            }
            _ => f.write_str(self.redis_message()),
        }
    }
}

impl std::error::Error for DumpError {}

/// Appends the version and CRC footer (createDumpPayload's tail).
fn append_footer(payload: &mut Vec<u8>) {
    payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, payload);
    payload.extend_from_slice(&crc.to_le_bytes());
}

/// verifyDumpPayload: checks version <= 10 and the CRC; returns the body.
fn verify_footer(payload: &[u8]) -> Result<&[u8], DumpError> {
    if payload.len() < FOOTER_BYTES {
        return Err(DumpError::VersionOrChecksum);
    }
    let body_len = payload.len() - FOOTER_BYTES;
    let version = u16::from_le_bytes([payload[body_len], payload[body_len + 1]]);
    if version > RDB_VERSION {
        return Err(DumpError::VersionOrChecksum);
    }
    let (checked, stored) = payload.split_at(payload.len() - 8);
    let stored = u64::from_le_bytes(stored.try_into().expect("8-byte CRC"));
    if crc64(0, checked) != stored {
        return Err(DumpError::VersionOrChecksum);
    }
    Ok(&payload[..body_len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trips_and_detects_damage() {
        let mut payload = vec![0u8, 1, b'x'];
        append_footer(&mut payload);
        assert_eq!(verify_footer(&payload).unwrap(), &[0, 1, b'x']);
        for index in 0..payload.len() {
            let mut damaged = payload.clone();
            damaged[index] ^= 1;
            assert_eq!(verify_footer(&damaged), Err(DumpError::VersionOrChecksum));
        }
        assert_eq!(
            verify_footer(&payload[..9]),
            Err(DumpError::VersionOrChecksum)
        );
    }

    #[test]
    fn newer_version_is_refused_older_accepted() {
        for (version, ok) in [(9u16, true), (10, true), (11, false)] {
            let mut payload = vec![0u8, 0];
            payload.extend_from_slice(&version.to_le_bytes());
            let crc = crc64(0, &payload);
            payload.extend_from_slice(&crc.to_le_bytes());
            assert_eq!(verify_footer(&payload).is_ok(), ok, "version {version}");
        }
    }

    #[test]
    fn redis_error_texts() {
        assert_eq!(
            DumpError::VersionOrChecksum.redis_message(),
            "ERR DUMP payload version or checksum are wrong"
        );
        assert_eq!(
            DumpError::BadFormat("x").redis_message(),
            "ERR Bad data format"
        );
    }
}
