//! HyperLogLog in Redis 7.0's exact representation, so a value's bytes move between fallow and Redis (GET
//! on one, SET on the other) and count the same. An HLL is a plain string:
//!
//! * a 16-byte header: the magic `HYLL`, an encoding byte (0 dense, 1 sparse), three unused bytes, and the
//!   cached cardinality as 8 little-endian bytes whose top bit (bit 7 of byte 15) marks it stale;
//! * 16384 registers (the low 14 bits of an element's 64-bit MurmurHash64A, seed 0xadc83b19, pick one;
//!   the register keeps the longest run of zeros plus one seen in the other 50 bits, 1..=51), either
//!   * dense: 6 bits each, packed from the least significant bit of each byte up, 12288 bytes (the value is
//!     exactly 12304 bytes long), or
//!   * sparse: run-length opcodes, `00xxxxxx` ZERO (1..64 zero registers), `01xxxxxx yyyyyyyy` XZERO
//!     (1..16384 zero registers) and `1vvvvvxx` VAL (1..4 registers of value 1..32). A new HLL is one XZERO
//!     covering every register (18 bytes). A sparse HLL turns dense, for good, when a register needs a
//!     value over 32 or an update would grow it past `hll-sparse-max-bytes` (3000 by default).
//!
//! Updates follow Redis's in-place edits opcode for opcode (splits, then merging of equal neighbouring VALs),
//! so the same PFADDs leave the same bytes. The cardinality is Ertl's improved estimator on the register
//! histogram, as Redis 7 computes it (`tau`, `sigma`). Values are untrusted (any string can be SET): sparse
//! opcodes are checked against the register count before any register is touched, a byte past the end
//! reads as 0 (where Redis reads its strings' terminating NUL), and a sparse HLL whose runs do not cover
//! exactly 16384 registers is `Corrupt` (Redis's `INVALIDOBJ`).

/// Registers per HLL (2^14), and the index bits of the hash.
pub const REGISTERS: usize = 1 << INDEX_BITS;
const INDEX_BITS: u32 = 14;
/// Hash bits left for the run of zeros.
const RUN_BITS: usize = 64 - INDEX_BITS as usize;
const REGISTER_BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << REGISTER_BITS) - 1;
pub const HEADER_BYTES: usize = 16;
/// Length of a dense HLL value: the header and 16384 packed 6-bit registers.
pub const DENSE_BYTES: usize = HEADER_BYTES + (REGISTERS * REGISTER_BITS).div_ceil(8);
/// Redis's `hll-sparse-max-bytes` default.
pub const SPARSE_BYTES_MAX_DEFAULT: usize = 3000;
const MAGIC: &[u8; 4] = b"HYLL";
const ENCODING_AT: usize = 4;
const CARDINALITY_AT: usize = 8;
/// Bit 7 of the cached cardinality's last byte: the cache is stale.
const STALE_BIT: u8 = 0x80;
const HASH_SEED: u64 = 0xadc8_3b19;

const XZERO_BIT: u8 = 0x40;
const VAL_BIT: u8 = 0x80;
const VAL_VALUE_MAX: u8 = 32;
const VAL_RUN_MAX: usize = 4;
const ZERO_RUN_MAX: usize = 64;

/// Dense or sparse, from the header's encoding byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Dense,
    Sparse,
}

impl Encoding {
    /// The name PFDEBUG ENCODING answers.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Dense => "dense",
            Encoding::Sparse => "sparse",
        }
    }
}

/// The string is not an HLL: too short, no `HYLL` magic, an unknown encoding, or a dense one of the wrong
/// length (Redis: `WRONGTYPE Key is not a valid HyperLogLog string value.`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotHll;

/// A sparse HLL whose opcodes do not cover exactly the 16384 registers (Redis: `INVALIDOBJ Corrupted HLL
/// object detected`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt;

/// Checks that `value` can be used as an HLL (Redis's isHLLObjectOrReply) and returns its encoding. Sparse
/// opcodes are checked later, by each operation that walks them.
pub fn encoding_of(value: &[u8]) -> Result<Encoding, NotHll> {
    if value.len() < HEADER_BYTES || &value[..4] != MAGIC {
        return Err(NotHll);
    }
    match value[ENCODING_AT] {
        0 if value.len() == DENSE_BYTES => Ok(Encoding::Dense),
        1 => Ok(Encoding::Sparse),
        _ => Err(NotHll),
    }
}

/// A new, empty HLL: sparse, one XZERO opcode, cardinality 0 cached.
pub fn new_sparse() -> Vec<u8> {
    let mut value = vec![0u8; HEADER_BYTES];
    value[..4].copy_from_slice(MAGIC);
    value[ENCODING_AT] = 1;
    push_xzero(&mut value, REGISTERS);
    value
}

/// Redis's MurmurHash64A (MurmurHash2, 64-bit), reading 8-byte blocks little-endian.
pub fn murmur_hash64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut hash = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for block in blocks.by_ref() {
        let mut k = u64::from_le_bytes(block.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        hash ^= k;
        hash = hash.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (index, &byte) in tail.iter().enumerate() {
            hash ^= (byte as u64) << (8 * index);
        }
        hash = hash.wrapping_mul(M);
    }
    hash ^= hash >> R;
    hash = hash.wrapping_mul(M);
    hash ^= hash >> R;
    hash
}

/// The register an element lands in and the value it offers: its hash's run of zeros above the index
/// bits, plus one (1..=51).
pub fn element_register(element: &[u8]) -> (usize, u8) {
    let hash = murmur_hash64a(element, HASH_SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    // The sentinel bit bounds the run at RUN_BITS zeros.
    let run = (hash >> INDEX_BITS) | (1 << RUN_BITS);
    (index, run.trailing_zeros() as u8 + 1)
}

// ----- the cached cardinality -------------------------------------------------------------------------

/// The cached cardinality, None when it is stale.
pub fn cached_cardinality(hll: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = hll[CARDINALITY_AT..HEADER_BYTES]
        .try_into()
        .expect("8 bytes");
    (bytes[7] & STALE_BIT == 0).then(|| u64::from_le_bytes(bytes))
}

/// Caches `cardinality` in the header.
pub fn store_cardinality(hll: &mut [u8], cardinality: u64) {
    hll[CARDINALITY_AT..HEADER_BYTES].copy_from_slice(&cardinality.to_le_bytes());
}

/// Marks the cached cardinality stale (only its top bit changes, as in Redis).
pub fn invalidate_cache(hll: &mut [u8]) {
    hll[HEADER_BYTES - 1] |= STALE_BIT;
}

// ----- dense registers ----------------------------------------------------------------------------------

/// Register `index` of packed 6-bit registers.
fn dense_get(registers: &[u8], index: usize) -> u8 {
    let byte = index * REGISTER_BITS / 8;
    let shift = (index * REGISTER_BITS) & 7;
    let low = registers[byte] as u16;
    let high = registers.get(byte + 1).copied().unwrap_or(0) as u16;
    (((low >> shift) | (high << (8 - shift))) as u8) & REGISTER_MAX
}

/// Sets register `index` of packed 6-bit registers to `value` (at most 63).
fn dense_put(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * REGISTER_BITS / 8;
    let shift = (index * REGISTER_BITS) & 7;
    let value = value as u16;
    let mask = REGISTER_MAX as u16;
    registers[byte] &= !((mask << shift) as u8);
    registers[byte] |= (value << shift) as u8;
    // The last register ends inside its byte: nothing spills into the next.
    if let Some(next) = registers.get_mut(byte + 1) {
        *next &= !((mask >> (8 - shift)) as u8);
        *next |= (value >> (8 - shift)) as u8;
    }
}

/// Raises a dense register to `count`; whether it changed.
fn dense_raise(hll: &mut [u8], index: usize, count: u8) -> bool {
    let registers = &mut hll[HEADER_BYTES..];
    if count > dense_get(registers, index) {
        dense_put(registers, index, count);
        true
    } else {
        false
    }
}

// ----- sparse opcodes -----------------------------------------------------------------------------------

/// One decoded sparse opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opcode {
    Zero(usize),
    XZero(usize),
    Val { value: u8, run: usize },
}

impl Opcode {
    /// The opcode at `at` (a byte past the end reads as 0).
    fn at(hll: &[u8], at: usize) -> Opcode {
        let byte = hll[at];
        if byte & VAL_BIT != 0 {
            Opcode::Val {
                value: ((byte >> 2) & 0x1f) + 1,
                run: (byte & 0x3) as usize + 1,
            }
        } else if byte & XZERO_BIT != 0 {
            let low = hll.get(at + 1).copied().unwrap_or(0) as usize;
            Opcode::XZero((((byte & 0x3f) as usize) << 8 | low) + 1)
        } else {
            Opcode::Zero((byte & 0x3f) as usize + 1)
        }
    }

    fn run(self) -> usize {
        match self {
            Opcode::Zero(run) | Opcode::XZero(run) | Opcode::Val { run, .. } => run,
        }
    }

    fn bytes(self) -> usize {
        match self {
            Opcode::XZero(_) => 2,
            _ => 1,
        }
    }
}

fn val_byte(value: u8, run: usize) -> u8 {
    VAL_BIT | (value - 1) << 2 | (run - 1) as u8
}

fn push_xzero(out: &mut Vec<u8>, run: usize) {
    let encoded = run - 1;
    out.extend_from_slice(&[(encoded >> 8) as u8 | XZERO_BIT, encoded as u8]);
}

/// A run of zero registers as one opcode: ZERO up to 64, XZERO beyond.
fn push_zeros(out: &mut Vec<u8>, run: usize) {
    if run > ZERO_RUN_MAX {
        push_xzero(out, run);
    } else {
        out.push((run - 1) as u8);
    }
}

/// Walks the sparse opcodes, calling `visit(first register, value, run)` for each VAL run that stays
/// within the registers; Err when a VAL run would pass the last register or the runs do not add up to
/// exactly 16384 (zero runs are only counted, so nothing is written for them).
fn walk_sparse(hll: &[u8], mut visit: impl FnMut(usize, u8, usize)) -> Result<(), Corrupt> {
    let mut index = 0usize;
    let mut at = HEADER_BYTES;
    while at < hll.len() {
        let opcode = Opcode::at(hll, at);
        if let Opcode::Val { value, run } = opcode {
            if index + run > REGISTERS {
                return Err(Corrupt);
            }
            visit(index, value, run);
        }
        index += opcode.run();
        at += opcode.bytes();
    }
    if index == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// Rewrites a sparse HLL as dense (Redis's hllSparseToDense): the header (cache included) is kept with the
/// encoding byte changed. Ok(false) when it was dense already.
pub fn to_dense(hll: &mut Vec<u8>) -> Result<bool, Corrupt> {
    if hll[ENCODING_AT] == 0 {
        return Ok(false);
    }
    let mut dense = vec![0u8; DENSE_BYTES];
    dense[..HEADER_BYTES].copy_from_slice(&hll[..HEADER_BYTES]);
    dense[ENCODING_AT] = 0;
    walk_sparse(hll, |first, value, run| {
        (first..first + run).for_each(|index| dense_put(&mut dense[HEADER_BYTES..], index, value))
    })?;
    *hll = dense;
    Ok(true)
}

/// Where the sparse opcode covering register `index` starts, with the register its run starts at and
/// the opcode before it. None when the opcodes end before `index`.
fn find_opcode(hll: &[u8], index: usize) -> Option<(usize, usize, Option<usize>)> {
    let (mut at, mut first, mut previous) = (HEADER_BYTES, 0usize, None);
    while at < hll.len() {
        let opcode = Opcode::at(hll, at);
        if index < first + opcode.run() {
            return Some((at, first, previous));
        }
        previous = Some(at);
        at += opcode.bytes();
        first += opcode.run();
    }
    None
}

/// The opcodes that replace `opcode` (covering registers from `first`) once register `index` holds
/// `count`: the part before, a VAL of one register, the part after. At most 5 bytes.
fn split_opcode(opcode: Opcode, first: usize, index: usize, count: u8) -> Vec<u8> {
    let last = first + opcode.run() - 1;
    let mut sequence = Vec::with_capacity(5);
    match opcode {
        Opcode::Zero(_) | Opcode::XZero(_) => {
            if index != first {
                push_zeros(&mut sequence, index - first);
            }
            sequence.push(val_byte(count, 1));
            if index != last {
                push_zeros(&mut sequence, last - index);
            }
        }
        Opcode::Val { value, .. } => {
            if index != first {
                sequence.push(val_byte(value, index - first));
            }
            sequence.push(val_byte(count, 1));
            if index != last {
                sequence.push(val_byte(value, last - index));
            }
        }
    }
    sequence
}

/// Merges neighbouring VAL opcodes of equal value whose runs fit one opcode, scanning up to 5 opcodes
/// from `from` (Redis's step 4 of hllSparseSet).
fn merge_vals(hll: &mut Vec<u8>, from: usize) {
    let mut at = from;
    let mut scans_left = 5;
    while at < hll.len() && scans_left > 0 {
        scans_left -= 1;
        let opcode = Opcode::at(hll, at);
        let Opcode::Val { value, run } = opcode else {
            at += opcode.bytes();
            continue;
        };
        if at + 1 < hll.len() {
            if let Opcode::Val {
                value: next_value,
                run: next_run,
            } = Opcode::at(hll, at + 1)
            {
                if next_value == value && run + next_run <= VAL_RUN_MAX {
                    hll[at + 1] = val_byte(value, run + next_run);
                    hll.remove(at);
                    // Try the merged opcode with its right neighbour too.
                    continue;
                }
            }
        }
        at += 1;
    }
}

/// Raises sparse register `index` to `count` (Redis's hllSparseSet); may promote to dense.
fn sparse_raise(
    hll: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_bytes_max: usize,
) -> Result<bool, Corrupt> {
    if count > VAL_VALUE_MAX {
        return promote_and_raise(hll, index, count);
    }
    let (at, first, previous) = find_opcode(hll, index).ok_or(Corrupt)?;
    let opcode = Opcode::at(hll, at);
    match opcode {
        Opcode::Val { value, .. } if value >= count => return Ok(false),
        Opcode::Val { run: 1, .. } | Opcode::Zero(1) => hll[at] = val_byte(count, 1),
        _ => {
            let sequence = split_opcode(opcode, first, index, count);
            let new_len = (hll.len() + sequence.len()).saturating_sub(opcode.bytes());
            if new_len > hll.len() && new_len > sparse_bytes_max {
                return promote_and_raise(hll, index, count);
            }
            let replaced_end = (at + opcode.bytes()).min(hll.len());
            hll.splice(at..replaced_end, sequence);
            // An XZERO cut short by the end of the string grows by one byte less, as in Redis.
            hll.truncate(new_len);
        }
    }
    merge_vals(hll, previous.unwrap_or(HEADER_BYTES));
    invalidate_cache(hll);
    Ok(true)
}

fn promote_and_raise(hll: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(hll)?;
    Ok(dense_raise(hll, index, count))
}

/// Raises register `index` to `count` if it is lower (PFMERGE's writes); whether it changed. A sparse
/// HLL turns dense as Redis's does.
pub fn raise_register(
    hll: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_bytes_max: usize,
) -> Result<bool, Corrupt> {
    if count == 0 {
        // Every register is at least 0; a sparse opcode cannot hold a VAL of 0.
        Ok(false)
    } else if hll[ENCODING_AT] == 0 {
        Ok(dense_raise(hll, index, count))
    } else {
        sparse_raise(hll, index, count, sparse_bytes_max)
    }
}

/// PFADD of one element to a checked HLL (`encoding_of`): whether a register changed. The cache is
/// left for the caller to invalidate once all elements are in, as Redis does.
pub fn add(hll: &mut Vec<u8>, element: &[u8], sparse_bytes_max: usize) -> Result<bool, Corrupt> {
    let (index, count) = element_register(element);
    raise_register(hll, index, count, sparse_bytes_max)
}

// ----- counting -----------------------------------------------------------------------------------------

/// How many registers hold each value (0..=63).
type Histogram = [u64; 64];

fn dense_histogram(hll: &[u8]) -> Histogram {
    let mut histogram = [0u64; 64];
    let registers = &hll[HEADER_BYTES..];
    (0..REGISTERS).for_each(|index| histogram[dense_get(registers, index) as usize] += 1);
    histogram
}

/// The histogram of a sparse HLL; Err when its runs do not add up to exactly 16384 registers.
fn sparse_histogram(hll: &[u8]) -> Result<Histogram, Corrupt> {
    let mut histogram = [0u64; 64];
    let (mut index, mut at) = (0usize, HEADER_BYTES);
    while at < hll.len() {
        let opcode = Opcode::at(hll, at);
        let value = match opcode {
            Opcode::Val { value, .. } => value,
            _ => 0,
        };
        histogram[value as usize] += opcode.run() as u64;
        index += opcode.run();
        at += opcode.bytes();
    }
    if index == REGISTERS {
        Ok(histogram)
    } else {
        Err(Corrupt)
    }
}

/// Ertl's sigma (arXiv:1702.01284), as Redis computes it.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    // The series converges (or reaches infinity) in well under a hundred steps; the bound only guards
    // against a value no histogram can give.
    for _ in 0..1000 {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            break;
        }
    }
    z
}

/// Ertl's tau (arXiv:1702.01284), as Redis computes it.
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    for _ in 0..1000 {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if previous == z {
            break;
        }
    }
    z / 3.0
}

/// Redis 7's cardinality estimate from a register histogram (hllCount).
fn estimate(histogram: &Histogram) -> u64 {
    const ALPHA_INF: f64 = 0.721_347_520_444_481_7; // 0.5 / ln(2)
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histogram[RUN_BITS + 1] as f64) / m);
    for count in histogram[1..=RUN_BITS].iter().rev() {
        z += *count as f64;
        z *= 0.5;
    }
    z += m * sigma(histogram[0] as f64 / m);
    let rounded = (ALPHA_INF * m * m / z).round();
    // Registers no hash can give (a crafted dense value with every register at 63) make z zero: Redis's
    // llroundl of infinity yields LLONG_MIN on x86-64, which PFCOUNT answers; so does this.
    if rounded.is_finite() && rounded < i64::MAX as f64 {
        rounded as u64
    } else {
        1 << 63
    }
}

/// The estimated cardinality of a checked HLL, computed from its registers (the cache is not read).
pub fn cardinality(hll: &[u8]) -> Result<u64, Corrupt> {
    let histogram = if hll[ENCODING_AT] == 0 {
        dense_histogram(hll)
    } else {
        sparse_histogram(hll)?
    };
    Ok(estimate(&histogram))
}

/// One byte per register: the union of several HLLs (PFCOUNT of many keys, PFMERGE).
pub struct Registers {
    values: Vec<u8>,
}

impl Default for Registers {
    fn default() -> Self {
        Registers::new()
    }
}

impl Registers {
    pub fn new() -> Registers {
        Registers {
            values: vec![0; REGISTERS],
        }
    }

    /// Takes the register-wise maximum with a checked HLL (Redis's hllMerge).
    pub fn merge(&mut self, hll: &[u8]) -> Result<(), Corrupt> {
        if hll[ENCODING_AT] == 0 {
            let registers = &hll[HEADER_BYTES..];
            for (index, max) in self.values.iter_mut().enumerate() {
                *max = (*max).max(dense_get(registers, index));
            }
            return Ok(());
        }
        let values = &mut self.values;
        walk_sparse(hll, |first, value, run| {
            for max in &mut values[first..first + run] {
                *max = (*max).max(value);
            }
        })
    }

    /// Each register's value, by index.
    pub fn values(&self) -> &[u8] {
        &self.values
    }

    /// The estimated cardinality of the union.
    pub fn cardinality(&self) -> u64 {
        let mut histogram = [0u64; 64];
        self.values
            .iter()
            .for_each(|&value| histogram[value as usize] += 1);
        estimate(&histogram)
    }
}

// ----- debugging (PFDEBUG, PFSELFTEST) ------------------------------------------------------------------

/// The registers of a dense HLL (PFDEBUG GETREG, after `to_dense`).
pub fn dense_registers(hll: &[u8]) -> Vec<u8> {
    let registers = &hll[HEADER_BYTES..];
    (0..REGISTERS)
        .map(|index| dense_get(registers, index))
        .collect()
}

/// The sparse opcodes as PFDEBUG DECODE prints them: `z:N`, `Z:N` and `v:value,run`, space-separated.
pub fn decode_sparse(hll: &[u8]) -> String {
    let mut words = Vec::new();
    let mut at = HEADER_BYTES;
    while at < hll.len() {
        let opcode = Opcode::at(hll, at);
        words.push(match opcode {
            Opcode::Zero(run) => format!("z:{run}"),
            Opcode::XZero(run) => format!("Z:{run}"),
            Opcode::Val { value, run } => format!("v:{value},{run}"),
        });
        at += opcode.bytes();
    }
    words.join(" ")
}

/// PFSELFTEST: packed registers keep each value without touching their neighbours, and a sparse and a
/// dense HLL fed the same `elements` distinct elements agree at every power of ten, within six standard
/// errors of the truth. Err names the first failure, as Redis's TESTFAILED replies do.
pub fn self_test(elements: u64, seed: u64) -> Result<(), String> {
    let mut rng = seed | 1;
    let mut next = || {
        // xorshift64: any spread of values serves.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut dense = vec![0u8; DENSE_BYTES - HEADER_BYTES];
    let mut expected = vec![0u8; REGISTERS];
    for _ in 0..10 {
        for (index, value) in expected.iter_mut().enumerate() {
            *value = (next() as u8) & REGISTER_MAX;
            dense_put(&mut dense, index, *value);
        }
        for (index, &value) in expected.iter().enumerate() {
            let got = dense_get(&dense, index);
            if got != value {
                return Err(format!(
                    "TESTFAILED Register {index} should be {value} but is {got}"
                ));
            }
        }
    }
    let mut dense = new_sparse();
    to_dense(&mut dense).expect("a new HLL is valid");
    let mut sparse = new_sparse();
    let relative_error = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint = 1u64;
    let base = next();
    for element in 1..=elements {
        let bytes = (element ^ base).to_le_bytes();
        add(&mut dense, &bytes, SPARSE_BYTES_MAX_DEFAULT).expect("valid");
        add(&mut sparse, &bytes, SPARSE_BYTES_MAX_DEFAULT).expect("valid");
        if element != checkpoint {
            continue;
        }
        if element < (SPARSE_BYTES_MAX_DEFAULT / 2) as u64
            && encoding_of(&sparse) != Ok(Encoding::Sparse)
        {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let estimate = cardinality(&dense).expect("valid");
        if cardinality(&sparse) != Ok(estimate) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let error = checkpoint.abs_diff(estimate);
        let error_max = if element == 10 {
            1
        } else {
            (relative_error * 6.0 * checkpoint as f64).ceil() as u64
        };
        if error > error_max {
            return Err(format!(
                "TESTFAILED Too big error. card:{checkpoint} abserr:{error}"
            ));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hll_of(elements: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
        let mut hll = new_sparse();
        for element in elements {
            add(&mut hll, &element, SPARSE_BYTES_MAX_DEFAULT).unwrap();
        }
        hll
    }

    fn numbered(range: std::ops::Range<u32>) -> impl Iterator<Item = Vec<u8>> {
        range.map(|n| format!("element:{n}").into_bytes())
    }

    #[test]
    fn elements_land_where_redis_puts_them() {
        // Register and value of each element as PFDEBUG DECODE shows them on redis-server 7.0.15.
        let redis = [
            (&b"a"[..], 12711, 2),
            (b"hello", 9216, 1),
            (b"foobar", 1910, 4),
            (b"12345678", 10579, 3),
            (b"element:1", 1167, 1),
        ];
        for (element, index, count) in redis {
            assert_eq!(element_register(element), (index, count), "{element:?}");
        }
        let hll = hll_of([b"a".to_vec()]);
        assert_eq!(decode_sparse(&hll), "Z:12711 v:2,1 Z:3672");
    }

    #[test]
    fn a_new_hll_is_one_xzero_with_a_zero_count() {
        let hll = new_sparse();
        assert_eq!(hll, b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert_eq!(encoding_of(&hll), Ok(Encoding::Sparse));
        assert_eq!(cached_cardinality(&hll), Some(0));
        assert_eq!(cardinality(&hll), Ok(0));
        assert_eq!(decode_sparse(&hll), "Z:16384");
    }

    #[test]
    fn strings_that_are_not_hlls_are_refused() {
        assert_eq!(encoding_of(b"HYLL"), Err(NotHll));
        assert_eq!(
            encoding_of(b"hyll\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"),
            Err(NotHll)
        );
        assert_eq!(encoding_of(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\0"), Err(NotHll));
        assert_eq!(
            encoding_of(b"HYLL\0\0\0\0\0\0\0\0\0\0\0\0\0"),
            Err(NotHll),
            "dense must be 12304 bytes"
        );
        let mut dense = new_sparse();
        assert_eq!(to_dense(&mut dense), Ok(true));
        assert_eq!(dense.len(), DENSE_BYTES);
        assert_eq!(encoding_of(&dense), Ok(Encoding::Dense));
        assert_eq!(to_dense(&mut dense), Ok(false));
    }

    #[test]
    fn cache_invalidation_sets_only_the_top_bit() {
        let mut hll = new_sparse();
        store_cardinality(&mut hll, 0x0102);
        invalidate_cache(&mut hll);
        assert_eq!(cached_cardinality(&hll), None);
        assert_eq!(&hll[8..16], &[2, 1, 0, 0, 0, 0, 0, 0x80]);
    }

    #[test]
    fn counts_are_close_and_sparse_turns_dense_past_the_limit() {
        let mut hll = new_sparse();
        let mut promoted_at = None;
        for (n, element) in numbered(0..20_000).enumerate() {
            add(&mut hll, &element, SPARSE_BYTES_MAX_DEFAULT).unwrap();
            if promoted_at.is_none() && encoding_of(&hll) == Ok(Encoding::Dense) {
                promoted_at = Some(n);
            }
            if encoding_of(&hll) == Ok(Encoding::Sparse) {
                assert!(hll.len() <= SPARSE_BYTES_MAX_DEFAULT);
            }
        }
        assert!(
            promoted_at.is_some(),
            "20000 elements need the dense encoding"
        );
        let estimate = cardinality(&hll).unwrap();
        assert!(estimate.abs_diff(20_000) < 20_000 * 3 / 100, "{estimate}");
    }

    #[test]
    fn small_sets_count_exactly() {
        let hll = hll_of(numbered(0..10));
        assert_eq!(cardinality(&hll), Ok(10));
        let mut registers = Registers::new();
        registers.merge(&hll).unwrap();
        registers.merge(&hll_of(numbered(5..15))).unwrap();
        assert_eq!(registers.cardinality(), 15);
    }

    #[test]
    fn a_register_over_32_forces_dense() {
        let mut hll = new_sparse();
        assert_eq!(
            raise_register(&mut hll, 7, 33, SPARSE_BYTES_MAX_DEFAULT),
            Ok(true)
        );
        assert_eq!(encoding_of(&hll), Ok(Encoding::Dense));
        assert_eq!(dense_registers(&hll)[7], 33);
        assert_eq!(
            raise_register(&mut hll, 7, 20, SPARSE_BYTES_MAX_DEFAULT),
            Ok(false)
        );
    }

    #[test]
    fn sparse_edits_split_and_merge_opcodes() {
        let mut hll = new_sparse();
        raise_register(&mut hll, 100, 3, 3000).unwrap();
        assert_eq!(decode_sparse(&hll), "Z:100 v:3,1 Z:16283");
        raise_register(&mut hll, 101, 3, 3000).unwrap();
        assert_eq!(decode_sparse(&hll), "Z:100 v:3,2 Z:16282");
        raise_register(&mut hll, 0, 1, 3000).unwrap();
        raise_register(&mut hll, 5, 2, 3000).unwrap();
        assert_eq!(decode_sparse(&hll), "v:1,1 z:4 v:2,1 Z:94 v:3,2 Z:16282");
        raise_register(&mut hll, 100, 5, 3000).unwrap();
        assert_eq!(
            decode_sparse(&hll),
            "v:1,1 z:4 v:2,1 Z:94 v:5,1 v:3,1 Z:16282"
        );
        assert_eq!(raise_register(&mut hll, 101, 2, 3000), Ok(false));
        assert_eq!(cached_cardinality(&hll), None);
    }

    #[test]
    fn corrupt_sparse_values_are_reported() {
        let header = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
        let short = [header.clone(), vec![0x7f, 0xfe]].concat(); // 16383 registers
        assert_eq!(cardinality(&short), Err(Corrupt));
        assert_eq!(Registers::new().merge(&short), Err(Corrupt));
        assert_eq!(to_dense(&mut short.clone()), Err(Corrupt));
        // A VAL run past the last register.
        let long = [header.clone(), vec![0x7f, 0xfe, 0x83]].concat();
        assert_eq!(Registers::new().merge(&long), Err(Corrupt));
        assert_eq!(to_dense(&mut long.clone()), Err(Corrupt));
        // Nothing after the header covers no register.
        let empty = header.clone();
        assert_eq!(add(&mut empty.clone(), b"x", 3000), Err(Corrupt));
        // An XZERO cut short by the end reads the missing byte as 0.
        let cut = [header, vec![0x7f]].concat();
        assert_eq!(decode_sparse(&cut), "Z:16129");
    }

    proptest! {
        #[test]
        fn sparse_and_dense_agree(elements in proptest::collection::vec(any::<u32>(), 0..1500)) {
            let mut sparse = new_sparse();
            let mut dense = new_sparse();
            to_dense(&mut dense).unwrap();
            for element in &elements {
                let bytes = element.to_le_bytes();
                add(&mut sparse, &bytes, usize::MAX).unwrap();
                add(&mut dense, &bytes, usize::MAX).unwrap();
            }
            prop_assert_eq!(encoding_of(&sparse), Ok(Encoding::Sparse));
            prop_assert_eq!(cardinality(&sparse), cardinality(&dense));
            let mut converted = sparse.clone();
            to_dense(&mut converted).unwrap();
            prop_assert_eq!(&converted[HEADER_BYTES..], &dense[HEADER_BYTES..]);
            let (mut from_sparse, mut from_dense) = (Registers::new(), Registers::new());
            from_sparse.merge(&sparse).unwrap();
            from_dense.merge(&dense).unwrap();
            prop_assert_eq!(from_sparse.values(), from_dense.values());
            prop_assert_eq!(from_sparse.cardinality(), cardinality(&dense).unwrap());
        }

        #[test]
        fn random_bytes_after_the_header_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..600),
            dense in any::<bool>(),
            element in any::<u64>(),
        ) {
            let mut hll = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
            if dense {
                hll[ENCODING_AT] = 0;
                hll.resize(DENSE_BYTES, 0);
                hll[HEADER_BYTES..HEADER_BYTES + body.len()].copy_from_slice(&body);
            } else {
                hll.extend_from_slice(&body);
            }
            let _ = cardinality(&hll);
            let _ = Registers::new().merge(&hll);
            let _ = decode_sparse(&hll);
            let mut copy = hll.clone();
            let _ = to_dense(&mut copy);
            let mut copy = hll.clone();
            for offset in 0..4u64 {
                let _ = add(&mut copy, &(element + offset).to_le_bytes(), 3000);
            }
            for index in [0, 1, REGISTERS / 2, REGISTERS - 1] {
                let _ = raise_register(&mut hll.clone(), index, (element % 64) as u8, 3000);
            }
        }
    }
}
