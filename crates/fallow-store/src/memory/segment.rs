//! Segments: memory mapped from the OS in large pieces and filled as an append-only log of items.
//!
//! An item is a fixed 48-byte header followed by the key and the value, 8-byte aligned. A *stub* (flag
//! `ITEM_FLAG_STUB`) is an item whose value lives only on tier 2: header and key, no value bytes; its
//! `value_len` still says how long the value is. Items never move
//! inside a segment; an overwrite appends a new item and marks the old one dead. A segment whose live bytes
//! fall to zero is unmapped at once, and compaction copies the few live items out of a mostly dead segment,
//! so freed memory really goes back to the OS (RSS falls) instead of staying with an allocator.
use std::ptr::NonNull;

/// Alignment of every item inside a segment.
pub const ITEM_ALIGN_BYTES: usize = 8;
/// Size of `ItemHeader`, the fixed part of every item.
pub const ITEM_HEADER_BYTES: usize = std::mem::size_of::<ItemHeader>();

/// The fixed part of every stored item, as laid out in segment memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ItemHeader {
    /// memcached CAS unique; changes on every modification, so WATCH uses it too.
    pub cas: u64,
    /// Absolute expiry in Unix milliseconds; 0 = never.
    pub expire_at_ms: u64,
    /// Where tier 2 holds a record of exactly this version of the item (`crate::tier2::Slot` packed), 0 =
    /// none: a RAM item with a tier-2 copy is clean and leaves RAM without a write.
    pub tier2_slot: u64,
    pub key_len: u32,
    pub value_len: u32,
    /// memcached client flags (0 for values written through RESP).
    pub client_flags: u32,
    /// Seconds since the store started at the last access (LRU), also the base of LFU decay.
    pub access_s: u32,
    /// Data type of the value (`Kind` as u8).
    pub kind: u8,
    pub db: u8,
    /// Logarithmic access counter (Redis LFU).
    pub lfu_counter: u8,
    /// 1 while the item is the current version of its key.
    pub alive: u8,
    /// Keyspace namespace of the key (0 = common; else the owning tenant's own keyspace).
    pub namespace: u16,
    /// `ITEM_FLAG_*` bits.
    pub flags: u16,
}

/// The item is a stub: its value is on tier 2 only (at `tier2_slot`) and takes no bytes here.
pub const ITEM_FLAG_STUB: u16 = 1;
/// The stub was read on tier 2 since its record was written (or copied forward): the next read promotes
/// it, and cleaning copies its record forward instead of discarding it.
pub const ITEM_FLAG_TIER2_READ: u16 = 2;
/// The item's clean record was written on the frequency rule's doorkeeper's word (not copied forward
/// since): cleaning reports whether it was read to the doorkeeper (`admission::Doorkeeper`).
pub const ITEM_FLAG_TIER2_DOORKEEPER: u16 = 4;

/// Two bits counting the reads since the item was last appended (0 to `READS_SINCE_APPEND_MAX`): the
/// careful release keeps an item that has some, spending one each time it re-appends it (second chances
/// with a memory of frequency, as S3-FIFO's main queue).
const ITEM_FLAG_READS_SHIFT: u16 = 3;
const ITEM_FLAG_READS_MASK: u16 = 0b11 << ITEM_FLAG_READS_SHIFT;
pub const READS_SINCE_APPEND_MAX: u8 = 3;

const _: () = assert!(ITEM_HEADER_BYTES == 48);
const _: () = assert!(
    ITEM_FLAG_READS_MASK & (ITEM_FLAG_STUB | ITEM_FLAG_TIER2_READ | ITEM_FLAG_TIER2_DOORKEEPER)
        == 0
);
const _: () =
    assert!(READS_SINCE_APPEND_MAX as u16 == ITEM_FLAG_READS_MASK >> ITEM_FLAG_READS_SHIFT);

impl ItemHeader {
    pub fn new(kind: u8, db: u8, key_len: usize, value_len: usize) -> Self {
        assert!(key_len <= u32::MAX as usize && value_len <= u32::MAX as usize);
        ItemHeader {
            cas: 0,
            expire_at_ms: 0,
            tier2_slot: 0,
            key_len: key_len as u32,
            value_len: value_len as u32,
            client_flags: 0,
            access_s: 0,
            kind,
            db,
            lfu_counter: 0,
            alive: 1,
            namespace: 0,
            flags: 0,
        }
    }

    /// Reads since the item was last appended, at most `READS_SINCE_APPEND_MAX`.
    pub fn reads_since_append(&self) -> u8 {
        ((self.flags & ITEM_FLAG_READS_MASK) >> ITEM_FLAG_READS_SHIFT) as u8
    }

    fn set_reads_since_append(&mut self, reads: u8) {
        assert!(
            reads <= READS_SINCE_APPEND_MAX,
            "{reads} reads do not fit two bits"
        );
        self.flags =
            (self.flags & !ITEM_FLAG_READS_MASK) | ((reads as u16) << ITEM_FLAG_READS_SHIFT);
    }

    /// Counts one read (saturating).
    pub fn note_read(&mut self) {
        let reads = self.reads_since_append();
        self.set_reads_since_append((reads + 1).min(READS_SINCE_APPEND_MAX));
    }

    /// Spends one read: the item is re-appended by a release that kept it for it.
    pub fn spend_read(&mut self) {
        let reads = self.reads_since_append();
        assert!(
            reads > 0,
            "a release keeps only an item with a read to spend"
        );
        self.set_reads_since_append(reads - 1);
    }

    /// True when the value is on tier 2 only.
    pub fn is_stub(&self) -> bool {
        self.flags & ITEM_FLAG_STUB != 0
    }

    /// Value bytes stored in the segment: none for a stub.
    pub fn stored_value_bytes(&self) -> usize {
        if self.is_stub() {
            0
        } else {
            self.value_len as usize
        }
    }

    /// Bytes the whole item takes in its segment, padding included.
    pub fn item_bytes(&self) -> usize {
        item_bytes(self.key_len as usize, self.stored_value_bytes())
    }
}

pub fn item_bytes(key_len: usize, value_len: usize) -> usize {
    (ITEM_HEADER_BYTES + key_len + value_len).next_multiple_of(ITEM_ALIGN_BYTES)
}

/// One anonymous mapping holding a log of items.
pub struct Segment {
    base: NonNull<u8>,
    capacity_bytes: usize,
    used_bytes: usize,
    live_bytes: usize,
    /// Creation order; SCAN walks segments by sequence so that moved items are seen later, not lost.
    pub sequence: u64,
    /// The tenant whose items the segment holds (each segment belongs to one tenant).
    pub tenant: u16,
}

// The mapping is owned by the segment and only reached through `&mut`/`&` of it.
unsafe impl Send for Segment {}

impl Segment {
    /// Maps `capacity_bytes` (rounded up to pages). None when the OS refuses. Capacities that are a
    /// multiple of 2 MiB are mapped 2 MiB-aligned and backed by transparent huge pages when the kernel
    /// allows: unmapping them gives memory back about 20× faster (measured: 8 GiB in ~40 ms instead of
    /// ~870 ms with 4 KiB pages), which is what makes the fast release path fast.
    pub fn map(capacity_bytes: usize, sequence: u64) -> Option<Segment> {
        let page = page_bytes();
        let capacity_bytes = capacity_bytes.max(page).next_multiple_of(page);
        let base = if capacity_bytes.is_multiple_of(HUGE_PAGE_BYTES) {
            match retained::take(capacity_bytes) {
                Some(base) => base as *mut libc::c_void,
                None => map_huge_aligned(capacity_bytes)?,
            }
        } else {
            map_anonymous(capacity_bytes)?
        };
        Some(Segment {
            base: NonNull::new(base as *mut u8)?,
            capacity_bytes,
            used_bytes: 0,
            live_bytes: 0,
            sequence,
            tenant: 0,
        })
    }

    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// Empties a segment whose items are all dead so it can be reused under a new sequence: its pages
    /// stay mapped and faulted in, which spares the kernel a fault and a page clear per 4 KiB on reuse.
    pub fn recycle(&mut self, sequence: u64) {
        assert_eq!(self.live_bytes, 0, "only an empty segment is recycled");
        self.used_bytes = 0;
        self.sequence = sequence;
    }

    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    pub fn free_bytes(&self) -> usize {
        self.capacity_bytes - self.used_bytes
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is valid for capacity_bytes for the segment's whole life.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.capacity_bytes) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.capacity_bytes) }
    }

    /// Appends an item; returns its offset, or None when it does not fit.
    pub fn append(&mut self, header: &ItemHeader, key: &[u8], value: &[u8]) -> Option<u32> {
        debug_assert_eq!(header.key_len as usize, key.len());
        debug_assert_eq!(header.stored_value_bytes(), value.len());
        let size = header.item_bytes();
        if size > self.free_bytes() || self.used_bytes > u32::MAX as usize {
            return None;
        }
        let offset = self.used_bytes;
        let bytes = self.bytes_mut();
        // SAFETY: offset is 8-aligned and offset+size fits in the mapping (checked above).
        unsafe { std::ptr::write(bytes.as_mut_ptr().add(offset) as *mut ItemHeader, *header) };
        let key_start = offset + ITEM_HEADER_BYTES;
        bytes[key_start..key_start + key.len()].copy_from_slice(key);
        bytes[key_start + key.len()..key_start + key.len() + value.len()].copy_from_slice(value);
        self.used_bytes += size;
        self.live_bytes += size;
        debug_assert!(
            offset.is_multiple_of(ITEM_ALIGN_BYTES),
            "items start aligned, not at {offset}"
        );
        debug_assert!(
            self.live_bytes <= self.used_bytes && self.used_bytes <= self.capacity_bytes,
            "live {} <= used {} <= capacity {} bytes",
            self.live_bytes,
            self.used_bytes,
            self.capacity_bytes
        );
        Some(offset as u32)
    }

    fn check_offset(&self, offset: u32) -> usize {
        let offset = offset as usize;
        assert!(
            offset.is_multiple_of(ITEM_ALIGN_BYTES)
                && offset + ITEM_HEADER_BYTES <= self.used_bytes,
            "item offset {offset} is not an aligned header within the {} used bytes",
            self.used_bytes
        );
        offset
    }

    pub fn header(&self, offset: u32) -> &ItemHeader {
        let offset = self.check_offset(offset);
        // SAFETY: an item header was written at every offset handed out by `append`.
        unsafe { &*(self.bytes().as_ptr().add(offset) as *const ItemHeader) }
    }

    pub fn header_mut(&mut self, offset: u32) -> &mut ItemHeader {
        let offset = self.check_offset(offset);
        // SAFETY: as in `header`, with exclusive access through `&mut self`.
        unsafe { &mut *(self.bytes_mut().as_mut_ptr().add(offset) as *mut ItemHeader) }
    }

    pub fn key(&self, offset: u32) -> &[u8] {
        let header = *self.header(offset);
        let start = offset as usize + ITEM_HEADER_BYTES;
        &self.bytes()[start..start + header.key_len as usize]
    }

    /// The value of a resident item (a stub has none here: callers read it from tier 2).
    pub fn value(&self, offset: u32) -> &[u8] {
        let header = *self.header(offset);
        assert!(!header.is_stub(), "a stub's value is on tier 2");
        let start = offset as usize + ITEM_HEADER_BYTES + header.key_len as usize;
        &self.bytes()[start..start + header.value_len as usize]
    }

    pub fn value_mut(&mut self, offset: u32) -> &mut [u8] {
        let header = *self.header(offset);
        assert!(!header.is_stub(), "a stub's value is on tier 2");
        let start = offset as usize + ITEM_HEADER_BYTES + header.key_len as usize;
        &mut self.bytes_mut()[start..start + header.value_len as usize]
    }

    /// Marks an item dead; returns the bytes it took.
    pub fn kill(&mut self, offset: u32) -> usize {
        let header = self.header_mut(offset);
        assert_eq!(header.alive, 1, "an item dies once");
        header.alive = 0;
        let size = header.item_bytes();
        debug_assert!(
            self.live_bytes >= size,
            "a dying item's {size} bytes are counted in the segment's {} live",
            self.live_bytes
        );
        self.live_bytes -= size;
        size
    }

    /// The offset of the item after the one at `offset`, if any.
    pub fn next_offset(&self, offset: u32) -> Option<u32> {
        let next = offset as usize + self.header(offset).item_bytes();
        debug_assert!(
            next <= self.used_bytes,
            "the item at {offset} ends at {next}, past the {} used bytes",
            self.used_bytes
        );
        (next < self.used_bytes).then_some(next as u32)
    }

    /// The first item boundary at or after `offset` (walking from the segment's start), or None past the
    /// end. Scan cursors come from clients, so an offset is only trusted once it lands on a boundary.
    pub fn item_boundary_at_or_after(&self, offset: u32) -> Option<u32> {
        let mut boundary = self.first_offset()?;
        while boundary < offset {
            boundary = self.next_offset(boundary)?;
        }
        Some(boundary)
    }

    /// The first item's offset, if the segment holds any.
    pub fn first_offset(&self) -> Option<u32> {
        (self.used_bytes > 0).then_some(0)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let base = self.base.as_ptr() as usize;
        if self.capacity_bytes.is_multiple_of(HUGE_PAGE_BYTES)
            && retained::give_back_pages(base, self.capacity_bytes)
        {
            return;
        }
        unmap(base, self.capacity_bytes);
    }
}

fn unmap(base: usize, bytes: usize) {
    // SAFETY: unmapping exactly a mapping created in `map` that nothing refers to any more.
    let result = unsafe { libc::munmap(base as *mut _, bytes) };
    debug_assert_eq!(result, 0);
}

/// Address ranges of dropped huge-page segments whose pages went back to the OS (`MADV_DONTNEED`: RSS falls
/// at once) but whose mapping is kept. Giving pages back this way takes the process's mmap lock only for
/// reading, so reclaim workers release in parallel and no VMA is split; munmap takes it for writing and
/// serialised them (measured: an 8 GiB fast release took 80-87 ms instead of 103-108 ms). A new segment of
/// the same size reuses a range (its pages fault in zeroed, as from mmap); `unmap_retained` gives the
/// address space itself back, which the store does after each reclaim.
pub mod retained {
    use parking_lot::Mutex;
    use std::collections::HashMap;

    /// Ranges kept at most; beyond this a dropped segment is unmapped at once (every list has a limit).
    pub const RANGES_MAX: usize = 1 << 16;

    struct Ranges {
        /// Base addresses by size.
        by_size: HashMap<usize, Vec<usize>>,
        count: usize,
    }

    static RANGES: Mutex<Option<Ranges>> = Mutex::new(None);

    /// Drops the pages of `[base, base + bytes)` and keeps the range; false (nothing done) when the list
    /// is full or the kernel refused.
    pub(super) fn give_back_pages(base: usize, bytes: usize) -> bool {
        if retained_count() >= RANGES_MAX {
            return false;
        }
        // Outside the list's lock: reclaim workers drop their pages in parallel.
        // SAFETY: the range is a whole mapping of a segment being dropped; nothing refers to it.
        if unsafe { libc::madvise(base as *mut _, bytes, libc::MADV_DONTNEED) } != 0 {
            return false;
        }
        let mut guard = RANGES.lock();
        let ranges = guard.get_or_insert_with(|| Ranges {
            by_size: HashMap::new(),
            count: 0,
        });
        if ranges.count >= RANGES_MAX {
            return false; // filled meanwhile: the caller unmaps the (already empty) range
        }
        ranges.by_size.entry(bytes).or_default().push(base);
        ranges.count += 1;
        true
    }

    /// A kept range of exactly `bytes`, if any.
    pub(super) fn take(bytes: usize) -> Option<usize> {
        let mut guard = RANGES.lock();
        let ranges = guard.as_mut()?;
        let base = ranges.by_size.get_mut(&bytes)?.pop()?;
        ranges.count -= 1;
        Some(base)
    }

    /// Unmaps kept ranges until at most `keep` remain; returns how many it unmapped.
    pub fn unmap_retained(keep: usize) -> usize {
        let mut surplus = Vec::new();
        {
            let mut guard = RANGES.lock();
            let Some(ranges) = guard.as_mut() else {
                return 0;
            };
            for (&bytes, bases) in ranges.by_size.iter_mut() {
                while ranges.count - surplus.len() > keep {
                    let Some(base) = bases.pop() else { break };
                    surplus.push((base, bytes));
                }
            }
            ranges.count -= surplus.len();
        }
        for &(base, bytes) in &surplus {
            super::unmap(base, bytes);
        }
        surplus.len()
    }

    /// How many ranges are kept now.
    pub fn retained_count() -> usize {
        RANGES.lock().as_ref().map_or(0, |ranges| ranges.count)
    }
}

/// Size of a transparent huge page on x86-64 and most arm64 kernels.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Private anonymous pages (zeroed, page-aligned), None when the kernel refuses.
pub(crate) fn map_anonymous(bytes: usize) -> Option<*mut libc::c_void> {
    // SAFETY: anonymous private mapping with no address hint; checked for MAP_FAILED below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (base != libc::MAP_FAILED).then_some(base)
}

/// Maps `bytes` (a multiple of 2 MiB) at a 2 MiB boundary and asks for huge pages: maps 2 MiB more,
/// trims both ends, then `MADV_HUGEPAGE` (advice only: without THP it is ordinary memory).
fn map_huge_aligned(bytes: usize) -> Option<*mut libc::c_void> {
    let raw = map_anonymous(bytes + HUGE_PAGE_BYTES)? as usize;
    let aligned = raw.next_multiple_of(HUGE_PAGE_BYTES);
    let head = aligned - raw;
    let tail = HUGE_PAGE_BYTES - head;
    // SAFETY: both ranges lie inside the mapping just made and are not used by anything else.
    unsafe {
        if head > 0 {
            libc::munmap(raw as *mut _, head);
        }
        if tail > 0 {
            libc::munmap((aligned + bytes) as *mut _, tail);
        }
        libc::madvise(aligned as *mut _, bytes, libc::MADV_HUGEPAGE);
    }
    Some(aligned as *mut libc::c_void)
}

pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_read_kill() {
        let mut segment = Segment::map(1 << 16, 1).expect("mmap");
        let header = ItemHeader::new(1, 0, 3, 5);
        let first = segment.append(&header, b"key", b"value").unwrap();
        let second = segment.append(&header, b"abc", b"12345").unwrap();
        assert_eq!(first, 0);
        assert_eq!(second as usize, item_bytes(3, 5));
        assert_eq!(segment.key(second), b"abc");
        assert_eq!(segment.value(first), b"value");
        assert_eq!(segment.next_offset(first), Some(second));
        assert_eq!(segment.next_offset(second), None);
        assert_eq!(segment.live_bytes(), 2 * item_bytes(3, 5));
        segment.kill(first);
        assert_eq!(segment.live_bytes(), item_bytes(3, 5));
        assert_eq!(segment.header(first).alive, 0);
    }

    #[test]
    fn reads_since_append_saturate_spend_and_leave_the_other_flags_alone() {
        let mut header = ItemHeader::new(1, 0, 3, 5);
        header.flags = ITEM_FLAG_STUB | ITEM_FLAG_TIER2_DOORKEEPER;
        assert_eq!(header.reads_since_append(), 0);
        for expected in [1, 2, 3, 3] {
            header.note_read();
            assert_eq!(header.reads_since_append(), expected);
        }
        header.spend_read();
        assert_eq!(header.reads_since_append(), 2);
        assert!(header.is_stub());
        assert_eq!(
            header.flags & !ITEM_FLAG_READS_MASK,
            ITEM_FLAG_STUB | ITEM_FLAG_TIER2_DOORKEEPER
        );
    }

    #[test]
    #[should_panic(expected = "a release keeps only an item with a read to spend")]
    fn an_unread_item_has_no_read_to_spend() {
        ItemHeader::new(1, 0, 3, 5).spend_read();
    }

    #[test]
    #[should_panic(expected = "an item dies once")]
    fn an_item_dies_once() {
        let mut segment = Segment::map(4096, 1).expect("mmap");
        let header = ItemHeader::new(1, 0, 1, 1);
        let offset = segment.append(&header, b"k", b"v").unwrap();
        segment.kill(offset);
        segment.kill(offset);
    }

    #[test]
    #[should_panic(expected = "only an empty segment is recycled")]
    fn a_segment_with_live_items_is_not_recycled() {
        let mut segment = Segment::map(4096, 1).expect("mmap");
        let header = ItemHeader::new(1, 0, 1, 1);
        segment.append(&header, b"k", b"v").unwrap();
        segment.recycle(2);
    }

    #[test]
    #[should_panic(expected = "is not an aligned header within the")]
    fn offsets_past_the_used_bytes_are_refused() {
        let mut segment = Segment::map(4096, 1).expect("mmap");
        let header = ItemHeader::new(1, 0, 1, 1);
        let offset = segment.append(&header, b"k", b"v").unwrap();
        segment.header(offset + header.item_bytes() as u32);
    }

    #[test]
    fn full_segment_refuses() {
        let mut segment = Segment::map(4096, 1).expect("mmap");
        let value = vec![7u8; 4000];
        let header = ItemHeader::new(1, 0, 1, value.len());
        assert!(segment.append(&header, b"k", &value).is_some());
        assert!(segment.append(&header, b"k", &value).is_none());
    }
}
