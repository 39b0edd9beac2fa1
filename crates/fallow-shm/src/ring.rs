//! A single-producer/single-consumer byte ring in shared memory, with checked indices.
//!
//! | index | owner    | trusted by the owner               | checked by the other side             |
//! | ----- | -------- | ---------------------------------- | ------------------------------------- |
//! | tail  | producer | its private copy, never re-read     | `tail - head <= capacity`, monotonic  |
//! | head  | consumer | its private copy, never re-read     | `tail - head <= capacity`, monotonic  |
//!
//! The producer copies bytes in, then publishes the tail with release; the consumer reads the tail with
//! acquire, copies out, then publishes the head with release. A peer that writes an impossible index gets
//! `RingError::Corrupt` (and its channel closed by the caller); bytes it scribbles over while they are
//! being copied can only garble its own traffic, which the protocol parser then rejects.
use crate::layout::{
    Mapping, OFFSET_REPLY_HEAD, OFFSET_REPLY_TAIL, OFFSET_REQUEST_HEAD, OFFSET_REQUEST_TAIL,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The peer's index is impossible: behind the previous value, or more than a capacity away.
    Corrupt(&'static str),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::Corrupt(what) => write!(f, "shared-memory channel corrupt: {what}"),
        }
    }
}

impl std::error::Error for RingError {}

/// Which of the two rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    Request,
    /// Server to client.
    Reply,
}

struct RingView {
    mapping: Arc<Mapping>,
    data: *mut u8,
    capacity: usize,
    tail_offset: usize,
    head_offset: usize,
}

// SAFETY: the raw pointer is into `mapping`, which the view keeps alive; see Mapping.
unsafe impl Send for RingView {}
unsafe impl Sync for RingView {}

impl RingView {
    fn new(mapping: Arc<Mapping>, direction: Direction) -> RingView {
        let layout = mapping.layout();
        let (offset, capacity, tail_offset, head_offset) = match direction {
            Direction::Request => (
                layout.request_ring_offset(),
                layout.request_ring_bytes,
                OFFSET_REQUEST_TAIL,
                OFFSET_REQUEST_HEAD,
            ),
            Direction::Reply => (
                layout.reply_ring_offset(),
                layout.reply_ring_bytes,
                OFFSET_REPLY_TAIL,
                OFFSET_REPLY_HEAD,
            ),
        };
        assert!(capacity.is_power_of_two());
        let data = mapping.ring_base(offset, capacity);
        RingView {
            mapping,
            data,
            capacity,
            tail_offset,
            head_offset,
        }
    }

    fn tail(&self) -> &AtomicU64 {
        self.mapping.u64_at(self.tail_offset)
    }

    fn head(&self) -> &AtomicU64 {
        self.mapping.u64_at(self.head_offset)
    }

    /// The byte ranges of the ring between free-running positions `from` and `from + len` (at most two,
    /// when the span wraps).
    fn spans(&self, from: u64, len: usize) -> [(usize, usize); 2] {
        let start = (from as usize) & (self.capacity - 1);
        let first = len.min(self.capacity - start);
        [(start, first), (0, len - first)]
    }
}

/// The writing end of a ring.
pub struct Producer {
    view: RingView,
    /// Bytes produced so far: the tail this side published last.
    tail: u64,
    /// The consumer's head as last seen (only grows).
    head_seen: u64,
}

impl Producer {
    pub fn new(mapping: Arc<Mapping>, direction: Direction) -> Producer {
        let view = RingView::new(mapping, direction);
        let tail = view.tail().load(Ordering::Relaxed);
        let head_seen = view.head().load(Ordering::Relaxed);
        Producer {
            view,
            tail,
            head_seen,
        }
    }

    pub fn capacity(&self) -> usize {
        self.view.capacity
    }

    /// Room for more bytes now.
    pub fn free_bytes(&mut self) -> Result<usize, RingError> {
        let head = self.view.head().load(Ordering::Acquire);
        if head.wrapping_sub(self.head_seen) > self.tail.wrapping_sub(self.head_seen) {
            return Err(RingError::Corrupt(
                "consumer index ahead of the data or moved back",
            ));
        }
        self.head_seen = head;
        Ok(self.view.capacity - self.tail.wrapping_sub(head) as usize)
    }

    /// Copies as much of `bytes` as fits and publishes it; returns the count (0 when the ring is full).
    pub fn write(&mut self, bytes: &[u8]) -> Result<usize, RingError> {
        let n = bytes.len().min(self.free_bytes()?);
        if n == 0 {
            return Ok(0);
        }
        let mut copied = 0;
        for (start, len) in self.view.spans(self.tail, n) {
            // SAFETY: [start, start+len) is inside the ring and free (between tail and head + capacity),
            // so the consumer does not read it until the tail below is published.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(copied),
                    self.view.data.add(start),
                    len,
                )
            };
            copied += len;
        }
        self.tail = self.tail.wrapping_add(n as u64);
        self.view.tail().store(self.tail, Ordering::Release);
        Ok(n)
    }

    /// Bytes written but not yet consumed (0 when the consumer has caught up).
    pub fn unconsumed_bytes(&mut self) -> Result<usize, RingError> {
        Ok(self.view.capacity - self.free_bytes()?)
    }
}

/// The reading end of a ring.
pub struct Consumer {
    view: RingView,
    /// Bytes consumed so far: the head this side published last.
    head: u64,
}

impl Consumer {
    pub fn new(mapping: Arc<Mapping>, direction: Direction) -> Consumer {
        let view = RingView::new(mapping, direction);
        let head = view.head().load(Ordering::Relaxed);
        Consumer { view, head }
    }

    pub fn capacity(&self) -> usize {
        self.view.capacity
    }

    /// Bytes consumed so far (this side's own count, never re-read from shared memory).
    pub fn position(&self) -> u64 {
        self.head
    }

    /// Bytes ready to read now.
    pub fn available_bytes(&self) -> Result<usize, RingError> {
        let tail = self.view.tail().load(Ordering::Acquire);
        let available = tail.wrapping_sub(self.head);
        if available > self.view.capacity as u64 {
            return Err(RingError::Corrupt(
                "producer index more than a ring ahead, or moved back",
            ));
        }
        Ok(available as usize)
    }

    /// Copies up to `out.len()` bytes out and frees their room; returns the count (0 when empty).
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, RingError> {
        let n = out.len().min(self.available_bytes()?);
        if n == 0 {
            return Ok(0);
        }
        let mut copied = 0;
        for (start, len) in self.view.spans(self.head, n) {
            // SAFETY: [start, start+len) is inside the ring and published by the producer (before tail).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.view.data.add(start),
                    out.as_mut_ptr().add(copied),
                    len,
                )
            };
            copied += len;
        }
        self.head = self.head.wrapping_add(n as u64);
        self.view.head().store(self.head, Ordering::Release);
        Ok(n)
    }

    /// Appends up to `max_bytes` readable bytes to `out` (a Vec grows only by what is there).
    pub fn read_into_vec(
        &mut self,
        out: &mut Vec<u8>,
        max_bytes: usize,
    ) -> Result<usize, RingError> {
        let n = max_bytes.min(self.available_bytes()?);
        if n == 0 {
            return Ok(0);
        }
        let old_len = out.len();
        out.resize(old_len + n, 0);
        let read = self.read(&mut out[old_len..])?;
        out.truncate(old_len + read);
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, Protocol};
    use proptest::prelude::*;

    pub(crate) fn mapping(ring_bytes: usize) -> Arc<Mapping> {
        let layout = Layout {
            request_ring_bytes: ring_bytes,
            reply_ring_bytes: ring_bytes,
            protocol: Protocol::Resp,
            server_spin_ns: 0,
        };
        let (mapping, _fd) = crate::server::create_mapping(layout).unwrap();
        Arc::new(mapping)
    }

    #[test]
    fn bytes_cross_the_ring_in_order_across_the_wrap() {
        let mapping = mapping(4096);
        let mut producer = Producer::new(mapping.clone(), Direction::Request);
        let mut consumer = Consumer::new(mapping, Direction::Request);
        let mut expected = Vec::new();
        let mut received = Vec::new();
        for round in 0..100u32 {
            let chunk: Vec<u8> = (0..(round * 37 % 3000))
                .map(|i| (i + round) as u8)
                .collect();
            let written = producer.write(&chunk).unwrap();
            expected.extend_from_slice(&chunk[..written]);
            consumer.read_into_vec(&mut received, usize::MAX).unwrap();
        }
        assert_eq!(received, expected);
        assert_eq!(consumer.available_bytes().unwrap(), 0);
    }

    #[test]
    fn a_full_ring_takes_nothing_until_read() {
        let mapping = mapping(4096);
        let mut producer = Producer::new(mapping.clone(), Direction::Reply);
        let mut consumer = Consumer::new(mapping, Direction::Reply);
        assert_eq!(producer.write(&[7u8; 5000]).unwrap(), 4096);
        assert_eq!(producer.write(b"x").unwrap(), 0);
        let mut out = [0u8; 100];
        assert_eq!(consumer.read(&mut out).unwrap(), 100);
        assert_eq!(producer.write(&[1u8; 200]).unwrap(), 100);
    }

    #[test]
    fn a_tail_more_than_a_ring_ahead_is_corrupt() {
        let mapping = mapping(4096);
        let consumer = Consumer::new(mapping.clone(), Direction::Request);
        mapping
            .u64_at(OFFSET_REQUEST_TAIL)
            .store(4097, Ordering::Relaxed);
        assert!(matches!(
            consumer.available_bytes(),
            Err(RingError::Corrupt(_))
        ));
        // Moved back (wraps to a huge distance): corrupt too.
        mapping
            .u64_at(OFFSET_REQUEST_TAIL)
            .store(u64::MAX, Ordering::Relaxed);
        assert!(consumer.available_bytes().is_err());
    }

    #[test]
    fn a_head_past_the_tail_or_moved_back_is_corrupt() {
        let mapping = mapping(4096);
        let mut producer = Producer::new(mapping.clone(), Direction::Reply);
        producer.write(&[0u8; 100]).unwrap();
        mapping
            .u64_at(OFFSET_REPLY_HEAD)
            .store(101, Ordering::Relaxed);
        assert!(producer.free_bytes().is_err());
        mapping
            .u64_at(OFFSET_REPLY_HEAD)
            .store(50, Ordering::Relaxed);
        assert_eq!(producer.free_bytes().unwrap(), 4096 - 50);
        mapping
            .u64_at(OFFSET_REPLY_HEAD)
            .store(40, Ordering::Relaxed);
        assert!(
            producer.free_bytes().is_err(),
            "a head that moves back is refused"
        );
    }

    proptest! {
        /// Whatever a hostile peer writes into its index, the checked side never reports more than a
        /// ring's worth of bytes or room, and never panics.
        #[test]
        fn any_peer_index_is_checked(steps in proptest::collection::vec((0u64..u64::MAX, 0usize..6000), 1..50)) {
            let mapping = mapping(4096);
            let consumer = Consumer::new(mapping.clone(), Direction::Request);
            let mut producer = Producer::new(mapping.clone(), Direction::Reply);
            for (index, len) in steps {
                mapping.u64_at(OFFSET_REQUEST_TAIL).store(index, Ordering::Relaxed);
                mapping.u64_at(OFFSET_REPLY_HEAD).store(index, Ordering::Relaxed);
                if let Ok(available) = consumer.available_bytes() {
                    prop_assert!(available <= 4096);
                }
                match producer.write(&vec![1u8; len]) {
                    Ok(written) => prop_assert!(written <= 4096),
                    Err(RingError::Corrupt(_)) => {}
                }
            }
        }
    }
}
