//! The descriptor table: which of the program's file descriptors are channels, and each channel's state.
//!
//! A redirected socket's descriptor number holds a duplicate of the channel's client doorbell (an
//! eventfd), so the number stays valid, unique and pollable; the table maps it to a shared `Channel`.
//! Duplicates (`dup`, `dup2`, `F_DUPFD`) map to the same `Channel`; the channel closes when the last of
//! them does. The program's original TCP socket is kept, unconnected, as the channel's "shadow": socket
//! options are set and read on it, so they validate and default exactly as on a TCP socket.
//!
//! Locks: the table's lock is held only to look up, insert or remove; a channel's `io` lock only for
//! non-blocking ring operations. Neither is held across a wait. Order: table, then epoll sets, then io.
use fallow_shm::layout::Side;
use fallow_shm::{sys, ClientChannel, SpinPolicy};
use std::collections::BTreeMap;
use std::io;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};

/// Bytes a `MSG_PEEK` may hold back from the ring (a peek larger than this sees this many).
pub const PEEK_BYTES_MAX: usize = 1 << 20;

// parking_lot's lock: the fork handlers take it before fork and release it in parent and child (a
// lock is not owned by a thread there), so a child never inherits it held by a thread it lacks.
static TABLE: parking_lot::RwLock<BTreeMap<i32, Arc<Channel>>> =
    parking_lot::const_rwlock(BTreeMap::new());
/// Entries in TABLE: lets every interposed call on an ordinary descriptor skip the lock when none exist.
static TABLE_ENTRIES: AtomicUsize = AtomicUsize::new(0);
/// Bumped in a forked child (pthread_atfork): channels opened before belong to the parent.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Before fork: takes the shim's global locks (table, then epoll sets: their usual order), so that no
/// other thread holds them at the instant the child is made.
extern "C" fn before_fork() {
    std::mem::forget(TABLE.write());
    crate::epoll::lock_for_fork();
}

/// After fork, in the parent: releases what `before_fork` took.
extern "C" fn after_fork_in_parent() {
    crate::epoll::unlock_after_fork();
    // SAFETY: before_fork took the write lock and forgot its guard; nothing else released it.
    unsafe { TABLE.force_unlock_write() };
}

/// After fork, in the child: the same, and channels opened before now belong to the parent.
extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
    after_fork_in_parent();
}

fn register_fork_handler() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the handlers only take and release the shim's own locks and bump an atomic.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
    });
}

/// The client's spin budget, read once (`FALLOW_SHM_SPIN_US`).
pub fn spin_policy() -> SpinPolicy {
    static POLICY: OnceLock<SpinPolicy> = OnceLock::new();
    *POLICY.get_or_init(SpinPolicy::from_env)
}

/// What the io lock guards: the channel and the bytes a `MSG_PEEK` took off the ring.
pub struct Io {
    pub chan: ManuallyDrop<ClientChannel>,
    /// Bytes read off the ring but not yet given to the program (peeked); returned first.
    pub peeked: Vec<u8>,
    /// Waiters that marked this side sleeping; the last one to wake clears the mark.
    sleepers: u32,
}

/// One redirected connection, shared by the descriptors that duplicate it.
pub struct Channel {
    io: Mutex<Io>,
    /// Our own copy of the client doorbell (the program's descriptors are duplicates of it).
    pub bell_fd: i32,
    pub server_bell_fd: i32,
    /// The Unix socket: it reports the server's death as hang-up.
    pub lifeline_fd: i32,
    /// The program's TCP socket, unconnected: socket options and `getsockname` go to it.
    pub shadow_fd: i32,
    pub peer: SocketAddr,
    generation: u64,
    pub nonblocking: AtomicBool,
    /// A request went out whose reply has not been read yet: waits spin before they sleep.
    pub reply_due: AtomicBool,
    /// The lifeline hung up (the server died or dropped the channel): reads end, writes fail.
    pub lifeline_down: AtomicBool,
    pub shut_read: AtomicBool,
    pub shut_write: AtomicBool,
    /// Counts reads and writes, so edge-triggered epoll can tell a new edge from an old state.
    pub read_epoch: AtomicU64,
    pub write_epoch: AtomicU64,
    /// SO_RCVTIMEO / SO_SNDTIMEO as the program set them; 0 waits forever.
    pub receive_timeout_ns: AtomicU64,
    pub send_timeout_ns: AtomicU64,
}

impl Channel {
    pub fn new(
        chan: ClientChannel,
        shadow_fd: i32,
        peer: SocketAddr,
        nonblocking: bool,
    ) -> Channel {
        register_fork_handler();
        Channel {
            bell_fd: chan.client_bell_fd(),
            server_bell_fd: chan.server_bell_fd(),
            lifeline_fd: chan.lifeline_fd(),
            io: Mutex::new(Io {
                chan: ManuallyDrop::new(chan),
                peeked: Vec::new(),
                sleepers: 0,
            }),
            shadow_fd,
            peer,
            generation: FORK_GENERATION.load(Ordering::SeqCst),
            nonblocking: AtomicBool::new(nonblocking),
            reply_due: AtomicBool::new(false),
            lifeline_down: AtomicBool::new(false),
            shut_read: AtomicBool::new(false),
            shut_write: AtomicBool::new(false),
            read_epoch: AtomicU64::new(0),
            write_epoch: AtomicU64::new(0),
            receive_timeout_ns: AtomicU64::new(0),
            send_timeout_ns: AtomicU64::new(0),
        }
    }

    /// True in a forked child: the channel's rings belong to the parent, which keeps using them.
    pub fn inherited(&self) -> bool {
        self.generation != FORK_GENERATION.load(Ordering::Relaxed)
    }

    pub fn io(&self) -> MutexGuard<'_, Io> {
        // A panic while the lock was held cannot leave the ring indices inconsistent (they are published
        // atomically), so a poisoned lock is still usable.
        self.io
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The server will send nothing more: it closed the channel or its lifeline hung up.
    pub fn hung_up(&self, io: &Io) -> bool {
        self.lifeline_down.load(Ordering::Relaxed) || io.chan.mapping.is_closed(Side::Server)
    }

    /// A read would not block: bytes, the end of the stream, or an error to report.
    pub fn read_ready(&self, io: &Io) -> bool {
        !io.peeked.is_empty()
            || io.chan.read_ready()
            || self.hung_up(io)
            || self.shut_read.load(Ordering::Relaxed)
    }

    /// A write would not block: room in the request ring, or an error to report.
    pub fn write_ready(&self, io: &mut Io) -> bool {
        io.chan.write_ready() || self.hung_up(io) || self.shut_write.load(Ordering::Relaxed)
    }

    /// Marks this side sleeping before a wait on the doorbell; true when the wanted readiness already
    /// holds (then the caller must not sleep, and must still call `woke`).
    pub fn prepare_to_sleep(&self, want_read: bool, want_write: bool) -> bool {
        let mut io = self.io();
        io.sleepers += 1;
        io.chan.mapping.mark_sleeping(Side::Client);
        (want_read && self.read_ready(&io)) || (want_write && self.write_ready(&mut io))
    }

    /// After a wait that `prepare_to_sleep` began: the last waiter clears the mark and the doorbell.
    pub fn woke(&self) {
        let mut io = self.io();
        assert!(io.sleepers > 0, "woke without prepare_to_sleep");
        io.sleepers -= 1;
        if io.sleepers == 0 {
            io.chan.woke();
        }
    }

    /// Drains a doorbell nobody waits on (a level-triggered epoll would report it forever).
    pub fn drain_if_unwatched(&self) {
        let io = self.io();
        if io.sleepers == 0 {
            sys::eventfd_drain(self.bell_fd);
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let io = self
            .io
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.generation == FORK_GENERATION.load(Ordering::SeqCst) {
            // SAFETY: dropped once, here; nothing uses `chan` after.
            unsafe { ManuallyDrop::drop(&mut io.chan) };
        } else {
            // A forked child closes its copies of the descriptors but leaves the shared header alone:
            // marking the channel closed would end the parent's connection. The mapping stays (a leak
            // of address space in the child only).
            sys::close(self.bell_fd);
            sys::close(self.server_bell_fd);
            sys::close(self.lifeline_fd);
        }
        sys::close(self.shadow_fd);
    }
}

/// The channel behind `fd`, if it is one.
pub fn lookup(fd: i32) -> Option<Arc<Channel>> {
    if TABLE_ENTRIES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    TABLE.read().get(&fd).cloned()
}

/// True when any descriptor is a channel.
pub fn any() -> bool {
    TABLE_ENTRIES.load(Ordering::Relaxed) != 0
}

/// Makes `fd` a descriptor of `channel` (replacing whatever channel it was).
pub fn insert(fd: i32, channel: Arc<Channel>) -> Option<Arc<Channel>> {
    let mut table = TABLE.write();
    let old = table.insert(fd, channel);
    TABLE_ENTRIES.store(table.len(), Ordering::Relaxed);
    old
}

/// Forgets `fd`; the returned channel is dropped by the caller, outside the lock.
pub fn remove(fd: i32) -> Option<Arc<Channel>> {
    if !any() {
        return None;
    }
    let mut table = TABLE.write();
    let old = table.remove(&fd);
    TABLE_ENTRIES.store(table.len(), Ordering::Relaxed);
    old
}

/// Forgets every channel descriptor in `first..=last` (close_range).
pub fn remove_range(first: u32, last: u32) -> Vec<(i32, Arc<Channel>)> {
    if !any() {
        return Vec::new();
    }
    let mut table = TABLE.write();
    let low = first.min(i32::MAX as u32) as i32;
    let high = last.min(i32::MAX as u32) as i32;
    let fds: Vec<i32> = table.range(low..=high).map(|(fd, _)| *fd).collect();
    let removed = fds
        .into_iter()
        .filter_map(|fd| table.remove(&fd).map(|channel| (fd, channel)))
        .collect();
    TABLE_ENTRIES.store(table.len(), Ordering::Relaxed);
    removed
}

/// An errno as an io::Error.
pub fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}
