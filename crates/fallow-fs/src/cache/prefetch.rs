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
//! | ¾ of a window of read-ahead found already in fallow           | 0 until a miss   |
//! | a read misses while read-ahead is paused so                   | initial depth    |
//!
//! Read-ahead of blocks fallow already holds reads nothing from the device but still costs a request per
//! block (a looping stream whose file the pool holds whole): feedback pauses it, and the first read that
//! misses resumes it.
//!
//! `cap` is the pool's room shared among the active streams (`DepthCap`), so read-ahead never takes more of
//! the pool than is free. A stream is sequential after `SEQUENTIAL_READS_MIN` reads that each start where
//! the previous ended (or in the block it ended in: the kernel splits and repeats reads).
use crate::options::Prefetch;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

pub const SEQUENTIAL_READS_MIN: u32 = 3;
pub const FEEDBACK_DEPTH_INITIAL: u32 = 4;
/// Below this accuracy over the recent window, the depth halves.
pub const ACCURACY_MIN: f64 = 0.5;
/// Prefetched blocks a stream remembers (unread); more are not issued.
pub const OUTSTANDING_BLOCKS_MAX: usize = 4096;
/// The largest read the kernel sends (max_pages): the kernel's read-ahead requests arrive out of order
/// over several threads, so a read up to one request past where the stream reached still continues it.
pub const REQUEST_BYTES_MAX: u64 = 1 << 20;
/// A read this far behind the last one is a late request of the same stream, not a jump.
pub const REORDER_BYTES_MAX: u64 = 4 << 20;
/// Feedback read-ahead that fell to depth 0 (useless for this stream) probes again with depth 1 after
/// this many forward reads in a row.
pub const PROBE_READS: u32 = 8;
/// Read-ahead blocks per judgement of how many fallow already held.
pub const ALREADY_CACHED_WINDOW_BLOCKS: u32 = 32;

enum Step {
    Forward,
    Reordered,
    Jump,
}

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
    /// Where the last read started.
    last_offset: u64,
    /// Forward reads in a row (the first read counts one).
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
    /// Read-ahead blocks the I/O threads found fallow already holding (they add, the stream takes).
    already_cached: Arc<AtomicU32>,
    window_issued: u32,
    window_already_cached: u32,
    /// Feedback paused read-ahead because its blocks were cached already; a miss resumes it.
    paused_while_cached: bool,
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
            last_offset: 0,
            sequential_reads: 0,
            depth_blocks,
            issued_through: 0,
            outstanding: BTreeSet::new(),
            used_since_growth: 0,
            shrinks_seen: 0,
            window_used: 0,
            window_wasted: 0,
            already_cached: Arc::default(),
            window_issued: 0,
            window_already_cached: 0,
            paused_while_cached: false,
            used_total: 0,
            wasted_total: 0,
        }
    }

    pub fn depth_blocks(&self) -> u32 {
        self.depth_blocks
    }

    /// What the I/O threads add to when a block this stream read ahead was in fallow already.
    pub fn already_cached_counter(&self) -> Arc<AtomicU32> {
        self.already_cached.clone()
    }

    pub fn is_paused_while_cached(&self) -> bool {
        self.paused_while_cached
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
        let mut wasted = 0;
        match self.classify(offset, len) {
            Step::Forward => {
                self.sequential_reads = self.sequential_reads.saturating_add(1);
                self.next_offset = self.next_offset.max(offset + len);
            }
            // A request the kernel issued earlier, served late by another thread: neither evidence
            // for the stream nor against it.
            Step::Reordered => {}
            Step::Jump => {
                wasted = self.abandon();
                self.sequential_reads = 1;
                self.issued_through = 0;
                self.next_offset = offset + len;
            }
        }
        self.last_offset = offset;
        if wasted > 0 {
            self.on_waste(policy, wasted as u32);
        }
        self.follow_cap(policy, cap);
        self.judge_already_cached(policy);
        let probing = matches!(policy, Prefetch::Feedback { .. })
            && self.depth_blocks == 0
            && !self.paused_while_cached;
        if probing && self.sequential_reads >= PROBE_READS {
            self.depth_blocks = 1;
        }
        if policy == Prefetch::Off || !self.is_sequential() || self.depth_blocks == 0 {
            return (0..0, wasted);
        }
        let reached = self.next_offset.div_ceil(block_bytes);
        let from = self.issued_through.max(reached);
        let to = (reached + u64::from(self.depth_blocks)).min(file_blocks);
        if from >= to || self.outstanding.len() >= OUTSTANDING_BLOCKS_MAX {
            return (0..0, wasted);
        }
        let to = to.min(from + (OUTSTANDING_BLOCKS_MAX - self.outstanding.len()) as u64);
        self.outstanding.extend(from..to);
        self.issued_through = to;
        self.window_issued = self.window_issued.saturating_add((to - from) as u32);
        (from..to, wasted)
    }

    /// Where a read of `len` bytes at `offset` stands to the stream: forward from the last read, at most
    /// two such reads past where the reads reached (one request overtaken by the next); a little behind
    /// (reordered); or anywhere else (a jump). Small random reads so rarely land in that window twice in a
    /// row that they are not taken for a stream.
    fn classify(&self, offset: u64, len: u64) -> Step {
        if self.sequential_reads == 0 {
            return Step::Jump;
        }
        // An established stream tolerates requests overtaking each other as far as it does late ones.
        let gap_bytes = if self.is_sequential() {
            REORDER_BYTES_MAX
        } else {
            (2 * len).min(REQUEST_BYTES_MAX)
        };
        if offset >= self.last_offset && offset <= self.next_offset + gap_bytes {
            Step::Forward
        } else if offset < self.last_offset && self.last_offset - offset <= REORDER_BYTES_MAX {
            Step::Reordered
        } else {
            Step::Jump
        }
    }

    /// A prefetch of `block` was not issued after all (queue full, fallow away): forget it.
    pub fn not_issued(&mut self, blocks: Range<u64>) {
        for block in blocks.clone() {
            self.outstanding.remove(&block);
        }
        self.issued_through = self.issued_through.min(blocks.start);
    }

    /// `blocks` were being read for another request when read-ahead reached them: not outstanding.
    pub fn not_ours(&mut self, blocks: &[u64]) {
        for block in blocks {
            self.outstanding.remove(block);
        }
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
            if !hit && self.paused_while_cached {
                self.resume(policy);
            }
            return BlockOutcome::NotPrefetched;
        }
        if !hit {
            self.on_waste(policy, 1);
            return BlockOutcome::Evicted;
        }
        self.used_total += 1;
        self.window_used += 1;
        self.used_since_growth += 1;
        if let (Prefetch::Feedback { depth_max }, false) = (policy, self.paused_while_cached) {
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

    /// Pauses feedback read-ahead when most of a window of it found fallow holding the blocks already.
    fn judge_already_cached(&mut self, policy: Prefetch) {
        if !matches!(policy, Prefetch::Feedback { .. }) {
            return;
        }
        self.window_already_cached += self.already_cached.swap(0, Ordering::Relaxed);
        if self.window_issued < ALREADY_CACHED_WINDOW_BLOCKS {
            return;
        }
        if self.window_already_cached * 4 >= self.window_issued * 3 {
            self.paused_while_cached = true;
            self.depth_blocks = 0;
            self.used_since_growth = 0;
        }
        self.window_issued = 0;
        self.window_already_cached = 0;
    }

    /// A read missed while read-ahead was paused: the stream left what fallow holds.
    fn resume(&mut self, policy: Prefetch) {
        self.paused_while_cached = false;
        if let Prefetch::Feedback { depth_max } = policy {
            self.depth_blocks = FEEDBACK_DEPTH_INITIAL.min(depth_max);
            self.used_since_growth = 0;
        }
    }

    fn halve(&mut self) {
        self.depth_blocks /= 2;
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
    fn a_sequential_stream_is_found_after_three_reads_and_read_ahead_follows_it() {
        let cap = DepthCap::new(64);
        let fixed = Prefetch::Fixed(8);
        let mut stream = Stream::new(fixed);
        assert_eq!(stream.on_read(fixed, 0, BLOCK, BLOCK, 100, &cap).0, 0..0);
        assert_eq!(
            stream.on_read(fixed, BLOCK, BLOCK, BLOCK, 100, &cap).0,
            0..0
        );
        assert_eq!(
            stream.on_read(fixed, 2 * BLOCK, BLOCK, BLOCK, 100, &cap).0,
            3..11
        );
        // The next read issues only the block that entered the window.
        assert_eq!(
            stream.on_read(fixed, 3 * BLOCK, BLOCK, BLOCK, 100, &cap).0,
            11..12
        );
        // A late request behind the stream changes nothing; a jump starts over.
        assert_eq!(
            stream.on_read(fixed, BLOCK, BLOCK, BLOCK, 100, &cap),
            (0..0, 0)
        );
        assert!(stream.is_sequential());
        // Requests overtaking others up to 4 MiB ahead continue an established stream (the blocks
        // between are other requests' to read).
        assert_eq!(
            stream.on_read(fixed, 16 * BLOCK, BLOCK, BLOCK, 100, &cap).0,
            17..25
        );
        assert!(stream.is_sequential());
        assert_eq!(
            stream.on_read(fixed, 90 * BLOCK, BLOCK, BLOCK, 100, &cap),
            (0..0, 17)
        );
        assert!(!stream.is_sequential());
        // Never past the end of the file.
        let mut near_end = Stream::new(fixed);
        for index in 0..3 {
            near_end.on_read(fixed, index * BLOCK, BLOCK, BLOCK, 5, &cap);
        }
        assert_eq!(
            near_end.outstanding.iter().copied().collect::<Vec<_>>(),
            vec![3, 4]
        );
    }

    #[test]
    fn random_reads_issue_nothing_and_waste_what_was_outstanding() {
        let cap = DepthCap::new(64);
        let fixed = Prefetch::Fixed(4);
        let mut stream = Stream::new(fixed);
        stream.on_read(fixed, 0, 4096, BLOCK, 1000, &cap);
        stream.on_read(fixed, 4096, 4096, BLOCK, 1000, &cap);
        let (issued, _) = stream.on_read(fixed, 8192, 4096, BLOCK, 1000, &cap);
        assert_eq!(issued, 1..5);
        let (issued, wasted) = stream.on_read(fixed, 500 * BLOCK, 4096, BLOCK, 1000, &cap);
        assert_eq!((issued, wasted), (0..0, 4));
        assert_eq!(
            stream.on_read(Prefetch::Off, 7, 1, BLOCK, 1000, &cap).0,
            0..0
        );
    }

    #[test]
    fn feedback_turns_read_ahead_off_for_a_stream_it_does_not_help_and_probes_again() {
        let cap = DepthCap::new(64);
        let mut stream = Stream::new(FEEDBACK);
        // Short sequential bursts, each abandoned: every jump wastes what was read ahead.
        for burst in 0..6u64 {
            for index in 0..3 {
                stream.on_read(
                    FEEDBACK,
                    (burst * 1000 + index) * BLOCK,
                    BLOCK,
                    BLOCK,
                    1 << 20,
                    &cap,
                );
            }
        }
        assert_eq!(stream.depth_blocks(), 0, "read-ahead off");
        let (issued, _) = stream.on_read(FEEDBACK, 6000 * BLOCK, BLOCK, BLOCK, 1 << 20, &cap);
        assert!(issued.is_empty());
        for index in 1..PROBE_READS as u64 {
            stream.on_read(
                FEEDBACK,
                (6000 + index) * BLOCK,
                BLOCK,
                BLOCK,
                1 << 20,
                &cap,
            );
        }
        assert_eq!(stream.depth_blocks(), 1, "a long forward run probes again");
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

    /// Reads `reads` blocks sequentially from `first`, every block a hit and every read-ahead block found
    /// in fallow already (a file the pool holds whole); returns the blocks issued by the last half.
    fn over_a_cached_file(stream: &mut Stream, policy: Prefetch, first: u64, reads: u64) -> u64 {
        let cap = DepthCap::new(64);
        let counter = stream.already_cached_counter();
        let mut issued_late = 0;
        for block in first..first + reads {
            stream.on_block(policy, block, true, &cap);
            let (issued, _) = stream.on_read(policy, block * BLOCK, BLOCK, BLOCK, 1 << 20, &cap);
            counter.fetch_add((issued.end - issued.start) as u32, Ordering::Relaxed);
            if block >= first + reads / 2 {
                issued_late += issued.end - issued.start;
            }
        }
        issued_late
    }

    #[test]
    fn feedback_pauses_read_ahead_that_finds_its_blocks_cached_until_a_read_misses() {
        let cap = DepthCap::new(64);
        let mut stream = Stream::new(FEEDBACK);
        assert_eq!(over_a_cached_file(&mut stream, FEEDBACK, 0, 200), 0);
        assert!(stream.is_paused_while_cached());
        assert_eq!(stream.depth_blocks(), 0);
        // Hits keep it paused, without probes.
        assert_eq!(over_a_cached_file(&mut stream, FEEDBACK, 200, 40), 0);
        // The stream reaches blocks fallow lacks: the first miss resumes read-ahead at the initial depth.
        stream.on_block(FEEDBACK, 240, false, &cap);
        assert!(!stream.is_paused_while_cached());
        let (issued, _) = stream.on_read(FEEDBACK, 240 * BLOCK, BLOCK, BLOCK, 1 << 20, &cap);
        assert_eq!(issued, 241..241 + u64::from(FEEDBACK_DEPTH_INITIAL));
        // A fixed depth reads ahead whatever fallow holds.
        let mut fixed = Stream::new(Prefetch::Fixed(8));
        assert_eq!(
            over_a_cached_file(&mut fixed, Prefetch::Fixed(8), 0, 200),
            100
        );
        assert!(!fixed.is_paused_while_cached());
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
                proptest::prop_assert!(stream.depth_blocks() <= 64);
                proptest::prop_assert!(stream.outstanding.len() <= OUTSTANDING_BLOCKS_MAX);
            }
        }
    }
}
