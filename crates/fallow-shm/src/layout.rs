//! The memfd's layout, version 1. One header page, then the request ring, then the reply ring:
//!
//! ```text
//! offset  size  field                      written by
//! 0       8     magic "FALWSHM1"           server, before the fd is passed (then read-only by contract)
//! 8       4     version (1)                server
//! 12      4     protocol (0 RESP, 1 memcached)
//! 16      8     request ring offset        server
//! 24      8     request ring bytes (2^k)   server
//! 32      8     reply ring offset          server
//! 40      8     reply ring bytes (2^k)     server
//! 48      8     server's spin budget (ns), a hint for the client
//! 128     8     request tail (bytes produced, wrapping)   client
//! 192     8     request head (bytes consumed, wrapping)   server
//! 256     8     reply tail                                server
//! 320     8     reply head                                client
//! 384     4     server sleeping (1 = ring its doorbell)   server sets, client clears when it rings
//! 448     4     client sleeping                           client sets, server clears when it rings
//! 512     4     server closed (1 = no more replies)        server
//! 576     4     client closed (1 = no more requests)       client
//! 4096    R     request ring data
//! 4096+R  P     reply ring data
//! ```
//! Each word a side writes in the hot path has a cache line of its own, so the two sides' writes do not
//! bounce one line between cores. Indices are free-running byte counts; a ring's fill is `tail - head`.
//! Nothing in the header is trusted for the reader's own bookkeeping: each side keeps its own copy of the
//! index it owns and checks the peer's against the capacity (see `ring`).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"FALWSHM1");
pub const VERSION: u32 = 1;
/// The layout's name in the SHM.OPEN reply.
pub const LAYOUT_NAME: &str = "fallow-shm-v1";
pub const HEADER_BYTES: usize = 4096;
/// Ring sizes a server accepts: powers of two in this range (a 1 MiB value crosses a 4 KiB ring in pieces).
pub const RING_BYTES_MIN: usize = 4 << 10;
pub const RING_BYTES_MAX: usize = 64 << 20;

const OFFSET_MAGIC: usize = 0;
const OFFSET_VERSION: usize = 8;
const OFFSET_PROTOCOL: usize = 12;
const OFFSET_REQUEST_RING: usize = 16;
const OFFSET_REQUEST_BYTES: usize = 24;
const OFFSET_REPLY_RING: usize = 32;
const OFFSET_REPLY_BYTES: usize = 40;
const OFFSET_SPIN_NS: usize = 48;
pub(crate) const OFFSET_REQUEST_TAIL: usize = 128;
pub(crate) const OFFSET_REQUEST_HEAD: usize = 192;
pub(crate) const OFFSET_REPLY_TAIL: usize = 256;
pub(crate) const OFFSET_REPLY_HEAD: usize = 320;
const OFFSET_SERVER_SLEEPING: usize = 384;
const OFFSET_CLIENT_SLEEPING: usize = 448;
const OFFSET_SERVER_CLOSED: usize = 512;
const OFFSET_CLIENT_CLOSED: usize = 576;
const _: () = assert!(OFFSET_CLIENT_CLOSED + 64 <= HEADER_BYTES);
const _: () =
    assert!(OFFSET_REQUEST_TAIL.is_multiple_of(64) && OFFSET_REPLY_HEAD.is_multiple_of(64));
const _: () = assert!(RING_BYTES_MIN.is_power_of_two() && RING_BYTES_MAX.is_power_of_two());

/// Which end of the channel a process holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// The protocol spoken on the rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Resp = 0,
    Memcache = 1,
}

/// Ring sizes and the server's hints, as written in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub request_ring_bytes: usize,
    pub reply_ring_bytes: usize,
    pub protocol: Protocol,
    pub server_spin_ns: u64,
}

impl Layout {
    pub fn total_bytes(&self) -> usize {
        HEADER_BYTES + self.request_ring_bytes + self.reply_ring_bytes
    }

    pub fn request_ring_offset(&self) -> usize {
        HEADER_BYTES
    }

    pub fn reply_ring_offset(&self) -> usize {
        HEADER_BYTES + self.request_ring_bytes
    }

    /// Ring sizes outside the accepted range, or not powers of two, are refused with the reason.
    pub fn check(&self) -> Result<(), String> {
        for (name, bytes) in [
            ("request ring", self.request_ring_bytes),
            ("reply ring", self.reply_ring_bytes),
        ] {
            if !bytes.is_power_of_two() || !(RING_BYTES_MIN..=RING_BYTES_MAX).contains(&bytes) {
                return Err(format!(
                    "{name} of {bytes} bytes: a power of two from {RING_BYTES_MIN} to {RING_BYTES_MAX} is needed"
                ));
            }
        }
        Ok(())
    }
}

/// A mapped channel: the header's words and the two rings' memory. Unmapped on drop.
pub struct Mapping {
    base: *mut u8,
    len_bytes: usize,
    layout: Layout,
}

// SAFETY: the mapping is plain shared memory; every shared word is accessed through atomics and ring data
// only through `ring`, whose single producer and single consumer own disjoint byte ranges.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `fd` (a memfd of at least the layout's size) read-write and shared.
    pub fn map(fd: i32, len_bytes: usize) -> std::io::Result<(*mut u8, usize)> {
        let base = crate::sys::mmap_shared(fd, len_bytes)?;
        Ok((base, len_bytes))
    }

    /// Writes a fresh header into a newly mapped, zeroed memfd (the server's side).
    pub(crate) fn initialise(base: *mut u8, len_bytes: usize, layout: Layout) -> Mapping {
        assert!(
            len_bytes >= layout.total_bytes(),
            "memfd smaller than its layout"
        );
        let mapping = Mapping {
            base,
            len_bytes,
            layout,
        };
        mapping
            .u64_at(OFFSET_REQUEST_RING)
            .store(layout.request_ring_offset() as u64, Ordering::Relaxed);
        mapping
            .u64_at(OFFSET_REQUEST_BYTES)
            .store(layout.request_ring_bytes as u64, Ordering::Relaxed);
        mapping
            .u64_at(OFFSET_REPLY_RING)
            .store(layout.reply_ring_offset() as u64, Ordering::Relaxed);
        mapping
            .u64_at(OFFSET_REPLY_BYTES)
            .store(layout.reply_ring_bytes as u64, Ordering::Relaxed);
        mapping
            .u64_at(OFFSET_SPIN_NS)
            .store(layout.server_spin_ns, Ordering::Relaxed);
        mapping
            .u32_at(OFFSET_PROTOCOL)
            .store(layout.protocol as u32, Ordering::Relaxed);
        mapping
            .u32_at(OFFSET_VERSION)
            .store(VERSION, Ordering::Relaxed);
        // Last, with release: a reader that sees the magic sees the rest.
        mapping.u64_at(OFFSET_MAGIC).store(MAGIC, Ordering::Release);
        mapping
    }

    /// Reads and checks the header of a mapping received from a server (the client's side).
    pub(crate) fn adopt(base: *mut u8, len_bytes: usize) -> Result<Mapping, String> {
        let mut mapping = Mapping {
            base,
            len_bytes,
            layout: Layout {
                request_ring_bytes: 0,
                reply_ring_bytes: 0,
                protocol: Protocol::Resp,
                server_spin_ns: 0,
            },
        };
        if len_bytes < HEADER_BYTES || mapping.u64_at(OFFSET_MAGIC).load(Ordering::Acquire) != MAGIC
        {
            return Err("not a fallow channel (bad magic)".into());
        }
        let version = mapping.u32_at(OFFSET_VERSION).load(Ordering::Relaxed);
        if version != VERSION {
            return Err(format!(
                "channel layout version {version}, this client knows {VERSION}"
            ));
        }
        let layout = Layout {
            request_ring_bytes: mapping.u64_at(OFFSET_REQUEST_BYTES).load(Ordering::Relaxed)
                as usize,
            reply_ring_bytes: mapping.u64_at(OFFSET_REPLY_BYTES).load(Ordering::Relaxed) as usize,
            protocol: match mapping.u32_at(OFFSET_PROTOCOL).load(Ordering::Relaxed) {
                0 => Protocol::Resp,
                1 => Protocol::Memcache,
                other => return Err(format!("unknown channel protocol {other}")),
            },
            server_spin_ns: mapping.u64_at(OFFSET_SPIN_NS).load(Ordering::Relaxed),
        };
        layout.check()?;
        let offsets_ok = mapping.u64_at(OFFSET_REQUEST_RING).load(Ordering::Relaxed)
            == layout.request_ring_offset() as u64
            && mapping.u64_at(OFFSET_REPLY_RING).load(Ordering::Relaxed)
                == layout.reply_ring_offset() as u64;
        if !offsets_ok || layout.total_bytes() > len_bytes {
            return Err("channel header does not match its size".into());
        }
        mapping.layout = layout;
        Ok(mapping)
    }

    /// The address of a byte of the header, for tests that play a hostile peer.
    pub fn as_ptr_for_tests(&self, offset: usize) -> *mut u8 {
        assert!(offset < HEADER_BYTES);
        // SAFETY: inside the header page.
        unsafe { self.base.add(offset) }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub(crate) fn u64_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= HEADER_BYTES);
        // SAFETY: in the header page, aligned (the mapping is page-aligned), alive as long as self.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= HEADER_BYTES);
        // SAFETY: as u64_at.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }

    /// The data of the ring starting at `offset` with `bytes` bytes.
    pub(crate) fn ring_base(&self, offset: usize, bytes: usize) -> *mut u8 {
        assert!(offset >= HEADER_BYTES && offset + bytes <= self.len_bytes);
        // SAFETY: checked in bounds just above.
        unsafe { self.base.add(offset) }
    }

    fn sleeping_word(&self, side: Side) -> &AtomicU32 {
        self.u32_at(match side {
            Side::Server => OFFSET_SERVER_SLEEPING,
            Side::Client => OFFSET_CLIENT_SLEEPING,
        })
    }

    fn closed_word(&self, side: Side) -> &AtomicU32 {
        self.u32_at(match side {
            Side::Server => OFFSET_SERVER_CLOSED,
            Side::Client => OFFSET_CLIENT_CLOSED,
        })
    }

    /// `side` is about to wait on its doorbell: from now on the peer rings it. The caller checks its
    /// rings once more after this (a fence orders the two), then waits.
    pub fn mark_sleeping(&self, side: Side) {
        self.sleeping_word(side).store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    pub fn clear_sleeping(&self, side: Side) {
        self.sleeping_word(side).store(0, Ordering::Relaxed);
    }

    /// After `side` moved an index: true when the peer sleeps and must be rung (once: the flag is taken).
    pub fn peer_needs_wake(&self, side: Side) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        let peer = self.sleeping_word(side.peer());
        peer.load(Ordering::Relaxed) != 0 && peer.swap(0, Ordering::SeqCst) != 0
    }

    /// The request ring's tail as the client last published it (unchecked: for noticing movement).
    pub fn request_tail(&self) -> u64 {
        self.u64_at(OFFSET_REQUEST_TAIL).load(Ordering::Acquire)
    }

    /// The reply ring's head as the client last published it (unchecked: for noticing movement).
    pub fn reply_head(&self) -> u64 {
        self.u64_at(OFFSET_REPLY_HEAD).load(Ordering::Acquire)
    }

    pub fn mark_closed(&self, side: Side) {
        self.closed_word(side).store(1, Ordering::SeqCst);
    }

    pub fn is_closed(&self, side: Side) -> bool {
        self.closed_word(side).load(Ordering::Acquire) != 0
    }
}

impl Side {
    pub fn peer(self) -> Side {
        match self {
            Side::Server => Side::Client,
            Side::Client => Side::Server,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        crate::sys::munmap(self.base, self.len_bytes);
    }
}
