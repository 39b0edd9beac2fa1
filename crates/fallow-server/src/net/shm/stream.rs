//! A shared-memory channel as the connection loops see it: `AsyncRead` over the request ring and
//! `AsyncWrite` over the reply ring, so RESP and memcached connections run over it unchanged (every
//! command, transaction, pub/sub and blocking command, with the same query and output limits).
//!
//! A read or write that finds its ring empty (full) records the waker and the peer index it saw; the
//! poller wakes it when that index moves (`Channel::wake_if_moved`). The index the peer writes is only
//! compared, never trusted: the reads and writes themselves go through the checked rings.
use crate::server::Server;
use fallow_shm::layout::{Mapping, Side};
use fallow_shm::server::ServerChannel;
use fallow_shm::RingError;
use parking_lot::Mutex;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A waiting reader or writer and the peer index it saw.
#[derive(Default)]
struct Watch {
    read: Option<(Waker, u64)>,
    write: Option<(Waker, u64)>,
}

/// One open channel, shared by its connection (through `ShmStream`), the poller and the lifeline task.
pub(crate) struct Channel {
    pub(crate) mapping: Arc<Mapping>,
    rings: Mutex<ServerChannel>,
    watch: Mutex<Watch>,
    /// Mirrors of `watch` the poller reads without the lock on every spin (set after `watch`).
    read_waiting: AtomicBool,
    read_seen: AtomicU64,
    write_waiting: AtomicBool,
    write_seen: AtomicU64,
    /// The Unix socket closed or carried bytes: the channel is over.
    pub(crate) lifeline_closed: AtomicBool,
    /// Notified once when the connection on the channel has finished (the lifeline socket then closes).
    pub(crate) ended: tokio::sync::Notify,
    pub(crate) server: Arc<Server>,
    pub(crate) ring_bytes_total: u64,
    server_bell_fd: i32,
}

impl Channel {
    pub(crate) fn new(rings: ServerChannel, server: Arc<Server>) -> Arc<Channel> {
        let layout = rings.mapping.layout();
        Arc::new(Channel {
            mapping: rings.mapping.clone(),
            server_bell_fd: rings.server_bell.fd(),
            rings: Mutex::new(rings),
            watch: Mutex::new(Watch::default()),
            read_waiting: AtomicBool::new(false),
            read_seen: AtomicU64::new(0),
            write_waiting: AtomicBool::new(false),
            write_seen: AtomicU64::new(0),
            lifeline_closed: AtomicBool::new(false),
            ended: tokio::sync::Notify::new(),
            server,
            ring_bytes_total: (layout.request_ring_bytes + layout.reply_ring_bytes) as u64,
        })
    }

    /// The eventfd the client rings while the poller sleeps.
    pub(crate) fn server_bell_fd(&self) -> i32 {
        self.server_bell_fd
    }

    /// Clears the server doorbell's counter (after the poller woke on it).
    pub(crate) fn drain_server_bell(&self) {
        fallow_shm::sys::eventfd_drain(self.server_bell_fd);
    }

    /// Wakes a waiting reader whose ring got data (or whose peer closed), and a waiting writer whose
    /// ring got room. True when it woke one.
    pub(crate) fn wake_if_moved(&self) -> bool {
        if !self.moved() {
            return false;
        }
        let mut watch = self.watch.lock();
        self.read_waiting.store(false, Ordering::Relaxed);
        self.write_waiting.store(false, Ordering::Relaxed);
        let mut woke = false;
        if let Some((waker, seen)) = watch.read.take() {
            if self.read_moved(seen) {
                waker.wake();
                woke = true;
            } else {
                // Still waiting: registered again, the mirrors with it.
                self.watch_read_locked(&mut watch, waker, seen);
            }
        }
        if let Some((waker, seen)) = watch.write.take() {
            if self.write_moved(seen) {
                waker.wake();
                woke = true;
            } else {
                self.watch_write_locked(&mut watch, waker, seen);
            }
        }
        woke
    }

    /// Whether a waiter may have to be woken: the lock-free check the poller makes on every spin.
    fn moved(&self) -> bool {
        (self.read_waiting.load(Ordering::Acquire)
            && self.read_moved(self.read_seen.load(Ordering::Relaxed)))
            || (self.write_waiting.load(Ordering::Acquire)
                && self.write_moved(self.write_seen.load(Ordering::Relaxed)))
    }

    /// A reader that saw the request tail at `seen` has something new: data, or the end.
    fn read_moved(&self, seen: u64) -> bool {
        self.lifeline_closed.load(Ordering::Relaxed)
            || self.mapping.request_tail() != seen
            || self.mapping.is_closed(Side::Client)
    }

    /// A writer that saw the reply head at `seen` has room, or the end. (A client's closed mark ends its
    /// requests, not its replies: see poll_write.)
    fn write_moved(&self, seen: u64) -> bool {
        self.lifeline_closed.load(Ordering::Relaxed) || self.mapping.reply_head() != seen
    }

    fn watch_read_locked(&self, watch: &mut Watch, waker: Waker, seen: u64) {
        watch.read = Some((waker, seen));
        self.read_seen.store(seen, Ordering::Relaxed);
        self.read_waiting.store(true, Ordering::Release);
    }

    fn watch_write_locked(&self, watch: &mut Watch, waker: Waker, seen: u64) {
        watch.write = Some((waker, seen));
        self.write_seen.store(seen, Ordering::Relaxed);
        self.write_waiting.store(true, Ordering::Release);
    }

    fn watch_read(&self, waker: &Waker, seen: u64) {
        self.watch_read_locked(&mut self.watch.lock(), waker.clone(), seen);
    }

    fn watch_write(&self, waker: &Waker, seen: u64) {
        self.watch_write_locked(&mut self.watch.lock(), waker.clone(), seen);
    }

    /// The lifeline is gone: every waiter wakes to find the channel over.
    pub(crate) fn close_from_lifeline(&self) {
        self.lifeline_closed.store(true, Ordering::Release);
        self.wake_if_moved();
    }

    /// The connection finished: the client sees the end, the lifeline task closes the socket.
    pub(crate) fn finish(&self) {
        self.rings.lock().close();
        self.ended.notify_one();
    }

    fn corrupt(&self, error: RingError) -> io::Error {
        self.server
            .shm
            .closed_corrupt
            .fetch_add(1, Ordering::Relaxed);
        io::Error::new(io::ErrorKind::InvalidData, error)
    }
}

/// The connection's end of a channel.
pub(crate) struct ShmStream {
    channel: Arc<Channel>,
}

impl ShmStream {
    pub(crate) fn new(channel: Arc<Channel>) -> ShmStream {
        ShmStream { channel }
    }
}

impl AsyncRead for ShmStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let channel = &self.channel;
        if channel.lifeline_closed.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let mut rings = channel.rings.lock();
        let available = match rings.requests.available_bytes() {
            Ok(available) => available,
            Err(error) => return Poll::Ready(Err(channel.corrupt(error))),
        };
        if available == 0 {
            if channel.mapping.is_closed(Side::Client) {
                return Poll::Ready(Ok(()));
            }
            // The tail equalled this head just now: any publication after the check moves it.
            let seen = rings.requests.position();
            channel.watch_read(cx.waker(), seen);
            return Poll::Pending;
        }
        // Only the bytes there are zeroed and copied (not the buffer's whole spare capacity).
        let wanted = available.min(buf.remaining());
        let read = match rings.requests.read(buf.initialize_unfilled_to(wanted)) {
            Ok(read) => read,
            Err(error) => return Poll::Ready(Err(channel.corrupt(error))),
        };
        buf.advance(read);
        // Room was made: a client waiting to write more may sleep.
        rings.wake_client_if_sleeping();
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ShmStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let channel = &self.channel;
        // A client that marked its side closed but keeps its lifeline has only shut down its writing
        // half (the preload library's `shutdown(SHUT_WR)`): replies to the requests before the mark
        // still go out, as on a TCP socket after a FIN. A client that is gone closed the lifeline too.
        if channel.lifeline_closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let mut rings = channel.rings.lock();
        for attempt in 0..2 {
            match rings.replies.write(bytes) {
                Err(error) => return Poll::Ready(Err(channel.corrupt(error))),
                Ok(0) if bytes.is_empty() => return Poll::Ready(Ok(0)),
                Ok(0) if attempt == 0 => {
                    // Register, then try once more: room made between the try and the registration
                    // moved the head before `seen` was read, so it would wake nobody.
                    let seen = channel.mapping.reply_head();
                    channel.watch_write(cx.waker(), seen);
                }
                Ok(0) => return Poll::Pending,
                Ok(written) => {
                    if attempt == 1 {
                        channel.watch.lock().write = None;
                    }
                    rings.wake_client_if_sleeping();
                    return Poll::Ready(Ok(written));
                }
            }
        }
        Poll::Pending
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.channel.rings.lock().close();
        Poll::Ready(Ok(()))
    }
}
