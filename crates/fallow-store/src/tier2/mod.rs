//! Tier 2 (Ex-Tmem): a log of records on flash holding what RAM cannot: persistent data (the swap
//! region: every write of a persistent tenant is logged here, so it survives `kill -9`) and copies of
//! ephemeral data demoted out of RAM (the clean region: may be discarded).
//!
//! File layout: a 4 KiB file header, then regions of `region_bytes` (MiB-sized). A region starts with a
//! 64-byte region header (magic, sequence, CRC) followed by records (`record`), written front to back in
//! large sequential writes from a RAM buffer; the file grows as regions are first used, up to
//! `size_bytes`. Regions are used oldest-first as a circular log: when free regions run low, the store
//! cleans the oldest region (`Store::tier2_clean_oldest`: live persistent records and clean records worth
//! keeping are copied to the head, the rest are dropped), which also means a deletion's tombstone never
//! outlives the records it hides. Recovery replays regions by sequence.
//!
//! A record's place is a `Slot` (position and length in 8 bytes), which RAM items keep in their header:
//! an item with a slot is clean (it leaves RAM without a write), a stub is an item whose value is only
//! at its slot.
pub mod device;
pub mod record;
pub mod uring;

use device::{AlignedBuf, Device, RawRange, BLOCK_BYTES};
use parking_lot::{Condvar, Mutex};
use record::{RecordClass, RecordHeader, RECORD_ALIGN_BYTES};
use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub const FILE_HEADER_BYTES: u64 = 4096;
pub const REGION_HEADER_BYTES: usize = 64;
const FILE_MAGIC: &[u8; 8] = b"FALLOWT2";
const REGION_MAGIC: &[u8; 8] = b"FALLOWRG";
const FILE_VERSION: u32 = 1;
/// Pending bytes that wake the writer before its interval (under `everysec` and `no`).
const WRITE_BATCH_BYTES: usize = 256 << 10;
/// How often the writer looks for pending bytes when nobody wakes it.
const WRITE_INTERVAL: Duration = Duration::from_millis(20);
/// Reads in flight at once over the whole server (read-ahead's bound and the io_uring ring's size).
pub const READS_IN_FLIGHT_MAX: usize = 64;
/// Full regions whose buffers may wait for the writer at once: appenders wait beyond it (the RAM held
/// by the log is bounded: this many regions, the open one and one spare buffer). Two, not one: with one,
/// a worker making room for 40 KiB SETs waited for the writer on every region (SET p99 2.7 ms against
/// 0.5 ms, docs/benchmarks.md).
const SEALING_REGIONS_MAX: usize = 2;

/// When written records are made durable, as Redis's `appendfsync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// A write is acknowledged after its record is durable (group commit: one fdatasync for every
    /// record written meanwhile).
    Always,
    /// fdatasync once a second: a crash loses at most about the last second.
    EverySec,
    /// Never fdatasync (the records still reach the device without the page cache).
    No,
}

impl FsyncPolicy {
    pub fn name(self) -> &'static str {
        match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::EverySec => "everysec",
            FsyncPolicy::No => "no",
        }
    }

    pub fn from_name(name: &str) -> Option<FsyncPolicy> {
        [FsyncPolicy::Always, FsyncPolicy::EverySec, FsyncPolicy::No]
            .into_iter()
            .find(|policy| policy.name().eq_ignore_ascii_case(name))
    }
}

/// How tier 2 is set up.
#[derive(Clone, Debug)]
pub struct Tier2Config {
    pub path: PathBuf,
    /// Most bytes the file grows to (file header included).
    pub size_bytes: u64,
    pub region_bytes: usize,
    pub fsync: FsyncPolicy,
}

impl Tier2Config {
    pub const REGION_BYTES_DEFAULT: usize = 4 << 20;

    pub fn regions(&self) -> usize {
        (self.size_bytes.saturating_sub(FILE_HEADER_BYTES) / self.region_bytes as u64) as usize
    }

    /// The largest record a region holds: a value bigger than this cannot go to tier 2.
    pub fn record_bytes_max(&self) -> usize {
        self.region_bytes - REGION_HEADER_BYTES
    }
}

/// Where a record lies: byte position (8-aligned) and padded length (8-aligned, below 8 MiB), packed as
/// `position / 8 << 20 | length / 8`. 0 is no slot (position 0 is the file header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(pub u64);

impl Slot {
    pub const NONE: Slot = Slot(0);
    const LENGTH_BITS: u32 = 20;

    pub fn new(position: u64, padded_bytes: usize) -> Slot {
        assert!(position.is_multiple_of(8) && padded_bytes.is_multiple_of(8) && position > 0);
        assert!(
            padded_bytes / 8 < 1 << Self::LENGTH_BITS,
            "records are below 8 MiB"
        );
        Slot((position / 8) << Self::LENGTH_BITS | (padded_bytes / 8) as u64)
    }

    pub fn position(self) -> u64 {
        (self.0 >> Self::LENGTH_BITS) * 8
    }

    pub fn padded_bytes(self) -> usize {
        ((self.0 & ((1 << Self::LENGTH_BITS) - 1)) * 8) as usize
    }

    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The block-aligned read covering the record (reads are page-granular): the device position of
    /// its first block, the bytes to read, and where the record starts in them.
    pub fn blocks(self) -> (u64, usize, usize) {
        let position = self.position();
        let first_block = position / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
        let end = (position + self.padded_bytes() as u64).next_multiple_of(BLOCK_BYTES as u64);
        (
            first_block,
            (end - first_block) as usize,
            (position - first_block) as usize,
        )
    }
}

/// Why tier 2 refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tier2Error {
    /// No free region is left (every region holds live persistent data, or cleaning is behind).
    Full,
    /// The record is larger than a region.
    TooLarge {
        record_bytes: usize,
        max_bytes: usize,
    },
    /// The device failed (EIO, ENOSPC, vanished); writes stay refused until restart.
    Io(String),
    /// The record at a slot is torn, corrupt or not the one expected.
    Corrupt,
}

impl std::fmt::Display for Tier2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tier2Error::Full => write!(f, "tier 2 is full"),
            Tier2Error::TooLarge {
                record_bytes,
                max_bytes,
            } => write!(
                f,
                "a record of {record_bytes} bytes exceeds tier 2's {max_bytes}-byte limit"
            ),
            Tier2Error::Io(error) => write!(f, "tier-2 I/O error: {error}"),
            Tier2Error::Corrupt => write!(f, "tier-2 record is corrupt"),
        }
    }
}

/// What the shards did with tier 2 (counted where it happens, summed nowhere: atomics).
#[derive(Debug, Default)]
pub struct TierStats {
    pub demoted_keys: AtomicU64,
    pub demoted_bytes: AtomicU64,
    /// Demotions that needed a write (ephemeral items admitted to the clean region).
    pub demotion_writes: AtomicU64,
    pub admissions_refused: AtomicU64,
    pub promoted_keys: AtomicU64,
    /// Reads served from tier 2 (stubs read back).
    pub tier2_hits: AtomicU64,
    /// Of those, reads served from the record without promoting the key (two reads promote).
    pub served_from_tier2: AtomicU64,
    /// Of those, later reads that did not promote: reads too rare for RAM to serve the value again, or
    /// no room in the elastic pool (`Shard::serves_without_promotion`).
    pub promotions_declined: AtomicU64,
    pub tier2_read_errors: AtomicU64,
    /// Stubs dropped because their record could not be read or was corrupt.
    pub lost_keys: AtomicU64,
    pub persistent_records: AtomicU64,
    pub log_errors: AtomicU64,
    /// Stubs read on a worker under the shard lock (keys the dispatcher could not read ahead).
    pub sync_reads: AtomicU64,
    /// Stubs read ahead on the I/O pool.
    pub async_reads: AtomicU64,
    /// Bytes of items copied to tier 2 ahead of need (clean-ahead).
    pub clean_ahead_bytes: AtomicU64,
}

/// Counters of tier 2's events (INFO tier2, memcached stats, Prometheus).
#[derive(Debug, Default)]
pub struct Tier2Stats {
    pub shards: TierStats,
    pub records_written: AtomicU64,
    pub record_bytes_written: AtomicU64,
    /// Bytes written to the device (whole blocks, rewrites of a partial last block included).
    pub device_bytes_written: AtomicU64,
    pub device_writes: AtomicU64,
    pub syncs: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub corrupt_records: AtomicU64,
    /// Records copied forward by cleaning (part of write amplification).
    pub cleaned_records: AtomicU64,
    pub cleaned_bytes: AtomicU64,
    pub regions_cleaned: AtomicU64,
    /// Clean records discarded by cleaning.
    pub clean_discarded: AtomicU64,
    /// Of the record bytes cleaning met lately, the share (in 1/1000) nothing referred to any more
    /// (overwritten, deleted, expired): weight 1/4 to each newly cleaned region.
    pub cleaned_dead_permille: AtomicU64,
    /// Oldest regions read to see how much of them is dead (`Store::tier2_probe_dead`), and the
    /// admission refusals counted when the last probe ran.
    pub dead_probes: AtomicU64,
    pub refusals_at_last_probe: AtomicU64,
    pub last_probe_ms: AtomicU64,
    /// Read latency histogram: bucket i counts reads of < 2^i µs (the last bucket: the rest).
    pub read_latency_us: [AtomicU64; 16],
}

impl Tier2Stats {
    /// Cleaning emptied a region whose records took `record_bytes`, `dead_bytes` of them dead.
    pub fn note_cleaned_region(&self, dead_bytes: u64, record_bytes: u64) {
        if record_bytes == 0 {
            return;
        }
        let share = (dead_bytes.min(record_bytes) * 1000 / record_bytes).min(1000);
        let before = self.cleaned_dead_permille.load(Ordering::Relaxed);
        let smoothed = match self.regions_cleaned.load(Ordering::Relaxed) {
            0 => share,
            _ => (before * 3 + share) / 4,
        };
        self.cleaned_dead_permille
            .store(smoothed, Ordering::Relaxed);
    }

    pub fn record_read_latency(&self, elapsed: Duration) {
        let micros = elapsed.as_micros() as u64;
        let bucket = (64 - micros.leading_zeros() as usize).min(15);
        self.read_latency_us[bucket].fetch_add(1, Ordering::Relaxed);
    }
}

/// The region being filled, or one sealed but not yet fully written.
struct OpenRegion {
    index: u32,
    sequence: u64,
    buffer: AlignedBuf,
    /// Bytes of `buffer` holding the region header and records.
    filled: usize,
    /// Bytes of `buffer` known to be on the device (block-aligned except at the end of a write).
    written: usize,
    /// The newest lsn in the region.
    last_lsn: u64,
}

impl OpenRegion {
    fn contains(&self, slot: Slot, region_bytes: usize) -> Option<usize> {
        let start = FILE_HEADER_BYTES + self.index as u64 * region_bytes as u64;
        let position = slot.position();
        (position >= start && position < start + self.filled as u64)
            .then(|| (position - start) as usize)
    }
}

/// What `write_pending` writes of one region: its whole blocks from `written` (rounded down to a block)
/// up to `filled` read in place, then the block holding `filled`, copied with zeros past `filled` (a
/// reused buffer holds an older region's bytes there).
struct WriteJob {
    position: u64,
    whole_blocks: RawRange,
    tail: Option<AlignedBuf>,
    index: u32,
    filled: usize,
}

impl WriteJob {
    /// Under the state lock: `region_start` is the region's device position.
    fn of(region: &OpenRegion, region_start: u64) -> WriteJob {
        let from = region.written / BLOCK_BYTES * BLOCK_BYTES;
        // written <= filled, so from <= whole_end.
        let whole_end = region.filled / BLOCK_BYTES * BLOCK_BYTES;
        let tail = (whole_end < region.filled).then(|| {
            let mut block = AlignedBuf::zeroed(BLOCK_BYTES);
            block[..region.filled - whole_end]
                .copy_from_slice(&region.buffer[whole_end..region.filled]);
            block
        });
        WriteJob {
            position: region_start + from as u64,
            whole_blocks: region.buffer.raw_range(from, whole_end),
            tail,
            index: region.index,
            filled: region.filled,
        }
    }
}

struct LogState {
    open: Option<OpenRegion>,
    sealing: VecDeque<OpenRegion>,
    /// Sealed and written regions, oldest first: (index, sequence).
    used: VecDeque<(u32, u64)>,
    free: BTreeSet<u32>,
    next_sequence: u64,
    next_lsn: u64,
    /// The newest lsn appended.
    appended_lsn: u64,
    failed: Option<String>,
    scratch: Vec<u8>,
    shutdown: bool,
    /// The buffer of the last region written, kept for the next region to open: a fresh one would
    /// fault in `region_bytes` of zeroed pages while an appender (a worker freeing RAM) waits.
    spare_buffer: Option<AlignedBuf>,
}

/// Told the new durable lsn (u64::MAX: the device failed).
pub type DurableCallback = Box<dyn Fn(u64) + Send + Sync>;

/// Tier 2: the log file, its writer thread and its counters.
pub struct Tier2 {
    pub config: Tier2Config,
    device: Arc<Device>,
    state: Mutex<LogState>,
    /// Wakes the writer.
    pending: Condvar,
    /// Wakes those waiting for durability.
    durable_changed: Condvar,
    /// Wakes appenders waiting for sealed regions to be written (`SEALING_REGIONS_MAX`).
    sealing_drained: Condvar,
    durable_lsn: AtomicU64,
    pub stats: Tier2Stats,
    /// Called (from the writer thread) with the new durable lsn after each advance, and with u64::MAX
    /// when the device failed.
    on_durable: Mutex<Option<DurableCallback>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Serialises `write_pending` between the writer thread and callers of `flush_and_sync`.
    write_lock: Mutex<()>,
    /// Reads that do not block their caller (`read_async`), once `enable_async_reads` set them up.
    uring: std::sync::OnceLock<uring::UringReads>,
}

/// What opening found on the device: regions in replay order.
pub struct Opened {
    pub tier2: Arc<Tier2>,
    /// (index, sequence) of the regions holding records, oldest first.
    pub regions: Vec<(u32, u64)>,
}

impl Tier2 {
    /// Opens or creates the tier-2 file. Existing regions are listed for recovery (`Opened::regions`);
    /// nothing is written until `start` has been called after recovery.
    pub fn open(config: Tier2Config) -> Result<Opened, String> {
        assert!(config.region_bytes.is_multiple_of(BLOCK_BYTES) && config.region_bytes >= 64 << 10);
        if config.regions() < 2 {
            return Err(format!(
                "tier-2 size {} holds fewer than 2 regions of {} bytes",
                config.size_bytes, config.region_bytes
            ));
        }
        let device = Device::open(&config.path)
            .map_err(|error| format!("cannot open {}: {error}", config.path.display()))?;
        let mut header = AlignedBuf::zeroed(BLOCK_BYTES);
        device
            .read_at(&mut header, 0)
            .map_err(|error| format!("cannot read {}: {error}", config.path.display()))?;
        let regions = if &header[..8] == FILE_MAGIC {
            let region_bytes = u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize;
            if region_bytes != config.region_bytes {
                return Err(format!(
                    "{} was made with {region_bytes}-byte regions, not {}",
                    config.path.display(),
                    config.region_bytes
                ));
            }
            list_regions(&device, &config)?
        } else {
            header[..8].copy_from_slice(FILE_MAGIC);
            header[8..12].copy_from_slice(&FILE_VERSION.to_le_bytes());
            header[12..16].copy_from_slice(&(config.region_bytes as u32).to_le_bytes());
            device
                .write_at(&header, 0)
                .and_then(|()| device.sync_data())
                .map_err(|error| format!("cannot write {}: {error}", config.path.display()))?;
            Vec::new()
        };
        let in_use: BTreeSet<u32> = regions.iter().map(|&(index, _)| index).collect();
        let free = (0..config.regions() as u32)
            .filter(|index| !in_use.contains(index))
            .collect();
        let next_sequence = regions.last().map_or(1, |&(_, sequence)| sequence + 1);
        let tier2 = Arc::new(Tier2 {
            state: Mutex::new(LogState {
                open: None,
                sealing: VecDeque::new(),
                used: regions.iter().copied().collect(),
                free,
                next_sequence,
                next_lsn: 1,
                appended_lsn: 0,
                failed: None,
                scratch: Vec::new(),
                shutdown: false,
                spare_buffer: None,
            }),
            config,
            device: Arc::new(device),
            pending: Condvar::new(),
            durable_changed: Condvar::new(),
            sealing_drained: Condvar::new(),
            durable_lsn: AtomicU64::new(0),
            stats: Tier2Stats::default(),
            on_durable: Mutex::new(None),
            writer: Mutex::new(None),
            write_lock: Mutex::new(()),
            uring: std::sync::OnceLock::new(),
        });
        Ok(Opened { tier2, regions })
    }

    /// Starts the writer thread; `next_lsn` follows the newest lsn recovery saw.
    pub fn start(self: &Arc<Self>, next_lsn: u64) {
        {
            let mut state = self.state.lock();
            state.next_lsn = state.next_lsn.max(next_lsn);
            state.appended_lsn = state.next_lsn - 1;
            self.durable_lsn
                .store(state.appended_lsn, Ordering::Release);
        }
        // The thread holds a weak reference: it ends once tier 2 is dropped.
        let tier2 = Arc::downgrade(self);
        let handle = std::thread::Builder::new()
            .name("fallow-tier2".into())
            .spawn(move || writer_loop(tier2))
            .expect("spawn the tier-2 writer");
        *self.writer.lock() = Some(handle);
    }

    /// Registers the durability callback (the server wakes waiting clients with it).
    pub fn on_durable(&self, callback: DurableCallback) {
        *self.on_durable.lock() = Some(callback);
    }

    pub fn is_direct(&self) -> bool {
        self.device.direct
    }

    pub fn set_fault(&self, fault: device::Fault) {
        self.device.set_fault(fault);
    }

    pub fn fault(&self) -> device::Fault {
        self.device.fault()
    }

    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn.load(Ordering::Acquire)
    }

    /// The device error that stopped writes, if any.
    pub fn failure(&self) -> Option<String> {
        self.state.lock().failed.clone()
    }

    /// Free regions and all regions.
    pub fn regions_free_total(&self) -> (usize, usize) {
        (self.state.lock().free.len(), self.config.regions())
    }

    /// Bytes of regions holding records (open and sealed).
    pub fn used_bytes(&self) -> u64 {
        let (free, total) = self.regions_free_total();
        ((total - free) * self.config.region_bytes) as u64
    }

    pub fn file_bytes(&self) -> u64 {
        self.device.file_bytes()
    }

    /// Appends a record; returns its slot and lsn. The record is readable at once and durable once
    /// `durable_lsn` reaches the lsn.
    pub fn append(
        &self,
        header: &RecordHeader,
        key: &[u8],
        value: &[u8],
    ) -> Result<(Slot, u64), Tier2Error> {
        let record_bytes = header.record_bytes();
        if record_bytes > self.config.record_bytes_max() {
            return Err(Tier2Error::TooLarge {
                record_bytes,
                max_bytes: self.config.record_bytes_max(),
            });
        }
        let mut state = self.state.lock();
        self.wait_for_sealing_room(&mut state)?;
        let lsn = state.next_lsn;
        let mut scratch = std::mem::take(&mut state.scratch);
        scratch.clear();
        let stamped = RecordHeader { lsn, ..*header };
        record::encode(&stamped, key, value, &mut scratch);
        // Client writes leave one free region to cleaning, which needs room to copy live records into.
        let result = self.place(&mut state, &mut scratch, lsn, 1);
        state.scratch = scratch;
        result
    }

    /// Appends an already encoded record (cleaning copies records forward this way), leaving
    /// `free_regions_kept` regions free (`Full` otherwise).
    pub fn append_encoded(
        &self,
        encoded: &[u8],
        free_regions_kept: usize,
    ) -> Result<Slot, Tier2Error> {
        let header = record::decode(encoded).map_err(|_| Tier2Error::Corrupt)?;
        let mut state = self.state.lock();
        self.wait_for_sealing_room(&mut state)?;
        let mut scratch = encoded[..header.padded_bytes()].to_vec();
        // Its own lsn: cleaning may run while newer records of other keys are appended.
        let lsn = state.next_lsn;
        self.place(&mut state, &mut scratch, lsn, free_regions_kept)
            .map(|(slot, _)| slot)
    }

    /// Waits while `SEALING_REGIONS_MAX` full regions wait for the writer (appends faster than the device
    /// writes); Err once the device failed.
    fn wait_for_sealing_room(
        &self,
        state: &mut parking_lot::MutexGuard<'_, LogState>,
    ) -> Result<(), Tier2Error> {
        loop {
            if let Some(error) = &state.failed {
                return Err(Tier2Error::Io(error.clone()));
            }
            if state.sealing.len() < SEALING_REGIONS_MAX {
                return Ok(());
            }
            self.pending.notify_one();
            self.sealing_drained.wait_for(state, WRITE_INTERVAL);
        }
    }

    /// Puts an encoded record into the open region (opening a new one when it does not fit).
    fn place(
        &self,
        state: &mut LogState,
        encoded: &mut [u8],
        lsn: u64,
        free_regions_kept: usize,
    ) -> Result<(Slot, u64), Tier2Error> {
        let padded = encoded.len();
        debug_assert!(padded.is_multiple_of(RECORD_ALIGN_BYTES));
        let fits = |open: &OpenRegion| open.filled + padded <= open.buffer.len();
        if !state.open.as_ref().is_some_and(fits) {
            if state.free.len() <= free_regions_kept {
                return Err(Tier2Error::Full);
            }
            self.open_next_region(state)?;
        }
        let region_bytes = self.config.region_bytes;
        let open = state.open.as_mut().expect("a region is open");
        record::set_region_sequence(encoded, open.sequence as u32);
        let offset = open.filled;
        // Not through a slice of the whole buffer: the writer may be reading the bytes below `filled`.
        open.buffer.write_bytes(offset, encoded);
        open.filled += padded;
        open.last_lsn = lsn;
        let position = FILE_HEADER_BYTES + open.index as u64 * region_bytes as u64 + offset as u64;
        let pending = open.filled - open.written;
        state.next_lsn = lsn + 1;
        state.appended_lsn = lsn;
        self.stats.records_written.fetch_add(1, Ordering::Relaxed);
        self.stats
            .record_bytes_written
            .fetch_add(padded as u64, Ordering::Relaxed);
        if self.config.fsync == FsyncPolicy::Always || pending >= WRITE_BATCH_BYTES {
            self.pending.notify_one();
        }
        Ok((Slot::new(position, padded), lsn))
    }

    /// Seals the open region (the writer finishes writing it) and opens the lowest free one.
    fn open_next_region(&self, state: &mut LogState) -> Result<(), Tier2Error> {
        let index = *state.free.first().ok_or(Tier2Error::Full)?;
        state.free.remove(&index);
        if let Some(full) = state.open.take() {
            state.sealing.push_back(full);
        }
        let sequence = state.next_sequence;
        state.next_sequence += 1;
        let mut buffer = match state.spare_buffer.take() {
            Some(buffer) => buffer,
            None => AlignedBuf::zeroed(self.config.region_bytes),
        };
        // Bytes past `filled` are never written to the device (`write_pending` zeroes its last block's
        // tail), so a reused buffer needs only its header rewritten.
        let mut header = [0u8; REGION_HEADER_BYTES];
        header[..8].copy_from_slice(REGION_MAGIC);
        header[8..16].copy_from_slice(&sequence.to_le_bytes());
        let crc = crc32fast::hash(&header[..16]);
        header[16..20].copy_from_slice(&crc.to_le_bytes());
        buffer.write_bytes(0, &header);
        state.open = Some(OpenRegion {
            index,
            sequence,
            buffer,
            filled: REGION_HEADER_BYTES,
            written: 0,
            last_lsn: state.appended_lsn,
        });
        self.pending.notify_one();
        Ok(())
    }

    /// The encoded record at `slot` (padded bytes), checked: from the region buffers while the record is
    /// not yet (or not fully) written, else from the device.
    pub fn read(&self, slot: Slot) -> Result<Vec<u8>, Tier2Error> {
        let started = Instant::now();
        if let Some(bytes) = self.read_buffered(slot) {
            return self.checked(Ok(bytes), slot, started);
        }
        let (first_block, read_bytes, start) = slot.blocks();
        let mut buffer = AlignedBuf::zeroed(read_bytes);
        let read = self
            .device
            .read_at(&mut buffer, first_block)
            .map_err(|error| Tier2Error::Io(error.to_string()));
        let bytes = read.map(|()| buffer[start..start + slot.padded_bytes()].to_vec());
        self.checked(bytes, slot, started)
    }

    /// The record at `slot` while it is still in a region's RAM buffer (not yet written, or being
    /// written).
    fn read_buffered(&self, slot: Slot) -> Option<Vec<u8>> {
        let state = self.state.lock();
        let regions = state.open.iter().chain(state.sealing.iter());
        for region in regions {
            if let Some(offset) = region.contains(slot, self.config.region_bytes) {
                return Some(region.buffer[offset..offset + slot.padded_bytes()].to_vec());
            }
        }
        None
    }

    /// Sets up reads through io_uring for `read_async`, at most `entries` in flight. `Err` says why the
    /// kernel refused (`read_async` then hands every read back).
    pub fn enable_async_reads(&self, entries: u32) -> Result<(), String> {
        let reads = uring::UringReads::new(entries).map_err(|error| error.to_string())?;
        let _ = self.uring.set(reads);
        Ok(())
    }

    /// The eventfd that becomes readable when async reads complete (`reap_reads` then).
    pub fn async_reads_fd(&self) -> Option<std::os::fd::RawFd> {
        self.uring.get().map(uring::UringReads::completions_fd)
    }

    /// Stops taking async reads (those in flight still complete): the server could not poll for them.
    pub fn stop_async_reads(&self, why: &str) {
        if let Some(reads) = self.uring.get() {
            reads.stop(why);
        }
    }

    /// Why async reads stopped being taken, if they did.
    pub fn async_reads_failure(&self) -> Option<String> {
        self.uring.get().and_then(uring::UringReads::failure)
    }

    /// Reads `slot`'s record without blocking the caller: `done` gets the checked record, at once when
    /// it is still in RAM or an injected fault fails it, else from `reap_reads` once the device has
    /// answered. Gives `done` back when async reads are not set up or cannot take the read now (the
    /// caller then reads on a thread of its own with `read`).
    pub fn read_async(&self, slot: Slot, done: uring::ReadDone) -> Result<(), uring::ReadDone> {
        let Some(reads) = self.uring.get() else {
            return Err(done);
        };
        let started = Instant::now();
        if let Some(bytes) = self.read_buffered(slot) {
            done(self.checked(Ok(bytes), slot, started));
            return Ok(());
        }
        if let Err(error) = self.device.read_fault() {
            done(self.checked(Err(Tier2Error::Io(error.to_string())), slot, started));
            return Ok(());
        }
        reads.submit(&self.device, slot, done)
    }

    /// Runs the callbacks of the async reads that completed; call when `async_reads_fd` is readable.
    pub fn reap_reads(&self) {
        let Some(reads) = self.uring.get() else {
            return;
        };
        // Reset the eventfd before draining: a completion after this either is drained now or
        // signals again.
        let _ = reads.clear_completions();
        for read in reads.reap() {
            (read.done)(self.checked(read.bytes, read.slot, read.started));
        }
    }

    /// Counts a read and checks its record: `Corrupt` unless it decodes with the slot's length.
    fn checked(
        &self,
        bytes: Result<Vec<u8>, Tier2Error>,
        slot: Slot,
        started: Instant,
    ) -> Result<Vec<u8>, Tier2Error> {
        let bytes = bytes.inspect_err(|_| {
            self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
        })?;
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(slot.padded_bytes() as u64, Ordering::Relaxed);
        self.stats.record_read_latency(started.elapsed());
        match record::decode(&bytes) {
            Ok(header) if header.padded_bytes() == slot.padded_bytes() => Ok(bytes),
            _ => {
                self.stats.corrupt_records.fetch_add(1, Ordering::Relaxed);
                Err(Tier2Error::Corrupt)
            }
        }
    }

    /// Reads a whole region (recovery and cleaning).
    pub fn read_region(&self, index: u32) -> Result<AlignedBuf, Tier2Error> {
        let mut buffer = AlignedBuf::zeroed(self.config.region_bytes);
        self.device
            .read_at(&mut buffer, region_position(&self.config, index))
            .map_err(|error| {
                self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                Tier2Error::Io(error.to_string())
            })?;
        Ok(buffer)
    }

    /// Reads `regions` (index, sequence) in order, one ahead of the caller, into buffers reused throughout
    /// (recovery: see `RegionReader`).
    pub fn read_regions(&self, regions: &[(u32, u64)]) -> RegionReader<'_> {
        let positions: Vec<(u32, u64)> = regions
            .iter()
            .map(|&(index, _)| (index, region_position(&self.config, index)))
            .collect();
        let (read_sender, read) = mpsc::sync_channel(READ_AHEAD_BUFFERS);
        let (spare, spare_receiver) = mpsc::channel();
        let device = self.device.clone();
        let region_bytes = self.config.region_bytes;
        let thread = std::thread::Builder::new()
            .name("fallow-t2-read".into())
            .spawn(move || {
                read_ahead(
                    &device,
                    positions,
                    region_bytes,
                    read_sender,
                    spare_receiver,
                )
            })
            .expect("spawn the tier-2 read-ahead thread");
        RegionReader {
            stats: &self.stats,
            current: None,
            channels: Some(ReaderChannels { read, spare }),
            thread: Some(thread),
        }
    }

    /// The oldest sealed, written region: the next to clean.
    pub fn oldest_region(&self) -> Option<(u32, u64)> {
        self.state.lock().used.front().copied()
    }

    /// Returns the oldest region to the free list once cleaning moved what it keeps: first makes the
    /// copies durable, so a crash never finds the region reused before its live records were safe.
    pub fn free_oldest_region(&self, index: u32) -> Result<(), Tier2Error> {
        self.flush_and_sync()?;
        let mut state = self.state.lock();
        assert_eq!(
            state.used.front().map(|&(oldest, _)| oldest),
            Some(index),
            "regions are freed oldest first"
        );
        state.used.pop_front();
        state.free.insert(index);
        self.stats.regions_cleaned.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes everything appended so far and makes it durable, whatever the policy (cleaning, shutdown).
    pub fn flush_and_sync(&self) -> Result<(), Tier2Error> {
        let target = self.state.lock().appended_lsn;
        self.write_pending(true)?;
        debug_assert!(self.durable_lsn() >= target);
        Ok(())
    }

    /// Blocks until `lsn` is durable or the device failed (tests and shutdown; clients wait through
    /// `on_durable` instead).
    pub fn wait_durable(&self, lsn: u64, timeout: Duration) -> Result<(), Tier2Error> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        loop {
            if let Some(error) = &state.failed {
                return Err(Tier2Error::Io(error.clone()));
            }
            if self.durable_lsn() >= lsn {
                return Ok(());
            }
            self.pending.notify_one();
            if self
                .durable_changed
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                return Err(Tier2Error::Io("timed out waiting for durability".into()));
            }
        }
    }

    /// One round of the writer thread: waits for pending bytes (at most `WRITE_INTERVAL`), writes them,
    /// fdatasyncs as the policy says. False once tier 2 is shut down.
    fn writer_round(&self, last_sync: &mut Instant) -> bool {
        {
            let mut state = self.state.lock();
            if state.shutdown {
                return false;
            }
            let idle = state
                .open
                .as_ref()
                .is_none_or(|open| open.written == open.filled)
                && state.sealing.is_empty();
            if idle {
                self.pending.wait_for(&mut state, WRITE_INTERVAL);
            }
            if state.shutdown {
                return false;
            }
        }
        let sync = match self.config.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::EverySec => last_sync.elapsed() >= Duration::from_secs(1),
            FsyncPolicy::No => false,
        };
        if self.write_pending(sync).is_ok() && sync {
            *last_sync = Instant::now();
        }
        true
    }

    /// Writes what the region buffers hold beyond what was written, then (when `sync`) fdatasyncs, and
    /// advances the durable lsn. Serialised by the device lock so the writer thread and a caller of
    /// `flush_and_sync` never interleave.
    fn write_pending(&self, sync: bool) -> Result<(), Tier2Error> {
        let _serial = self.write_lock.lock();
        // Under the state lock, note what to write of each region; the whole blocks are read from the
        // region buffer after the lock is released (appenders only write past `filled`).
        let (jobs, lsn) = {
            let state = self.state.lock();
            if let Some(error) = &state.failed {
                return Err(Tier2Error::Io(error.clone()));
            }
            let jobs: Vec<WriteJob> = state
                .sealing
                .iter()
                .chain(state.open.iter())
                .filter(|region| region.written < region.filled)
                .map(|region| WriteJob::of(region, region_position(&self.config, region.index)))
                .collect();
            (jobs, state.appended_lsn)
        };
        let result = self.write_jobs(&jobs, sync);
        let mut state = self.state.lock();
        if let Err(error) = &result {
            let message = match error {
                Tier2Error::Io(message) => message.clone(),
                other => other.to_string(),
            };
            state.failed.get_or_insert(message);
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            drop(state);
            self.durable_changed.notify_all();
            if let Some(callback) = self.on_durable.lock().as_ref() {
                callback(u64::MAX);
            }
            return result;
        }
        let log = &mut *state;
        for job in &jobs {
            for region in log.sealing.iter_mut().chain(log.open.iter_mut()) {
                if region.index == job.index {
                    region.written = region.written.max(job.filled);
                }
            }
        }
        // Sealed regions fully written join the used list; the last one's buffer is kept for the next
        // region (`jobs`, which read it, are done).
        while state
            .sealing
            .front()
            .is_some_and(|region| region.written == region.filled)
        {
            let region = state.sealing.pop_front().expect("checked");
            state.used.push_back((region.index, region.sequence));
            state.spare_buffer = Some(region.buffer);
            self.sealing_drained.notify_all();
        }
        drop(state);
        if sync || self.config.fsync == FsyncPolicy::No {
            // Under `no`, written is as durable as it gets.
            if self.durable_lsn.fetch_max(lsn, Ordering::AcqRel) < lsn {
                // Under the state lock, so a waiter between its check and its wait cannot miss it.
                let _state = self.state.lock();
                self.durable_changed.notify_all();
                drop(_state);
                if let Some(callback) = self.on_durable.lock().as_ref() {
                    callback(lsn);
                }
            }
        }
        Ok(())
    }

    fn write_jobs(&self, jobs: &[WriteJob], sync: bool) -> Result<(), Tier2Error> {
        for job in jobs {
            // SAFETY: `WriteJob::of` took whole blocks below the region's `filled`, which appenders never
            // write again, and the region's buffer is dropped or reused only in `write_pending` after
            // these writes (under `write_lock`).
            let whole_blocks = unsafe { job.whole_blocks.bytes() };
            let tail = job.tail.as_deref().unwrap_or(&[]);
            for (bytes, position) in [
                (whole_blocks, job.position),
                (tail, job.position + whole_blocks.len() as u64),
            ] {
                if bytes.is_empty() {
                    continue;
                }
                self.device
                    .write_at(bytes, position)
                    .map_err(|error| Tier2Error::Io(error.to_string()))?;
                self.stats.device_writes.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .device_bytes_written
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
        }
        if sync && !jobs.is_empty() {
            self.device
                .sync_data()
                .map_err(|error| Tier2Error::Io(error.to_string()))?;
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes and syncs everything, then stops the writer (clean shutdown).
    pub fn shutdown(&self) -> Result<(), Tier2Error> {
        let result = self.flush_and_sync();
        self.state.lock().shutdown = true;
        self.pending.notify_all();
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
        result
    }
}

/// The writer thread: rounds until tier 2 is shut down or dropped.
fn writer_loop(tier2: std::sync::Weak<Tier2>) {
    let mut last_sync = Instant::now();
    while let Some(tier2) = tier2.upgrade() {
        if !tier2.writer_round(&mut last_sync) {
            return;
        }
    }
}

fn region_position(config: &Tier2Config, index: u32) -> u64 {
    FILE_HEADER_BYTES + index as u64 * config.region_bytes as u64
}

/// The regions whose header is valid, by sequence.
fn list_regions(device: &Device, config: &Tier2Config) -> Result<Vec<(u32, u64)>, String> {
    let mut regions = Vec::new();
    let mut header = AlignedBuf::zeroed(BLOCK_BYTES);
    let file_bytes = device.file_bytes();
    for index in 0..config.regions() as u32 {
        let position = region_position(config, index);
        if position >= file_bytes {
            break;
        }
        device
            .read_at(&mut header, position)
            .map_err(|error| format!("cannot read tier-2 region {index}: {error}"))?;
        if let Some(sequence) = region_sequence(&header) {
            regions.push((index, sequence));
        }
    }
    regions.sort_by_key(|&(_, sequence)| sequence);
    Ok(regions)
}

/// The sequence in a region header, if the header is valid.
pub fn region_sequence(region: &[u8]) -> Option<u64> {
    let crc = u32::from_le_bytes(region[16..20].try_into().unwrap());
    (&region[..8] == REGION_MAGIC && crc32fast::hash(&region[..16]) == crc)
        .then(|| u64::from_le_bytes(region[8..16].try_into().unwrap()))
}

/// Region buffers a `RegionReader` holds: the caller parses one while the next region is read into
/// the other.
const READ_AHEAD_BUFFERS: usize = 2;

/// What the read-ahead thread sends: a region's index and its bytes, or the error that ended the reads.
type RegionRead = (u32, std::io::Result<AlignedBuf>);

struct ReaderChannels {
    read: mpsc::Receiver<RegionRead>,
    /// Buffers the caller is done with, back to the thread.
    spare: mpsc::Sender<AlignedBuf>,
}

/// Reads regions in order on a thread, one region ahead of the caller, into `READ_AHEAD_BUFFERS`
/// buffers reused throughout: recovery reads the whole file, and a fresh zeroed region-sized buffer per
/// read cost more in page faults than the read itself, while the device idled during each parse.
pub struct RegionReader<'a> {
    stats: &'a Tier2Stats,
    /// The region the caller last got; it goes back to the thread on the next call.
    current: Option<AlignedBuf>,
    /// None once the reads ended (all read, or an error).
    channels: Option<ReaderChannels>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RegionReader<'_> {
    /// The next region as (index, bytes), or the read error that ended the reads (counted in
    /// `read_errors`); None after the last region or an error.
    pub fn next_region(&mut self) -> Option<Result<(u32, &[u8]), Tier2Error>> {
        let channels = self.channels.as_ref()?;
        if let Some(buffer) = self.current.take() {
            // Fails only when the thread has read everything and needs no buffer.
            let _ = channels.spare.send(buffer);
        }
        let Ok((index, read)) = channels.read.recv() else {
            self.finish();
            return None;
        };
        match read {
            Ok(buffer) => Some(Ok((index, &**self.current.insert(buffer)))),
            Err(error) => {
                self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                self.finish();
                Some(Err(Tier2Error::Io(error.to_string())))
            }
        }
    }

    /// Closes the channels, so a thread waiting for a buffer or sending a read returns, and joins it.
    fn finish(&mut self) {
        self.channels = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RegionReader<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The read-ahead thread: reads each (index, position) into a buffer and sends it, until all are read,
/// a read fails, or the `RegionReader` is dropped.
fn read_ahead(
    device: &Device,
    positions: Vec<(u32, u64)>,
    region_bytes: usize,
    read: mpsc::SyncSender<RegionRead>,
    spare: mpsc::Receiver<AlignedBuf>,
) {
    let mut allocated = 0;
    for (index, position) in positions {
        // Past the first reads, wait for the caller to hand a buffer back: the bytes held stay bounded.
        let mut buffer = if allocated < READ_AHEAD_BUFFERS {
            allocated += 1;
            AlignedBuf::zeroed(region_bytes)
        } else {
            match spare.recv() {
                Ok(buffer) => buffer,
                Err(_) => return,
            }
        };
        // `read_at` writes every byte (zeros past the end of the file), so nothing of the region the
        // buffer held before is left to be parsed as this one's.
        let result = device.read_at(&mut buffer, position).map(|()| buffer);
        let failed = result.is_err();
        if read.send((index, result)).is_err() || failed {
            return;
        }
    }
}

/// Walks the records of a region read whole: calls `visit(slot, header, encoded)` for each valid record
/// written in this life of the region; returns the number of corrupt records skipped. A walk stops at the
/// first place where no record starts, or where a corrupt header gives no length to skip by.
pub fn walk_region(
    config: &Tier2Config,
    index: u32,
    region: &[u8],
    mut visit: impl FnMut(Slot, &RecordHeader, &[u8]),
) -> u64 {
    let Some(sequence) = region_sequence(region) else {
        return 0;
    };
    let base = region_position(config, index);
    let mut offset = REGION_HEADER_BYTES;
    let mut corrupt = 0;
    while offset + record::RECORD_HEADER_BYTES <= region.len() {
        let bytes = &region[offset..];
        match record::decode(bytes) {
            Ok(header) if header.region_sequence == sequence as u32 => {
                let padded = header.padded_bytes();
                visit(
                    Slot::new(base + offset as u64, padded),
                    &header,
                    &bytes[..padded],
                );
                offset += padded;
            }
            // A record of the region's earlier life: what follows is older still.
            Ok(_) | Err(record::RecordError::NoRecord) => break,
            Err(record::RecordError::Corrupt) => {
                corrupt += 1;
                // The length field may be what was torn: skip by it only when it stays in the region.
                let claimed = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
                let padded = claimed.next_multiple_of(RECORD_ALIGN_BYTES);
                if claimed < record::RECORD_HEADER_BYTES || offset + padded > region.len() {
                    break;
                }
                offset += padded;
            }
        }
    }
    corrupt
}

/// A record of the swap class with a value.
pub fn value_header(
    kind: crate::types::Kind,
    class: RecordClass,
    keyspace: usize,
    expire_at_ms: u64,
    client_flags: u32,
    key_bytes: usize,
    value_bytes: usize,
) -> RecordHeader {
    RecordHeader {
        kind: record::RecordKind::Value(kind),
        class,
        keyspace: keyspace as u64,
        lsn: 0,
        expire_at_ms,
        client_flags,
        key_bytes: key_bytes as u32,
        value_bytes: value_bytes as u32,
        region_sequence: 0,
    }
}

#[cfg(test)]
pub(crate) mod tests;
