//! Mirrors Redis 7.0.15 `src/intset.c` (the blob stored for
//! RDB_TYPE_SET_INTSET) and intsetValidateIntegrity(deep=1).
//!
//! Layout (all little endian):
//!   <encoding: u32 = 2, 4 or 8 (bytes per element)> <length: u32>
//!   <length elements of that width, strictly ascending>
//!
//! Difference: Redis never narrows an intset's width (adding 70000 and then
//! removing it leaves a 4-byte intset), so its width depends on history; this
//! encoder always picks the narrowest width that holds every element, which
//! is what Redis produces for a set built by adding its final members.

use super::DumpError;

const HEADER_BYTES: usize = 8;

/// Narrowest intset element width (bytes) that holds `value`.
fn width_for(value: i64) -> usize {
    if i16::try_from(value).is_ok() {
        2
    } else if i32::try_from(value).is_ok() {
        4
    } else {
        8
    }
}

/// Builds the intset blob for `values` (sorted and deduplicated here).
pub fn encode(values: &[i64]) -> Vec<u8> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let width = sorted.iter().map(|&v| width_for(v)).max().unwrap_or(2);
    let mut out = Vec::with_capacity(HEADER_BYTES + width * sorted.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    for value in sorted {
        out.extend_from_slice(&value.to_le_bytes()[..width]);
    }
    out
}

/// Parses and validates an intset blob (non-empty, strictly ascending).
pub fn decode(blob: &[u8]) -> Result<Vec<i64>, DumpError> {
    let bad = DumpError::BadFormat("intset integrity check failed");
    if blob.len() < HEADER_BYTES {
        return Err(bad);
    }
    let width = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    let count = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]) as usize;
    if !matches!(width, 2 | 4 | 8) || count == 0 {
        return Err(bad);
    }
    if (blob.len() - HEADER_BYTES) / width != count
        || !(blob.len() - HEADER_BYTES).is_multiple_of(width)
    {
        return Err(bad);
    }
    let values: Vec<i64> = blob[HEADER_BYTES..]
        .chunks_exact(width)
        .map(read_signed)
        .collect();
    if values.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(bad);
    }
    Ok(values)
}

fn read_signed(bytes: &[u8]) -> i64 {
    let fill = if bytes[bytes.len() - 1] & 0x80 != 0 {
        0xff
    } else {
        0
    };
    let mut wide = [fill; 8];
    wide[..bytes.len()].copy_from_slice(bytes);
    i64::from_le_bytes(wide)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_narrowest_width_and_sorts() {
        assert_eq!(
            encode(&[3, 1, 2]),
            vec![2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 2, 0, 3, 0]
        );
        assert_eq!(encode(&[-1, 70000])[0], 4);
        assert_eq!(encode(&[i64::MIN])[0], 8);
    }

    #[test]
    fn round_trips_each_width() {
        for values in [
            vec![-5i64, 0, 32767],
            vec![-70000, 1],
            vec![i64::MIN, 0, i64::MAX],
        ] {
            assert_eq!(decode(&encode(&values)).unwrap(), values);
        }
    }

    #[test]
    fn rejects_corrupt_blobs() {
        let good = encode(&[1, 2, 3]);
        let mut unsorted = good.clone();
        unsorted.swap(8, 10);
        assert!(decode(&unsorted).is_err());
        let mut bad_width = good.clone();
        bad_width[0] = 3;
        assert!(decode(&bad_width).is_err());
        assert!(decode(&good[..good.len() - 1]).is_err());
        assert!(decode(&[2, 0, 0, 0, 0, 0, 0, 0]).is_err(), "empty intset");
        let mut huge_count = good;
        huge_count[7] = 0xff;
        assert!(decode(&huge_count).is_err());
    }
}
