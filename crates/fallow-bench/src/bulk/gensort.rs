//! `fallow-bench gensort N`: sort-benchmark input. Each 100-byte record is a 10-byte key, uniformly random
//! bytes (or printable ASCII with --ascii-keys), and a 90-byte value laid out like gensort's ASCII mode
//! (-a): two blanks, the record number as 32 hex digits, two blanks, 52 filler bytes (13 groups of 4
//! equal hex digits), CR LF. Deterministic for a given seed.
use super::records::{SORT_KEY_BYTES, SORT_RECORD_BYTES, SORT_VALUE_BYTES};
use super::{mb_per_sec, progress_bar, GensortArgs};
use anyhow::Context;
use rand::{Rng, RngCore, SeedableRng};
use std::io::Write;
use std::time::Instant;

/// Records generated per write (1 MB).
const RECORDS_PER_CHUNK: usize = 10_000;
const HEX: &[u8; 16] = b"0123456789ABCDEF";
/// gensort -a's key alphabet: the 95 printable ASCII characters.
const PRINTABLE_FIRST: u8 = b' ';
const PRINTABLE_COUNT: u8 = 95;

pub fn run(args: &GensortArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let bar = progress_bar(
        args.records * SORT_RECORD_BYTES as u64,
        "gensort {bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        args.quiet || args.out.is_none(),
    );
    let bytes = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            generate(args, file, |done| bar.set_position(done))
                .with_context(|| format!("writing {}", path.display()))?
        }
        None => generate(args, std::io::stdout().lock(), |_| {})?,
    };
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "gensort: {} records, {bytes} bytes, {seconds:.3} s, {:.1} MB/s",
        args.records,
        mb_per_sec(bytes, seconds)
    );
    Ok(())
}

/// Writes the records; `progress` gets the bytes written after each chunk. Returns the bytes written.
pub fn generate(
    args: &GensortArgs,
    mut output: impl Write,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<u64> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(args.seed);
    let mut chunk = vec![0u8; RECORDS_PER_CHUNK * SORT_RECORD_BYTES];
    let mut written = 0u64;
    let mut record = 0u64;
    while record < args.records {
        let records = (args.records - record).min(RECORDS_PER_CHUNK as u64) as usize;
        let chunk = &mut chunk[..records * SORT_RECORD_BYTES];
        for (index, slot) in chunk.chunks_exact_mut(SORT_RECORD_BYTES).enumerate() {
            let (key, value) = slot.split_at_mut(SORT_KEY_BYTES);
            fill_key(&mut rng, key, args.ascii_keys);
            fill_value(record + index as u64, value);
        }
        output.write_all(chunk)?;
        record += records as u64;
        written += chunk.len() as u64;
        progress(written);
    }
    output.flush()?;
    Ok(written)
}

fn fill_key(rng: &mut impl RngCore, key: &mut [u8], ascii: bool) {
    if ascii {
        key.iter_mut()
            .for_each(|byte| *byte = PRINTABLE_FIRST + rng.gen_range(0..PRINTABLE_COUNT));
    } else {
        rng.fill_bytes(key);
    }
}

fn fill_value(record: u64, value: &mut [u8]) {
    debug_assert_eq!(value.len(), SORT_VALUE_BYTES);
    value[..2].copy_from_slice(b"  ");
    let number = record as u128;
    for (position, digit) in value[2..34].iter_mut().enumerate() {
        *digit = HEX[((number >> (4 * (31 - position))) & 0xf) as usize];
    }
    value[34..36].copy_from_slice(b"  ");
    for (group, filler) in value[36..88].chunks_exact_mut(4).enumerate() {
        filler.fill(HEX[((record as usize) + group) % 16]);
    }
    value[88..90].copy_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(records: u64, seed: u64, ascii_keys: bool) -> GensortArgs {
        GensortArgs {
            records,
            out: None,
            seed,
            ascii_keys,
            quiet: true,
        }
    }

    fn generated(args: &GensortArgs) -> Vec<u8> {
        let mut out = Vec::new();
        let bytes = generate(args, &mut out, |_| {}).unwrap();
        assert_eq!(bytes, out.len() as u64);
        out
    }

    #[test]
    fn records_have_the_gensort_ascii_value_layout() {
        let out = generated(&args(RECORDS_PER_CHUNK as u64 + 5, 7, false));
        assert_eq!(out.len(), (RECORDS_PER_CHUNK + 5) * SORT_RECORD_BYTES);
        let record = &out[3 * SORT_RECORD_BYTES..4 * SORT_RECORD_BYTES];
        let value = &record[SORT_KEY_BYTES..];
        assert_eq!(&value[..36], b"  00000000000000000000000000000003  ");
        assert_eq!(&value[36..44], b"33334444");
        assert_eq!(&value[88..], b"\r\n");
    }

    #[test]
    fn seeds_decide_the_keys() {
        let first = generated(&args(100, 1, false));
        assert_eq!(first, generated(&args(100, 1, false)), "deterministic");
        assert_ne!(first, generated(&args(100, 2, false)));
        let keys: std::collections::HashSet<&[u8]> = first
            .chunks_exact(SORT_RECORD_BYTES)
            .map(|record| &record[..SORT_KEY_BYTES])
            .collect();
        assert_eq!(keys.len(), 100, "random 10-byte keys do not collide");
        let ascii = generated(&args(100, 1, true));
        assert!(ascii
            .chunks_exact(SORT_RECORD_BYTES)
            .all(|record| record[..SORT_KEY_BYTES]
                .iter()
                .all(|byte| (b' '..=b'~').contains(byte))));
    }
}
