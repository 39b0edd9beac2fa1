//! Mirrors Redis 7.0.15 `src/crc64.c` (crc-64-jones as used by DUMP payloads
//! and RDB files).
//!
//! Parameters: width 64, polynomial 0xad93d23594c935a9 (normal form; the
//! table below uses its bit-reflected form 0x95ac9329ac4bc9b5), reflected input
//! and output, initial value taken from the caller (Redis always passes 0), no
//! final xor. Check value: crc64(0, "123456789") == 0xe9c6d914c4b8d9ca.
//!
//! Redis computes it with "crcspeed" (8 tables, 8 bytes at a time); this file
//! uses the plain one-table byte loop, which yields the same values.
//!
//! Differences from Redis: none in output.

/// Bit-reflected form of the crc-64-jones polynomial.
const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;

const TABLE: [u64; 256] = build_table();

const fn build_table() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut index = 0;
    while index < 256 {
        let mut crc = index as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[index] = crc;
        index += 1;
    }
    table
}

/// Redis's `crc64(crc, data, len)`: continue the checksum `crc` over `data`.
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    data.iter().fold(crc, |crc, &byte| {
        TABLE[((crc ^ u64::from(byte)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::crc64;

    #[test]
    fn check_value_matches_redis() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn redis_lorem_vector() {
        // Redis's crc64Test hashes this text including its trailing NUL.
        let text = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed \
do eiusmod tempor incididunt ut labore et dolore magna \
aliqua. Ut enim ad minim veniam, quis nostrud exercitation \
ullamco laboris nisi ut aliquip ex ea commodo consequat. Duis \
aute irure dolor in reprehenderit in voluptate velit esse \
cillum dolore eu fugiat nulla pariatur. Excepteur sint \
occaecat cupidatat non proident, sunt in culpa qui officia \
deserunt mollit anim id est laborum.\0";
        assert_eq!(crc64(0, text), 0xc779_4709_e696_83b3);
    }

    #[test]
    fn incremental_equals_whole() {
        let data = b"hello crc64 world";
        let split = crc64(crc64(0, &data[..5]), &data[5..]);
        assert_eq!(split, crc64(0, data));
    }
}
