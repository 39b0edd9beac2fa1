//! Read-ahead: finding sequential streams per open file and choosing how far ahead to read.
//!
//! Mortar fixed the depth at start. Feedback-directed read-ahead (after Srinath et al., Mortar's ref. [22])
//! adapts it per stream:
//!
//! | event                                                        | depth            |
//! |--------------------------------------------------------------|------------------|
//! | a full depth's worth of prefetched blocks used, pool has room | doubles (≤ cap)  |
//! | a prefetched block evicted before it was read                 | halves (≥ 1)     |
//! | prefetched blocks left unread (the stream jumped or closed)   | halves           |
//! | accuracy (used / (used + wasted)) below `ACCURACY_MIN`        | halves           |
//! | the pool shrank (its target fell)                             | halves, ≤ cap    |
//!
//! `cap` is the pool's room shared among the active streams (`DepthCap`), so read-ahead never takes more of
//! the pool than is free. A stream is sequential after `SEQUENTIAL_READS_MIN` reads that each start where
//! the previous ended (or in the block it ended in: the kernel splits and repeats reads).
use crate::options::Prefetch;
use std::collections::BTreeSet;
use std::ops::Range;

pub const SEQUENTIAL_READS_MIN: u32 = 2;
pub const FEEDBACK_DEPTH_INITIAL: u32 = 4;
/// Below this accuracy over the recent window, the depth halves.
pub const ACCURACY_MIN: f64 = 0.5;
/// Prefetched blocks a stream remembers (unread); more are not issued.
pub const OUTSTANDING_BLOCKS_MAX: usize = 4096;
/// A read this many blocks (or the depth, when larger) from where the stream's reads reached still
/// continues it.
pub const REORDER_WINDOW_BLOCKS: u32 = 4;

/// What one stream's block reads told the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOutcome {
    /// A prefetched block was read from the cache.
    Used,
    /// A prefetched block was gone when read (evicted unused): its read-ahead was wasted.
    Evicted,
    /// The block was not prefetched.
    NotPrefetched,
}

/// One open file's access stream.
#[derive(Debug)]
pub struct Stream {
    next_offset: u64,
    sequential_reads: u32,
    depth_blocks: u32,
    /// Blocks below this were already issued (or read) in this run.
    issued_through: u64,
    outstanding: BTreeSet<u64>,
    used_since_growth: u32,
    /// The pool-shrink count last seen (`DepthCap::shrinks`).
    shrinks_seen: u64,
    window_used: u32,
    window_wasted: u32,
    pub used_total: u64,
    pub wasted_total: u64,
}

impl Stream {
    pub fn new(policy: Prefetch) -> Stream {
        let depth_blocks = match policy {
            Prefetch::Off => 0,
            Prefetch::Fixed(depth) => depth,
            Prefetch::Feedback { depth_max } => FEEDBACK_DEPTH_INITIAL.min(depth_max),
        };
        Stream {
            next_offset: 0,
            sequential_reads: 0,
            depth_blocks,
            issued_through: 0,
            outstanding: BTreeSet::new(),
            used_since_growth: 0,
            shrinks_seen: 0,
            window_used: 0,
            window_wasted: 0,
            used_total: 0,
            wasted_total: 0,
        }
    }

    pub fn depth_blocks(&self) -> u32 {
        self.depth_blocks
    }

    pub fn is_sequential(&self) -> bool {
        self.sequential_reads >= SEQUENTIAL_READS_MIN
    }

    /// A read of `len` bytes at `offset` arrives: updates the stream and returns the blocks to read ahead
    /// (none while the stream is not sequential), given `file_blocks` in the file and the pool's `cap`.
    /// Blocks left unread when the stream jumps count as wasted (returned second).
    pub fn on_read(
        &mut self,
        policy: Prefetch,
        offset: u64,
        len: u64,
        block_bytes: u64,
        file_blocks: u64,
        cap: &DepthCap,
    ) -> (Range<u64>, u64) {
        // Reads of one stream arrive out of order (the kernel's read-ahead requests are served by
        // several threads), so "where the last ended" is a window, not a point.
        let window_bytes = u64::from(self.depth_blocks.max(REORDER_WINDOW_BLOCKS)) * block_bytes;
        let continues =
            self.sequential_reads > 0 && offset.abs_diff(self.next_offset) <= window_bytes;
        let mut wasted = 0;
        if continues {
            self.sequential_reads = self.sequential_reads.saturating_add(1);
        } else {
            wasted = self.abandon();
            self.sequential_reads = 1;
            self.issued_through = 0;
        }
        self.next_offset = if continues {
            self.next_offset.max(offset + len)
        } else {
            offset + len
        };
        if wasted > 0 {
            self.on_waste(policy, wasted as u32);
        }
        self.follow_cap(policy, cap);
        if policy == Prefetch::Off || !self.is_sequential() || self.depth_blocks == 0 {
            return (0..0, wasted);
        }
        let last_read_block = (offset + len.max(1) - 1) / block_bytes;
        let from = self
            .issued_through
            .max(last_read_block + 1)
            .max(self.next_offset.div_ceil(block_bytes));
        let to = (last_read_block + 1 + u64::from(self.depth_blocks)).min(file_blocks);
        if from >= to || self.outstanding.len() >= OUTSTANDING_BLOCKS_MAX {
            return (0..0, wasted);
        }
        let to = to.min(from + (OUTSTANDING_BLOCKS_MAX - self.outstanding.len()) as u64);
        self.outstanding.extend(from..to);
        self.issued_through = to;
        (from..to, wasted)
    }

    /// A prefetch of `block` was not issued after all (queue full, fallow away): forget it.
    pub fn not_issued(&mut self, blocks: Range<u64>) {
        for block in blocks.clone() {
            self.outstanding.remove(&block);
        }
        self.issued_through = self.issued_through.min(blocks.start);
    }

    /// The read of `block` found it in the cache (`hit`) or not.
    pub fn on_block(
        &mut self,
        policy: Prefetch,
        block: u64,
        hit: bool,
        cap: &DepthCap,
    ) -> BlockOutcome {
        if !self.outstanding.remove(&block) {
            return BlockOutcome::NotPrefetched;
        }
        if !hit {
            self.on_waste(policy, 1);
            return BlockOutcome::Evicted;
        }
        self.used_total += 1;
        self.window_used += 1;
        self.used_since_growth += 1;
        if let Prefetch::Feedback { depth_max } = policy {
            let room = cap.blocks().min(depth_max);
            if self.used_since_growth >= self.depth_blocks && self.depth_blocks < room {
                self.depth_blocks = (self.depth_blocks * 2).clamp(1, room);
                self.used_since_growth = 0;
            }
        }
        self.end_window(policy);
        BlockOutcome::Used
    }

    /// The file is closed: every block still outstanding was read ahead for nothing. Returns their count.
    pub fn close(&mut self) -> u64 {
        self.abandon()
    }

    fn abandon(&mut self) -> u64 {
        let unread = self.outstanding.len() as u64;
        self.outstanding.clear();
        self.wasted_total += unread;
        unread
    }

    fn on_waste(&mut self, policy: Prefetch, blocks: u32) {
        self.window_wasted += blocks;
        if matches!(policy, Prefetch::Feedback { .. }) {
            self.halve();
        }
        self.end_window(policy);
    }

    /// Every 32 outcomes, the window's accuracy is judged and the window restarts.
    fn end_window(&mut self, policy: Prefetch) {
        let outcomes = self.window_used + self.window_wasted;
        if outcomes < 32 {
            return;
        }
        let accuracy = f64::from(self.window_used) / f64::from(outcomes);
        if accuracy < ACCURACY_MIN && matches!(policy, Prefetch::Feedback { .. }) {
            self.halve();
        }
        self.window_used = 0;
        self.window_wasted = 0;
    }

    fn halve(&mut self) {
        self.depth_blocks = (self.depth_blocks / 2).max(1);
        self.used_since_growth = 0;
    }

    fn follow_cap(&mut self, policy: Prefetch, cap: &DepthCap) {
        if !matches!(policy, Prefetch::Feedback { .. }) {
            return;
        }
        let shrinks = cap.shrinks();
        if shrinks != self.shrinks_seen {
            self.shrinks_seen = shrinks;
            self.halve();
        }
        self.depth_blocks = self.depth_blocks.min(cap.blocks().max(1));
    }
}

/// The pool's room as a per-stream depth bound, updated from fallow's INFO (`pool_target_bytes`,
/// `pool_resident_bytes`) by the pool watcher; read by every stream.
#[derive(Debug)]
pub struct DepthCap {
    blocks: std::sync::atomic::AtomicU32,
    shrinks: std::sync::atomic::AtomicU64,
    last_target_bytes: std::sync::atomic::AtomicU64,
}

/// A target this much below the last one counts as the pool shrinking (in parts per thousand).
const SHRINK_PER_MILLE: u64 = 950;

impl DepthCap {
    pub fn new(blocks: u32) -> DepthCap {
        DepthCap {
            blocks: blocks.into(),
            shrinks: 0.into(),
            last_target_bytes: 0.into(),
        }
    }

    pub fn blocks(&self) -> u32 {
        self.blocks.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn shrinks(&self) -> u64 {
        self.shrinks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new reading of the pool: half its free room, shared by `streams` streams, in blocks (1..=max).
    /// `target_bytes` 0 means no limit (fixed mode without maxmemory): the cap is `depth_max`.
    pub fn update(
        &self,
        target_bytes: u64,
        resident_bytes: u64,
        streams: u64,
        block_bytes: u64,
        depth_max: u32,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        let blocks = if target_bytes == 0 {
            depth_max
        } else {
            let room = target_bytes.saturating_sub(resident_bytes) / 2;
            (room / block_bytes / streams.max(1)).clamp(1, u64::from(depth_max)) as u32
        };
        self.blocks.store(blocks, Relaxed);
        let last = self.last_target_bytes.swap(target_bytes, Relaxed);
        if last != 0 && target_bytes < last / 1000 * SHRINK_PER_MILLE {
            self.shrinks.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 128 << 10;
    const FEEDBACK: Prefetch = Prefetch::Feedback { depth_max: 64 };

    /// Reads a file sequentially in `read_bytes` reads, every prefetched block found (or, with `hit`
    /// false, evicted); returns the depths seen after each read.
    fn sequential(
        stream: &mut Stream,
        policy: Prefetch,
        reads: u64,
        read_bytes: u64,
        hit: bool,
        cap: &DepthCap,
    ) -> Vec<u32> {
        let mut depths = vec![];
        for index in 0..reads {
            let offset = index * read_bytes;
            for block in offset / BLOCK..=(offset + read_bytes - 1) / BLOCK {
                stream.on_block(policy, block, hit, cap);
            }
            stream.on_read(policy, offset, read_bytes, BLOCK, 1 << 20, cap);
            depths.push(stream.depth_blocks());
        }
        depths
    }

    #[test]
    fn a_sequential_stream_is_found_after_two_reads_and_read_ahead_follows_it() {
        let cap = DepthCap::new(64);
        let mut stream = Stream::new(Prefetch::Fixed(8));
        assert_eq!(
            stream
                .on_read(Prefetch::Fixed(8), 0, BLOCK, BLOCK, 100, &cap)
                .0,
            0..0
        );
        assert_eq!(
            stream
                .on_read(Prefetch::Fixed(8), BLOCK, BLOCK, BLOCK, 100, &cap)
                .0,
            2..10
        );
        // The next read issues only the block that entered the window.
        assert_eq!(
            stream
                .on_read(Prefetch::Fixed(8), 2 * BLOCK, BLOCK, BLOCK, 100, &cap)
                .0,
            10..11
        );
        // Never past the end of the file.
        let mut near_end = Stream::new(Prefetch::Fixed(8));
        near_end.on_read(Prefetch::Fixed(8), 0, BLOCK, BLOCK, 3, &cap);
        assert_eq!(
            near_end
                .on_read(Prefetch::Fixed(8), BLOCK, BLOCK, BLOCK, 3, &cap)
                .0,
            2..3
        );
    }

    #[test]
    fn random_reads_issue_nothing_and_waste_what_was_outstanding() {
        let cap = DepthCap::new(64);
        let mut stream = Stream::new(Prefetch::Fixed(4));
        stream.on_read(Prefetch::Fixed(4), 0, 4096, BLOCK, 1000, &cap);
        let (issued, _) = stream.on_read(Prefetch::Fixed(4), 4096, 4096, BLOCK, 1000, &cap);
        assert_eq!(issued, 1..5);
        let (issued, wasted) =
            stream.on_read(Prefetch::Fixed(4), 500 * BLOCK, 4096, BLOCK, 1000, &cap);
        assert_eq!((issued, wasted), (0..0, 4));
        assert_eq!(
            stream.on_read(Prefetch::Off, 7, 1, BLOCK, 1000, &cap).0,
            0..0
        );
    }

    #[test]
    fn feedback_depth_grows_while_used_and_stops_at_the_cap() {
        let cap = DepthCap::new(16);
        let mut stream = Stream::new(FEEDBACK);
        let depths = sequential(&mut stream, FEEDBACK, 200, BLOCK, true, &cap);
        assert_eq!(depths[0], FEEDBACK_DEPTH_INITIAL);
        assert_eq!(*depths.last().unwrap(), 16, "{depths:?}");
        assert!(
            depths.windows(2).all(|pair| pair[1] >= pair[0]),
            "only grows while used: {depths:?}"
        );
        assert_eq!(stream.wasted_total, 0);
    }

    #[test]
    fn evictions_and_pool_shrinks_halve_the_depth() {
        let cap = DepthCap::new(64);
        let mut stream = Stream::new(FEEDBACK);
        sequential(&mut stream, FEEDBACK, 300, BLOCK, true, &cap);
        assert_eq!(stream.depth_blocks(), 64);
        // A prefetched block evicted before its read.
        let next = 300;
        assert_eq!(
            stream.on_block(FEEDBACK, next, false, &cap),
            BlockOutcome::Evicted
        );
        assert_eq!(stream.depth_blocks(), 32);
        // The pool's target falls by half: the next read halves again and obeys the new cap.
        cap.update(1 << 30, 0, 1, BLOCK, 64);
        cap.update(1 << 29, (1 << 29) - 8 * BLOCK, 1, BLOCK, 64);
        assert_eq!(cap.blocks(), 4);
        stream.on_read(FEEDBACK, 301 * BLOCK, BLOCK, BLOCK, 1 << 20, &cap);
        assert_eq!(stream.depth_blocks(), 4);
    }

    #[test]
    fn fixed_depth_never_changes() {
        let cap = DepthCap::new(2);
        let mut stream = Stream::new(Prefetch::Fixed(8));
        let depths = sequential(&mut stream, Prefetch::Fixed(8), 50, BLOCK, false, &cap);
        assert!(depths.iter().all(|&depth| depth == 8), "{depths:?}");
    }

    #[test]
    fn the_cap_shares_half_the_room_among_streams() {
        let cap = DepthCap::new(64);
        cap.update(100 * BLOCK, 20 * BLOCK, 4, BLOCK, 64);
        assert_eq!(cap.blocks(), 10);
        cap.update(0, 5, 4, BLOCK, 64);
        assert_eq!(cap.blocks(), 64, "no limit");
        cap.update(100 * BLOCK, 100 * BLOCK, 1, BLOCK, 64);
        assert_eq!(cap.blocks(), 1, "never zero");
    }

    proptest::proptest! {
        /// Whatever the reads, the depth stays within 1..=depth_max and the outstanding set within its bound.
        #[test]
        fn depth_stays_in_bounds(reads in proptest::collection::vec((0u64..64 * BLOCK, 1u64..4 * BLOCK, proptest::bool::ANY), 1..300)) {
            let cap = DepthCap::new(64);
            let mut stream = Stream::new(FEEDBACK);
            for (offset, len, hit) in reads {
                stream.on_block(FEEDBACK, offset / BLOCK, hit, &cap);
                let (issued, _) = stream.on_read(FEEDBACK, offset, len, BLOCK, 80, &cap);
                proptest::prop_assert!(issued.end <= 80);
                proptest::prop_assert!((1..=64).contains(&stream.depth_blocks()));
                proptest::prop_assert!(stream.outstanding.len() <= OUTSTANDING_BLOCKS_MAX);
            }
        }
    }
}
