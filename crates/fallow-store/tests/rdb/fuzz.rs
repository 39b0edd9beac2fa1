//! Robustness: the decoders must return `Ok` or `Err` — never panic, hang or
//! allocate from a crafted length — on random and mutated payloads. Most
//! mutations get a freshly computed footer so they reach the body parsers
//! instead of stopping at the CRC check.

use super::common::{load_cases, Subject};
use fallow_store::rdb::{
    crc64, decode_dump, decode_dump_with_limit, decode_function_dump, encode_dump, lzf, DumpError,
    EncodingLimits, RdbValue,
};

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn with_footer(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(0, &body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let at = rng.below(body.len() + 1);
        match rng.below(7) {
            0 if !body.is_empty() => {
                let index = at.min(body.len() - 1);
                body[index] ^= 1 << rng.below(8);
            }
            1 if !body.is_empty() => {
                let index = at.min(body.len() - 1);
                body[index] = rng.next() as u8;
            }
            2 => body.truncate(at),
            3 => body.insert(at, rng.next() as u8),
            4 => {
                let junk_len = 1 + rng.below(16);
                let junk = rng.bytes(junk_len);
                body.splice(at..at, junk);
            }
            5 if !body.is_empty() => {
                // Large length-ish values where a length is likely.
                let index = at.min(body.len() - 1);
                body[index] = [0x80, 0x81, 0xbf, 0xff, 0xc3, 0x7f][rng.below(6)];
            }
            _ => {
                if at < body.len() {
                    body.remove(at);
                }
            }
        }
    }
}

fn bodies() -> Vec<Vec<u8>> {
    load_cases()
        .into_iter()
        .filter(|case| case.payload.len() < 20_000)
        .map(|case| case.payload[..case.payload.len() - 10].to_vec())
        .collect()
}

#[test]
fn mutated_fixture_bodies_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bodies = bodies();
    let mut decoded = 0usize;
    let iterations = 30_000;
    for _ in 0..iterations {
        let mut body = bodies[rng.below(bodies.len())].clone();
        mutate(&mut rng, &mut body);
        let payload = with_footer(body);
        decoded += usize::from(decode_dump(&payload).is_ok());
        let _ = decode_function_dump(&payload);
    }
    // Some mutations (e.g. inside string bytes) must still decode.
    assert!(decoded > 0 && decoded < iterations);
}

#[test]
fn mutated_payloads_without_footer_fix_are_refused() {
    let mut rng = Rng(42);
    for case in load_cases()
        .iter()
        .filter(|case| case.payload.len() < 20_000)
    {
        let mut payload = case.payload.clone();
        let at = rng.below(payload.len());
        payload[at] ^= 1 << rng.below(8);
        let result = match &case.subject {
            Subject::Value(_) => decode_dump(&payload).err(),
            Subject::Functions(_) => decode_function_dump(&payload).err(),
        };
        assert_eq!(result, Some(DumpError::VersionOrChecksum), "{}", case.name);
    }
}

#[test]
fn random_payloads_never_panic() {
    let mut rng = Rng(7);
    for _ in 0..30_000 {
        let len = rng.below(64);
        let mut body = rng.bytes(len);
        let kind_index = rng.below(17);
        if let Some(first) = body.first_mut() {
            // Bias the type byte towards real object types and opcodes.
            *first = [
                0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14, 16, 17, 18, 245, 246,
            ][kind_index];
        }
        let payload = with_footer(body.clone());
        let _ = decode_dump(&payload);
        let _ = decode_function_dump(&payload);
        let _ = decode_dump(&body);
    }
}

#[test]
fn hostile_lengths_fail_fast() {
    let huge_len = [0x81u8, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    for kind in [0u8, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14, 16, 17, 18] {
        let mut body = vec![kind];
        body.extend_from_slice(&huge_len);
        assert!(decode_dump(&with_footer(body)).is_err(), "type {kind}");
    }
    // LZF string claiming a 4 GiB expansion of 3 bytes.
    let lzf_bomb = vec![
        0u8, 0xc3, 0x03, 0x80, 0xff, 0xff, 0xff, 0xff, 0x00, b'a', b'b',
    ];
    assert!(decode_dump(&with_footer(lzf_bomb)).is_err());
    // A large but honest LZF expansion is refused by a small budget.
    let long = RdbValue::String(vec![b'a'; 100_000]);
    let payload = encode_dump(&long, &EncodingLimits::default());
    assert!(payload.len() < 2_000);
    assert_eq!(decode_dump(&payload).unwrap(), long);
    assert!(decode_dump_with_limit(&payload, 50_000).is_err());
}

#[test]
fn lzf_decompress_never_panics() {
    let mut rng = Rng(99);
    for _ in 0..20_000 {
        let input_len = rng.below(80);
        let input = rng.bytes(input_len);
        let out_len = rng.below(400);
        let _ = lzf::decompress(&input, out_len);
    }
    // Mutated real streams.
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 7 + i / 100) as u8).collect();
    let packed = lzf::compress(&data, data.len()).unwrap();
    for _ in 0..5_000 {
        let mut copy = packed.clone();
        let at = rng.below(copy.len());
        copy[at] = rng.next() as u8;
        if let Ok(out) = lzf::decompress(&copy, data.len()) {
            assert_eq!(out.len(), data.len());
        }
    }
}

/// Writes an RDB length (test copy of rdbSaveLen).
fn rdb_len(len: usize) -> Vec<u8> {
    match len {
        0..=63 => vec![len as u8],
        64..=16383 => vec![0x40 | (len >> 8) as u8, len as u8],
        _ => [&[0x80u8][..], &(len as u32).to_be_bytes()].concat(),
    }
}

/// Splits `<type> <raw RDB string>` into the type byte and the blob.
fn raw_blob(body: &[u8]) -> Option<(u8, Vec<u8>)> {
    let (kind, rest) = body.split_first()?;
    let (len, header) = match rest.first()? >> 6 {
        0 => (usize::from(rest[0] & 0x3f), 1),
        1 => (
            (usize::from(rest[0] & 0x3f) << 8) | usize::from(*rest.get(1)?),
            2,
        ),
        2 if rest[0] == 0x80 => (
            u32::from_be_bytes(rest.get(1..5)?.try_into().ok()?) as usize,
            5,
        ),
        _ => return None,
    };
    (rest.len() == header + len).then(|| (*kind, rest[header..].to_vec()))
}

#[test]
fn mutated_inner_blobs_never_panic() {
    // Listpack / intset / ziplist / zipmap blobs stored as raw strings, so
    // that mutations reach the blob parsers rather than the LZF decoder.
    let uncompressed = EncodingLimits {
        rdb_compression: false,
        ..EncodingLimits::default()
    };
    let mut blobs: Vec<(u8, Vec<u8>)> = load_cases()
        .iter()
        .filter_map(|case| match &case.subject {
            Subject::Value(value) => {
                let payload = encode_dump(value, &uncompressed);
                raw_blob(&payload[..payload.len() - 10])
            }
            Subject::Functions(_) => None,
        })
        .collect();
    blobs.extend(
        load_cases()
            .iter()
            .filter_map(|case| raw_blob(&case.payload[..case.payload.len() - 10])),
    );
    let kinds: std::collections::HashSet<u8> = blobs.iter().map(|(kind, _)| *kind).collect();
    for kind in [9u8, 10, 11, 12, 13, 16, 17] {
        assert!(kinds.contains(&kind), "no raw blob of type {kind}");
    }
    let mut rng = Rng(0xdead_beef);
    for _ in 0..20_000 {
        let (kind, blob) = &blobs[rng.below(blobs.len())];
        let mut blob = blob.clone();
        mutate(&mut rng, &mut blob);
        let mut body = vec![*kind];
        body.extend_from_slice(&rdb_len(blob.len()));
        body.extend_from_slice(&blob);
        let _ = decode_dump(&with_footer(body));
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let payload = encode_dump(&RdbValue::String(b"x".to_vec()), &EncodingLimits::default());
    let mut body = payload[..payload.len() - 10].to_vec();
    body.push(0);
    assert!(matches!(
        decode_dump(&with_footer(body)),
        Err(DumpError::BadFormat(_))
    ));
}
