//! Mirrors liblzf 3.6 as Redis 7.0.15 uses it (`src/lzf_c.c`, `src/lzf_d.c`,
//! `src/lzfP.h`; Debian's redis-server links the system liblzf 3.6, built with
//! the same settings): HLOG 16, VERY_FAST 1, ULTRA_FAST 0, INIT_HTAB 0,
//! CHECK_INPUT 1.
//!
//! Compressed format, a sequence of:
//!   000LLLLL <L+1 bytes>          literal run of 1..=32 bytes
//!   LLLooooo oooooooo             back reference, length L+2 (L = 1..=6),
//!                                 distance o+1 (1..=8192)
//!   111ooooo LLLLLLLL oooooooo    back reference, length L+9, distance o+1
//!
//! `compress` replays the C compressor step by step: the same hash (the
//! VERY_FAST `IDX`: ((hval >> 8) - hval * 5) & 0xffff on the rolling 32-bit
//! `hval` of the last four bytes), the same match-length loop (including
//! its 16-step unrolled part, which can end a match two bytes later than the
//! plain loop would), the same VERY_FAST re-hashing of the two bytes before the
//! next position, and the same output-space checks, so it returns the same
//! bytes and gives up (`None`, C's 0) at the same point for the same `out_len`.
//!
//! Documented difference: C leaves its 64K-slot hash table uninitialised
//! (INIT_HTAB 0), so a slot not yet written during the current call holds
//! whatever an earlier call left there. Such a stale slot can only produce a
//! match that is verified byte-for-byte (so the output still decompresses to
//! the same data) but may differ from the clean-table choice. This file always
//! starts from an empty table, which is what Redis produces whenever no stale
//! slot happens to pass the checks (the overwhelmingly common case, and always
//! when the same data is compressed twice in a row).
//!
//! `decompress` follows lzf_d.c with CHECK_INPUT, but returns an error instead
//! of a short length and requires the output to be exactly `out_len` bytes,
//! which is the check Redis applies after calling it.

/// log2 of the number of hash table slots (liblzf's HLOG as built for Redis).
const HASH_LOG: u32 = 16;
const HASH_SLOTS: usize = 1 << HASH_LOG;
/// Longest literal run one control byte can carry.
const MAX_LITERAL_BYTES: usize = 1 << 5;
/// Farthest back reference distance.
const MAX_DISTANCE_BYTES: usize = 1 << 13;
/// Longest back reference (in "len" units, bytes minus 2 plus 2).
const MAX_REF_BYTES: usize = (1 << 8) + (1 << 3);

/// Why `decompress` rejected its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LzfError {
    /// The stream would write more than the declared output length.
    OutputOverflow,
    /// A literal run or back reference runs past the end of the input.
    TruncatedInput,
    /// A back reference points before the start of the output.
    BadBackReference,
    /// The stream ended before producing the declared output length.
    ShortOutput,
}

fn hash_first(data: &[u8], pos: usize) -> u32 {
    (u32::from(data[pos]) << 8) | u32::from(data[pos + 1])
}

fn hash_next(hval: u32, data: &[u8], pos: usize) -> u32 {
    (hval << 8) | u32::from(data[pos + 2])
}

/// liblzf's `IDX` in its VERY_FAST variant (no `h ^ (h << 5)` term).
fn hash_slot(hval: u32) -> usize {
    let shifted = hval >> (3 * 8 - HASH_LOG);
    (shifted.wrapping_sub(hval.wrapping_mul(5)) as usize) & (HASH_SLOTS - 1)
}

/// Compresses `input` the way `lzf_compress(input, len, out, out_len)` does.
/// Returns `None` where C returns 0 (empty input, or output would not fit in
/// `out_len` bytes).
pub fn compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    if input.is_empty() || out_len == 0 {
        return None;
    }
    Compressor::new(input, out_len).run()
}

struct Compressor<'a> {
    input: &'a [u8],
    out: Vec<u8>,
    out_len: usize,
    /// Output index one past the last byte written.
    op: usize,
    /// Bytes in the literal run being built (its control byte sits at
    /// `op - lit - 1`).
    lit: usize,
    /// Input position of the last write to each slot (0 = never; position
    /// 0 can never be a match source in liblzf either).
    table: Vec<u32>,
}

impl<'a> Compressor<'a> {
    fn new(input: &'a [u8], out_len: usize) -> Self {
        Compressor {
            input,
            // Slack so the C code's unchecked writes just past `out_len`
            // (before it notices and returns 0) stay in bounds.
            out: vec![0; out_len + 8],
            out_len,
            op: 1,
            lit: 0,
            table: vec![0; HASH_SLOTS],
        }
    }

    fn run(mut self) -> Option<Vec<u8>> {
        let in_len = self.input.len();
        let mut ip = 0usize;
        let mut hval = if in_len >= 2 {
            hash_first(self.input, 0)
        } else {
            0
        };
        while ip + 2 < in_len {
            hval = hash_next(hval, self.input, ip);
            let slot = hash_slot(hval);
            let ref_pos = self.table[slot] as usize;
            self.table[slot] = ip as u32;
            if self.is_match(ref_pos, ip) {
                let distance = ip - ref_pos - 1;
                let len = self.match_len(ref_pos, ip);
                if !self.emit_match(distance, len) {
                    return None;
                }
                ip += len;
                if ip + 2 >= in_len {
                    break;
                }
                ip -= 2;
                hval = hash_first(self.input, ip);
                hval = hash_next(hval, self.input, ip);
                self.table[hash_slot(hval)] = ip as u32;
                ip += 1;
                hval = hash_next(hval, self.input, ip);
                self.table[hash_slot(hval)] = ip as u32;
                ip += 1;
            } else {
                if self.op >= self.out_len {
                    return None;
                }
                self.push_literal(self.input[ip]);
                ip += 1;
            }
        }
        if self.op + 3 > self.out_len {
            return None;
        }
        while ip < in_len {
            self.push_literal(self.input[ip]);
            ip += 1;
        }
        self.close_run();
        self.out.truncate(self.op);
        Some(self.out)
    }

    fn is_match(&self, ref_pos: usize, ip: usize) -> bool {
        let data = self.input;
        ref_pos < ip
            && ip - ref_pos - 1 < MAX_DISTANCE_BYTES
            && ref_pos > 0
            && data[ref_pos + 2] == data[ip + 2]
            && data[ref_pos] == data[ip]
            && data[ref_pos + 1] == data[ip + 1]
    }

    /// Number of matching bytes as the C loop counts them (>= 3).
    fn match_len(&self, ref_pos: usize, ip: usize) -> usize {
        let data = self.input;
        let mut len = 2usize;
        let max_len = (data.len() - ip - len).min(MAX_REF_BYTES);
        if max_len > 16 {
            for _ in 0..16 {
                len += 1;
                if data[ref_pos + len] != data[ip + len] {
                    return len;
                }
            }
        }
        loop {
            len += 1;
            if !(len < max_len && data[ref_pos + len] == data[ip + len]) {
                return len;
            }
        }
    }

    /// Writes a back reference of `len` bytes; `false` means "does not fit"
    /// (C returns 0).
    fn emit_match(&mut self, distance: usize, len: usize) -> bool {
        let undo = usize::from(self.lit == 0);
        if self.op + 3 + 1 >= self.out_len && self.op - undo + 3 + 1 >= self.out_len {
            return false;
        }
        self.close_run();
        let code = len - 2; // "len" in the C code: bytes - 2 after the loop.
        let high = (distance >> 8) as u8;
        if code < 7 {
            self.put(high + ((code as u8) << 5));
        } else {
            self.put(high + (7 << 5));
            self.put((code - 7) as u8);
        }
        self.put(distance as u8);
        self.lit = 0;
        self.op += 1; // start a new literal run
        true
    }

    fn put(&mut self, byte: u8) {
        self.out[self.op] = byte;
        self.op += 1;
    }

    fn push_literal(&mut self, byte: u8) {
        self.lit += 1;
        self.put(byte);
        if self.lit == MAX_LITERAL_BYTES {
            self.close_run();
            self.lit = 0;
            self.op += 1;
        }
    }

    /// Stores the pending run's control byte; drops the run if it is empty
    /// (C: `op[-lit-1] = lit-1; op -= !lit;`).
    fn close_run(&mut self) {
        self.out[self.op - self.lit - 1] = (self.lit as u8).wrapping_sub(1);
        if self.lit == 0 {
            self.op -= 1;
        }
    }
}

/// Decompresses `input`, which must expand to exactly `out_len` bytes.
/// Never allocates more than `out_len` bytes, and callers bound `out_len`.
pub fn decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, LzfError> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut ip = 0usize;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < MAX_LITERAL_BYTES {
            ip = copy_literal(input, ip, ctrl + 1, &mut out, out_len)?;
        } else {
            ip = copy_back_reference(input, ip, ctrl, &mut out, out_len)?;
        }
    }
    if out.len() != out_len {
        return Err(LzfError::ShortOutput);
    }
    Ok(out)
}

fn copy_literal(
    input: &[u8],
    ip: usize,
    run_len: usize,
    out: &mut Vec<u8>,
    out_len: usize,
) -> Result<usize, LzfError> {
    if out.len() + run_len > out_len {
        return Err(LzfError::OutputOverflow);
    }
    let end = ip + run_len;
    if end > input.len() {
        return Err(LzfError::TruncatedInput);
    }
    out.extend_from_slice(&input[ip..end]);
    Ok(end)
}

fn copy_back_reference(
    input: &[u8],
    mut ip: usize,
    ctrl: usize,
    out: &mut Vec<u8>,
    out_len: usize,
) -> Result<usize, LzfError> {
    let mut len = ctrl >> 5;
    let mut back = ((ctrl & 0x1f) << 8) + 1;
    if ip >= input.len() {
        return Err(LzfError::TruncatedInput);
    }
    if len == 7 {
        len += usize::from(input[ip]);
        ip += 1;
        if ip >= input.len() {
            return Err(LzfError::TruncatedInput);
        }
    }
    back += usize::from(input[ip]);
    ip += 1;
    let copy_len = len + 2;
    if out.len() + copy_len > out_len {
        return Err(LzfError::OutputOverflow);
    }
    if back > out.len() {
        return Err(LzfError::BadBackReference);
    }
    let start = out.len() - back;
    for offset in 0..copy_len {
        let byte = out[start + offset];
        out.push(byte);
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(data: &[u8]) {
        if let Some(packed) = compress(data, data.len() + 64) {
            assert_eq!(decompress(&packed, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn repetitive_input_compresses_and_round_trips() {
        let data = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec();
        let packed = compress(&data, data.len() - 4).expect("compressible");
        assert!(packed.len() < data.len());
        assert_eq!(decompress(&packed, data.len()).unwrap(), data);
    }

    #[test]
    fn literal_only_input_does_not_fit_in_smaller_buffer() {
        let data: Vec<u8> = (0u8..64).collect();
        assert_eq!(compress(&data, data.len() - 4), None);
        round_trip(&data);
    }

    #[test]
    fn tiny_inputs_round_trip() {
        for len in 1..8 {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            round_trip(&data);
        }
    }

    #[test]
    fn decompress_rejects_bad_streams() {
        assert_eq!(decompress(&[5, b'a'], 6), Err(LzfError::TruncatedInput));
        assert_eq!(decompress(&[0, b'a'], 0), Err(LzfError::OutputOverflow));
        assert_eq!(
            decompress(&[0x20, 0x00], 3),
            Err(LzfError::BadBackReference)
        );
        assert_eq!(
            decompress(&[0, b'a', 0x20], 4),
            Err(LzfError::TruncatedInput)
        );
        assert_eq!(decompress(&[0, b'a'], 2), Err(LzfError::ShortOutput));
    }
}
