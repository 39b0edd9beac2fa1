//! The second-level cache: file blocks in fallow, checked against the backing files so that no stale
//! byte is ever served.
//!
//! Consistency, in short (docs/fs.md has the long form):
//! - Every open compares the backing file's stamp (size, mtime, ctime) with the one its cached blocks
//!   belong to (close-to-open); open files are compared again every `revalidate` period. A difference is a
//!   change behind the mount: the file gets a new epoch, so its old blocks are never read again.
//! - Writes go through to the backing file at once, then delete the blocks they touched. A block read
//!   from the backing file is stored only if no write happened since its read began (`write_gen`,
//!   checked under `fill_lock` so that a write's deletion either sees the stored block or the store sees
//!   the write). When a deletion cannot reach fallow, the file gets a new epoch instead.
//! - While fallow is away, reads go straight to the backing file.
pub mod admission;
pub mod io_queue;
pub mod keys;
pub mod prefetch;
pub mod remote;

use crate::options::Prefetch;
use crate::stats::Counters;
use crate::sys;
use admission::Doorkeeper;
use io_queue::IoQueue;
use keys::{block_key, file_key, file_value, parse_file_value, FileId, Stamp};
use parking_lot::{Mutex, RwLock};
use prefetch::{BlockOutcome, DepthCap, Stream};
use remote::Remote;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Deletions of old epochs' blocks waiting for the background thread (beyond it, they are left to
/// eviction).
pub const GARBAGE_QUEUE_FILES_MAX: usize = 256;
/// Keys per UNLINK of old blocks.
pub const UNLINK_BATCH_KEYS_MAX: usize = 1024;
/// Old epochs larger than this many blocks are left to eviction rather than deleted key by key.
pub const GARBAGE_FILE_BLOCKS_MAX: u64 = 1 << 20;

struct Validity {
    epoch: u64,
    /// The stamp the cached blocks of `epoch` belong to; None until the first open checked it.
    stamp: Option<Stamp>,
    checked_at: Instant,
    /// The file record in fallow is older than (epoch, stamp).
    record_dirty: bool,
}

/// The descriptor fills read from: O_DIRECT where the backing file system allows it, so the backing
/// file's page cache does not become a third level (or hide the device from benchmarks).
struct Reader {
    file: File,
    direct: bool,
}

/// One backing file's cache state (one per inode; it owns the inode's O_PATH descriptor).
pub struct FileState {
    pub opath: OwnedFd,
    id: OnceLock<FileId>,
    reader: Mutex<Option<Arc<Reader>>>,
    validity: Mutex<Validity>,
    write_gen: AtomicU64,
    pub fill_lock: RwLock<()>,
    pub open_handles: AtomicU32,
}

fn new_epoch() -> u64 {
    rand::random::<u64>() | 1
}

impl FileState {
    pub fn new(opath: OwnedFd) -> FileState {
        FileState {
            opath,
            id: OnceLock::new(),
            reader: Mutex::new(None),
            validity: Mutex::new(Validity {
                epoch: 0,
                stamp: None,
                checked_at: Instant::now(),
                record_dirty: false,
            }),
            write_gen: AtomicU64::new(0),
            fill_lock: RwLock::new(()),
            open_handles: AtomicU32::new(0),
        }
    }

    /// The backing file's identity; set by the first open (reads and writes only follow opens).
    pub fn id(&self) -> FileId {
        *self
            .id
            .get()
            .expect("a file's identity is set when it is opened")
    }

    pub fn write_gen(&self) -> u64 {
        self.write_gen.load(Relaxed)
    }

    fn stamp_now(&self) -> Result<Stamp, i32> {
        sys::fstat(self.opath.as_raw_fd()).map(|stat| Stamp::of(&stat))
    }

    /// Reads `count` blocks from `first` on from the backing file in one read (short at its end).
    pub fn read_blocks(&self, first: u64, count: u64, block_bytes: u64) -> Result<Vec<u8>, i32> {
        let reader = self.reader.lock().clone().ok_or(libc::EBADF)?;
        let (offset, len) = (first * block_bytes, count * block_bytes);
        if reader.direct {
            sys::pread_direct(&reader.file, offset, len as usize)
        } else {
            let bytes = sys::pread_full(&reader.file, offset, len as usize)?;
            sys::drop_page_cache(&reader.file, offset, len);
            Ok(bytes)
        }
    }

    fn bump_write_gen(&self) {
        let _exclusive = self.fill_lock.write();
        self.write_gen.fetch_add(1, Relaxed);
    }
}

/// The last block a handle read, kept for the next read in the same block (small reads, e.g. 4 KiB
/// through `--direct-io`, would otherwise fetch the whole block from fallow each time).
struct Memo {
    epoch: u64,
    block: u64,
    write_gen: u64,
    bytes: Arc<Vec<u8>>,
}

/// The cache's state of one open file handle.
pub struct OpenFile {
    pub stream: Mutex<Stream>,
    memo: Mutex<Option<Memo>>,
}

impl OpenFile {
    pub fn new(policy: Prefetch) -> OpenFile {
        OpenFile {
            stream: Mutex::new(Stream::new(policy)),
            memo: Mutex::new(None),
        }
    }

    /// The remembered block when `blocks` is just that block and no write changed the file since.
    fn remembered(
        &self,
        file: &FileState,
        epoch: u64,
        blocks: &std::ops::RangeInclusive<u64>,
    ) -> Option<Arc<Vec<u8>>> {
        let memo = self.memo.lock();
        let memo = memo.as_ref()?;
        let fresh = memo.epoch == epoch && memo.write_gen == file.write_gen();
        (fresh && *blocks.start() == memo.block && *blocks.end() == memo.block)
            .then(|| memo.bytes.clone())
    }

    fn remember(&self, file: &FileState, epoch: u64, block: u64, bytes: &Arc<Vec<u8>>) {
        *self.memo.lock() = Some(Memo {
            epoch,
            block,
            write_gen: file.write_gen(),
            bytes: bytes.clone(),
        });
    }
}

/// Settings the cache runs with.
#[derive(Clone, Copy, Debug)]
pub struct CacheSettings {
    pub block_bytes: u64,
    pub prefetch: Prefetch,
    pub revalidate: Duration,
}

/// An old epoch's blocks to delete in the background.
struct Garbage {
    id: FileId,
    epoch: u64,
    blocks: u64,
}

pub struct BlockCache {
    pub settings: CacheSettings,
    pub remote: Arc<Remote>,
    pub queue: Arc<IoQueue>,
    pub cap: DepthCap,
    /// The doorkeeper the I/O queue consults (None: --no-admission); the watcher feeds it the pool's state.
    pub admission: Option<Arc<Doorkeeper>>,
    counters: Arc<Counters>,
    garbage: SyncSender<Garbage>,
}

impl BlockCache {
    pub fn new(
        settings: CacheSettings,
        remote: Arc<Remote>,
        queue: Arc<IoQueue>,
        admission: Option<Arc<Doorkeeper>>,
        counters: Arc<Counters>,
    ) -> Arc<BlockCache> {
        let depth_max = match settings.prefetch {
            Prefetch::Feedback { depth_max } => depth_max,
            Prefetch::Fixed(depth) => depth,
            Prefetch::Off => 1,
        };
        let (garbage, pending) = std::sync::mpsc::sync_channel(GARBAGE_QUEUE_FILES_MAX);
        let cache = Arc::new(BlockCache {
            settings,
            remote,
            queue,
            cap: DepthCap::new(depth_max),
            admission,
            counters,
            garbage,
        });
        let collector = cache.clone();
        std::thread::Builder::new()
            .name("fs-garbage".into())
            .spawn(move || collector.collect_garbage(pending))
            .expect("spawn the garbage thread");
        cache
    }

    fn collect_garbage(&self, pending: Receiver<Garbage>) {
        while let Ok(old) = pending.recv() {
            let keys: Vec<Vec<u8>> = (0..old.blocks)
                .map(|block| block_key(old.id, old.epoch, block))
                .collect();
            for batch in keys.chunks(UNLINK_BATCH_KEYS_MAX) {
                if self.remote.unlink(batch).is_err() {
                    break;
                }
            }
        }
    }

    fn blocks_of(&self, size: u64) -> u64 {
        size.div_ceil(self.settings.block_bytes)
    }

    fn discard_epoch(&self, file: &FileState, epoch: u64, size: u64) {
        let blocks = self.blocks_of(size);
        if epoch == 0 || blocks == 0 || blocks > GARBAGE_FILE_BLOCKS_MAX {
            return;
        }
        let _ = self.garbage.try_send(Garbage {
            id: file.id(),
            epoch,
            blocks,
        });
    }

    /// At every open: records the file's identity and fill descriptor, and checks its stamp (close-to-open).
    /// Returns whether the kernel may keep the pages it cached for the file (false when it changed).
    pub fn open(&self, file: &FileState, opened: &File) -> Result<bool, i32> {
        let stat = sys::fstat(opened.as_raw_fd())?;
        let _ = file.id.set(FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
            igen: sys::inode_generation(opened),
        });
        {
            // The count rises under the reader lock: a release that saw it fall to 0 re-checks it under
            // the same lock before dropping the reader (RELEASE of an old handle races with this OPEN).
            let mut reader = file.reader.lock();
            if reader.is_none() {
                *reader = sys::open_reader(&file.opath)
                    .map(|(file, direct)| Arc::new(Reader { file, direct }));
            }
            file.open_handles.fetch_add(1, Relaxed);
        }
        self.counters.opens.fetch_add(1, Relaxed);
        match self.validate(file) {
            Ok(changed) => Ok(!changed),
            Err(code) => {
                // No handle comes of this open.
                self.release_count(file);
                Err(code)
            }
        }
    }

    /// At every release: the stream's unread read-ahead is wasted; the last close writes the file record.
    pub fn release(&self, file: &FileState, open: &OpenFile) {
        let unread = open.stream.lock().close();
        self.count_wasted(unread);
        self.release_count(file);
    }

    /// One handle fewer; the last one writes the file record and closes the fill descriptor.
    fn release_count(&self, file: &FileState) {
        if file.open_handles.fetch_sub(1, Relaxed) == 1 {
            self.write_record(file);
            let mut reader = file.reader.lock();
            // An open may have come while the record was written: its handle needs the reader.
            if file.open_handles.load(Relaxed) == 0 {
                *reader = None;
            }
        }
    }

    fn count_wasted(&self, blocks: u64) {
        self.counters.prefetch_wasted.fetch_add(blocks, Relaxed);
        self.counters
            .prefetch_wasted_bytes
            .fetch_add(blocks * self.settings.block_bytes, Relaxed);
    }

    /// Compares the backing file's stamp with the cached one. Ok(true): it changed behind the mount (a new
    /// epoch now; the caller drops the kernel's pages).
    pub fn validate(&self, file: &FileState) -> Result<bool, i32> {
        let now = file.stamp_now()?;
        let mut validity = file.validity.lock();
        match validity.stamp {
            Some(stamp) if stamp == now => {
                validity.checked_at = Instant::now();
                Ok(false)
            }
            Some(old) => {
                let old_epoch = validity.epoch;
                validity.epoch = new_epoch();
                validity.stamp = Some(now);
                validity.checked_at = Instant::now();
                validity.record_dirty = true;
                drop(validity);
                self.counters.stale_detected.fetch_add(1, Relaxed);
                file.bump_write_gen();
                self.discard_epoch(file, old_epoch, old.size);
                Ok(true)
            }
            None => {
                drop(validity);
                self.adopt_record(file, now);
                Ok(false)
            }
        }
    }

    /// First use of a file in this process: its blocks in fallow are reused when fallow's record of
    /// them names the file's current stamp; otherwise the file starts a new epoch.
    fn adopt_record(&self, file: &FileState, now: Stamp) {
        let record = self
            .remote
            .get_many(&[file_key(file.id())])
            .ok()
            .and_then(|mut values| values.pop().flatten())
            .and_then(|value| parse_file_value(&value));
        let mut validity = file.validity.lock();
        if validity.stamp.is_some() {
            return;
        }
        match record {
            Some((epoch, stamp)) if stamp == now && epoch != 0 => validity.epoch = epoch,
            _ => {
                validity.epoch = new_epoch();
                validity.record_dirty = true;
            }
        }
        validity.stamp = Some(now);
        validity.checked_at = Instant::now();
    }

    /// Writes the file record when it changed (the watcher's tick, and the last close).
    pub fn write_record(&self, file: &FileState) {
        let Some(id) = file.id.get().copied() else {
            return;
        };
        let value = {
            let mut validity = file.validity.lock();
            match validity.stamp {
                Some(stamp) if validity.record_dirty => {
                    validity.record_dirty = false;
                    file_value(validity.epoch, stamp)
                }
                _ => return,
            }
        };
        if !matches!(self.remote.set(&file_key(id), &value), Ok(true)) {
            file.validity.lock().record_dirty = true;
        }
    }

    /// The epoch and size to read with, revalidating first when the last check is older than the period.
    fn current(&self, file: &FileState) -> Result<(u64, u64), i32> {
        let due = file.validity.lock().checked_at.elapsed() >= self.settings.revalidate;
        if due {
            self.validate(file)?;
        }
        let validity = file.validity.lock();
        Ok((validity.epoch, validity.stamp.map_or(0, |stamp| stamp.size)))
    }

    /// Serves a read of `size` bytes at `offset` through the cache, and reads ahead.
    pub fn read(
        &self,
        file: &Arc<FileState>,
        handle: &File,
        open: &OpenFile,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        self.counters.reads.fetch_add(1, Relaxed);
        let (epoch, file_size) = self.current(file)?;
        if size == 0 || offset >= file_size || !self.remote.is_available() {
            return self.read_direct(handle, offset, size, offset < file_size);
        }
        let block_bytes = self.settings.block_bytes;
        let blocks = offset / block_bytes..=(offset + u64::from(size) - 1) / block_bytes;
        if let Some(bytes) = open.remembered(file, epoch, &blocks) {
            self.counters.cache_hits.fetch_add(1, Relaxed);
            self.counters.memo_hits.fetch_add(1, Relaxed);
            let from = (offset % block_bytes) as usize;
            let to = (from + size as usize)
                .min(bytes.len())
                .max(from.min(bytes.len()));
            let out = bytes[from.min(bytes.len())..to].to_vec();
            self.counters
                .read_bytes
                .fetch_add(out.len() as u64, Relaxed);
            self.read_ahead(file, &open.stream, epoch, file_size, offset, size, &[]);
            return Ok(out);
        }
        let keys: Vec<Vec<u8>> = blocks
            .clone()
            .map(|block| block_key(file.id(), epoch, block))
            .collect();
        let Ok(cached) = self.remote.get_many(&keys) else {
            return self.read_direct(handle, offset, size, true);
        };
        let blocks: Vec<u64> = blocks.collect();
        let cached: Vec<Option<Vec<u8>>> = blocks
            .iter()
            .zip(&keys)
            .zip(cached)
            .map(|((&block, key), cached)| {
                cached
                    .filter(|bytes| !self.is_stale_short_block(key, block, bytes.len(), file_size))
            })
            .collect();
        // Every missing block is asked for at once, so consecutive ones become one backing read.
        let missing: Vec<u64> = blocks
            .iter()
            .zip(&cached)
            .filter(|(_, cached)| cached.is_none())
            .map(|(&block, _)| block)
            .collect();
        // Only a miss needs to know (the stream's lock stays off the all-hits path).
        let for_stream = !missing.is_empty() && open.stream.lock().is_sequential();
        let mut fetched = self
            .queue
            .demand(file, epoch, &missing, for_stream)
            .into_iter();
        let mut out = Vec::with_capacity(size as usize);
        let mut outcomes = Vec::with_capacity(blocks.len());
        for (&block, cached) in blocks.iter().zip(cached) {
            let (bytes, hit) = match cached {
                Some(bytes) => {
                    self.counters
                        .cache_hit_bytes
                        .fetch_add(bytes.len() as u64, Relaxed);
                    (Arc::new(bytes), true)
                }
                None => {
                    let (outcome, in_flight) =
                        fetched.next().expect("one result per missing block");
                    (outcome?, in_flight)
                }
            };
            let counter = if hit {
                &self.counters.cache_hits
            } else {
                &self.counters.cache_misses
            };
            counter.fetch_add(1, Relaxed);
            outcomes.push((block, hit));
            open.remember(file, epoch, block, &bytes);
            let block_start = block * block_bytes;
            let from = (offset.max(block_start) - block_start) as usize;
            let to =
                ((offset + u64::from(size)).min(block_start + block_bytes) - block_start) as usize;
            if from >= bytes.len() {
                break;
            }
            out.extend_from_slice(&bytes[from..to.min(bytes.len())]);
            if (bytes.len() as u64) < block_bytes {
                break;
            }
        }
        self.read_ahead(
            file,
            &open.stream,
            epoch,
            file_size,
            offset,
            size,
            &outcomes,
        );
        self.counters
            .read_bytes
            .fetch_add(out.len() as u64, Relaxed);
        Ok(out)
    }

    /// A cached block shorter than a block ends the file; if the file is longer now (grown behind the
    /// mount within the revalidation period, or a hole written past it), the block is dropped and read again.
    fn is_stale_short_block(&self, key: &[u8], block: u64, len: usize, file_size: u64) -> bool {
        let block_bytes = self.settings.block_bytes;
        let stale = (len as u64) < block_bytes && block * block_bytes + (len as u64) < file_size;
        if stale {
            self.counters.short_blocks_refetched.fetch_add(1, Relaxed);
            let _ = self.remote.unlink(&[key.to_vec()]);
        }
        stale
    }

    #[allow(clippy::too_many_arguments)]
    fn read_ahead(
        &self,
        file: &Arc<FileState>,
        stream: &Mutex<Stream>,
        epoch: u64,
        file_size: u64,
        offset: u64,
        size: u32,
        outcomes: &[(u64, bool)],
    ) {
        let policy = self.settings.prefetch;
        let block_bytes = self.settings.block_bytes;
        let (issue, wasted, already_cached) = {
            let mut stream = stream.lock();
            let before = stream.depth_blocks();
            for &(block, hit) in outcomes {
                match stream.on_block(policy, block, hit, &self.cap) {
                    BlockOutcome::Used => drop(self.counters.prefetch_used.fetch_add(1, Relaxed)),
                    BlockOutcome::Evicted => self.count_wasted(1),
                    BlockOutcome::NotPrefetched => {}
                }
            }
            let plan = stream.on_read(
                policy,
                offset,
                u64::from(size),
                block_bytes,
                self.blocks_of(file_size),
                &self.cap,
            );
            if stream.depth_blocks() > before {
                self.counters.prefetch_depth_increases.fetch_add(1, Relaxed);
            }
            let (issue, wasted) = plan;
            // The counter the I/O threads add to, taken only by reads that read ahead.
            let already_cached = (!issue.is_empty()).then(|| stream.already_cached_counter());
            (issue, wasted, already_cached)
        };
        self.count_wasted(wasted);
        let Some(already_cached) = already_cached else {
            return;
        };
        let prefetched = self
            .queue
            .prefetch(file, epoch, issue.clone(), &already_cached);
        self.counters
            .prefetch_issued
            .fetch_add(prefetched.queued, Relaxed);
        let skipped = issue.end - issue.start - prefetched.covered;
        let mut stream = stream.lock();
        // Blocks another request is reading are not this stream's read-ahead: neither used nor wasted.
        stream.not_ours(&prefetched.in_flight);
        if skipped > 0 {
            self.counters.prefetch_skipped.fetch_add(skipped, Relaxed);
            stream.not_issued(issue.start + prefetched.covered..issue.end);
        }
    }

    /// Straight from the backing file (fallow away, or at/after the end of the file).
    fn read_direct(
        &self,
        handle: &File,
        offset: u64,
        size: u32,
        counted: bool,
    ) -> Result<Vec<u8>, i32> {
        let bytes = sys::pread_full(handle, offset, size as usize)?;
        if counted {
            self.counters.direct_reads.fetch_add(1, Relaxed);
        }
        self.counters.backing_reads.fetch_add(1, Relaxed);
        self.counters
            .backing_read_bytes
            .fetch_add(bytes.len() as u64, Relaxed);
        self.counters
            .read_bytes
            .fetch_add(bytes.len() as u64, Relaxed);
        Ok(bytes)
    }

    /// Writes `data` at `offset` through to the backing file, then deletes the blocks it changed.
    pub fn write(
        &self,
        file: &FileState,
        handle: &File,
        append: bool,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, i32> {
        let (written, at, old_size) = {
            // Held across the write and the new stamp, so the revalidation never takes this process's
            // own write for a change behind the mount.
            let mut validity = file.validity.lock();
            let old_size = validity.stamp.map(|stamp| stamp.size);
            let written = sys::pwrite_all(handle, data, offset)?;
            let now = file.stamp_now()?;
            let at = if append {
                now.size.saturating_sub(written as u64)
            } else {
                offset
            };
            if validity.stamp.is_some() {
                validity.stamp = Some(now);
                validity.record_dirty = true;
            }
            (written, at, old_size)
        };
        self.counters.writes.fetch_add(1, Relaxed);
        self.counters.write_bytes.fetch_add(written as u64, Relaxed);
        self.invalidate(file, at, written as u64, old_size);
        Ok(written)
    }

    /// Deletes the blocks of bytes `at..at+len` (and the old last block when they leave a hole after it).
    pub fn invalidate(&self, file: &FileState, at: u64, len: u64, old_size: Option<u64>) {
        file.bump_write_gen();
        let Some(id) = file.id.get().copied() else {
            return;
        };
        let block_bytes = self.settings.block_bytes;
        let epoch = file.validity.lock().epoch;
        let mut blocks: Vec<u64> =
            (at / block_bytes..=(at + len.max(1) - 1) / block_bytes).collect();
        if let Some(old_size) = old_size.filter(|&old_size| at > old_size) {
            blocks.push(old_size / block_bytes);
        }
        let keys: Vec<Vec<u8>> = blocks
            .iter()
            .map(|&block| block_key(id, epoch, block))
            .collect();
        self.counters
            .invalidations
            .fetch_add(keys.len() as u64, Relaxed);
        if self.remote.unlink(&keys).is_err() {
            // The blocks may still be in fallow: none of this epoch may be read again.
            self.new_epoch(file);
        }
    }

    /// The file's contents changed wholesale (truncate): a new epoch, the old one deleted in the background.
    pub fn new_epoch(&self, file: &FileState) {
        let (old_epoch, old_size) = {
            let mut validity = file.validity.lock();
            let old = (validity.epoch, validity.stamp.map_or(0, |stamp| stamp.size));
            validity.epoch = new_epoch();
            validity.record_dirty = true;
            if let Ok(now) = file.stamp_now() {
                if validity.stamp.is_some() {
                    validity.stamp = Some(now);
                }
            }
            old
        };
        file.bump_write_gen();
        if file.id.get().is_some() {
            self.discard_epoch(file, old_epoch, old_size);
        }
    }

    /// After this process changed the file's metadata (chmod, utimes, chown): the new stamp is its own.
    pub fn restamp(&self, file: &FileState) {
        let mut validity = file.validity.lock();
        if validity.stamp.is_some() {
            if let Ok(now) = file.stamp_now() {
                validity.stamp = Some(now);
                validity.record_dirty = true;
            }
        }
    }
}
