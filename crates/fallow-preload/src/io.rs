//! Reads and writes on a redirected socket: bytes come off the reply ring and go onto the request ring.
//! A blocking call spins for the channel's budget and then sleeps on the doorbell (and the lifeline, so a
//! dead server ends the wait); a non-blocking one answers `EAGAIN`. Signals interrupt a sleep with `EINTR`
//! as they would a socket's.
use crate::channel::{errno, Channel, Io, PEEK_BYTES_MAX};
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What a wait waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Read,
    Write,
}

fn ready(channel: &Channel, want: Want) -> bool {
    let mut io = channel.io();
    match want {
        Want::Read => channel.read_ready(&io),
        Want::Write => channel.write_ready(&mut io),
    }
}

/// The deadline for a call under a SO_RCVTIMEO / SO_SNDTIMEO of `timeout_ns` (0: none).
fn deadline_after(timeout_ns: u64) -> Option<Instant> {
    (timeout_ns > 0).then(|| Instant::now() + Duration::from_nanos(timeout_ns))
}

/// Waits on the doorbell and the lifeline: Ok(true) when one fired, Ok(false) on timeout.
pub fn sleep_on(channel: &Channel, deadline: Option<Instant>) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd: channel.bell_fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: channel.lifeline_fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let result = fallow_shm::sys::ppoll(&mut fds, timeout);
    if fds[1].revents != 0 {
        channel.lifeline_down.store(true, Ordering::Relaxed);
    }
    Ok(result? > 0)
}

/// Waits until `want` holds: spins (the client's budget), then sleeps. Ok(false) when `deadline` passed.
pub fn wait(channel: &Channel, want: Want, deadline: Option<Instant>) -> io::Result<bool> {
    let mut spin = crate::spin::Spin::new(true);
    loop {
        if ready(channel, want) {
            spin.ready();
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        if !spin.again() {
            break;
        }
    }
    loop {
        let (want_read, want_write) = (want == Want::Read, want == Want::Write);
        let already = channel.prepare_to_sleep(want_read, want_write);
        let slept = if already {
            Ok(true)
        } else {
            sleep_on(channel, deadline)
        };
        channel.woke();
        slept?;
        if already || ready(channel, want) {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
    }
}

/// Moves up to `want` bytes from the ring into `io.peeked` (a peek must not consume).
fn fill_peeked(io: &mut Io, want: usize) -> io::Result<()> {
    let want = want.min(PEEK_BYTES_MAX);
    while io.peeked.len() < want {
        let have = io.peeked.len();
        io.peeked.resize(want, 0);
        let read = io.chan.try_read(&mut io.peeked[have..]);
        match read {
            Ok(n) => io.peeked.truncate(have + n),
            Err(error) => {
                io.peeked.truncate(have);
                return if error.kind() == io::ErrorKind::WouldBlock {
                    Ok(())
                } else {
                    Err(error)
                };
            }
        }
        if io.peeked.len() == have {
            break;
        }
    }
    Ok(())
}

/// One non-blocking receive into `out`: Ok(0) at the end of the stream, WouldBlock when nothing is there.
fn try_receive(channel: &Channel, out: &mut [u8], peek: bool) -> io::Result<usize> {
    if channel.shut_read.load(Ordering::Relaxed) {
        return Ok(0);
    }
    let mut io = channel.io();
    let result = if peek {
        fill_peeked(&mut io, out.len()).map(|()| {
            let n = out.len().min(io.peeked.len());
            out[..n].copy_from_slice(&io.peeked[..n]);
            n
        })
    } else {
        let from_peeked = out.len().min(io.peeked.len());
        out[..from_peeked].copy_from_slice(&io.peeked[..from_peeked]);
        io.peeked.drain(..from_peeked);
        if from_peeked == out.len() {
            Ok(from_peeked)
        } else {
            match io.chan.try_read(&mut out[from_peeked..]) {
                Ok(n) => Ok(from_peeked + n),
                Err(error) if from_peeked > 0 && error.kind() == io::ErrorKind::WouldBlock => {
                    Ok(from_peeked)
                }
                Err(error) => Err(error),
            }
        }
    };
    match result {
        Ok(0) if !out.is_empty() && !channel.hung_up(&io) && !io.chan.read_ready() => {
            Err(io::ErrorKind::WouldBlock.into())
        }
        Ok(n) => {
            if n > 0 && !peek {
                channel.read_epoch.fetch_add(1, Ordering::Relaxed);
                if io.peeked.is_empty() && io.chan.readable_bytes() == 0 {
                    channel.reply_due.store(false, Ordering::Relaxed);
                }
            }
            Ok(n)
        }
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
            // A lifeline that hung up with the ring empty is the end of the stream.
            if channel.lifeline_down.load(Ordering::Relaxed) {
                Ok(0)
            } else {
                Err(error)
            }
        }
        Err(error) if error.kind() == io::ErrorKind::InvalidData => Err(errno(libc::ECONNRESET)),
        Err(error) => Err(error),
    }
}

/// recv on a redirected socket with the socket's semantics for `flags` (MSG_PEEK, MSG_DONTWAIT,
/// MSG_WAITALL); other flags are ignored as TCP ignores most of them.
pub fn receive(channel: &Channel, out: &mut [u8], flags: i32) -> io::Result<usize> {
    if channel.inherited() {
        return Err(errno(libc::ECONNRESET));
    }
    if out.is_empty() {
        return Ok(0);
    }
    let peek = flags & libc::MSG_PEEK != 0;
    let wait_all = flags & libc::MSG_WAITALL != 0 && !peek;
    let nonblocking =
        flags & libc::MSG_DONTWAIT != 0 || channel.nonblocking.load(Ordering::Relaxed);
    let deadline = deadline_after(channel.receive_timeout_ns.load(Ordering::Relaxed));
    let mut got = 0;
    loop {
        match try_receive(channel, &mut out[got..], peek) {
            Ok(0) => return Ok(got),
            Ok(n) => {
                got += n;
                if !wait_all || got == out.len() {
                    return Ok(got);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock && !nonblocking => {}
            Err(error) => {
                return if got > 0 {
                    Ok(got)
                } else {
                    Err(would_block_as_eagain(error))
                }
            }
        }
        match wait(channel, Want::Read, deadline) {
            Ok(true) => {}
            Ok(false) => {
                return if got > 0 {
                    Ok(got)
                } else {
                    Err(errno(libc::EAGAIN))
                }
            }
            Err(error) => return if got > 0 { Ok(got) } else { Err(error) },
        }
    }
}

/// A scatter receive (readv, recvmsg): the first buffer has the call's blocking semantics, the rest take
/// what is already there (or wait too, under MSG_WAITALL).
pub fn receive_vectored(
    channel: &Channel,
    bufs: &mut [&mut [u8]],
    flags: i32,
) -> io::Result<usize> {
    if flags & libc::MSG_PEEK != 0 && bufs.len() > 1 {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut scratch = vec![0u8; total.min(PEEK_BYTES_MAX)];
        let n = receive(channel, &mut scratch, flags)?;
        let mut at = 0;
        for buf in bufs.iter_mut() {
            let take = buf.len().min(n - at);
            buf[..take].copy_from_slice(&scratch[at..at + take]);
            at += take;
        }
        return Ok(n);
    }
    let mut total = 0;
    let mut first = true;
    for buf in bufs.iter_mut().filter(|b| !b.is_empty()) {
        let call_flags = if first || flags & libc::MSG_WAITALL != 0 {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        let n = match receive(channel, buf, call_flags) {
            Ok(n) => n,
            // Bytes already placed in earlier buffers are the result; the error comes next call.
            Err(_) if !first => break,
            Err(error) => return Err(error),
        };
        first = false;
        total += n;
        if n < buf.len() {
            break;
        }
    }
    Ok(total)
}

fn would_block_as_eagain(error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::WouldBlock {
        errno(libc::EAGAIN)
    } else {
        error
    }
}

/// One non-blocking write: the bytes that fit, WouldBlock when none do, EPIPE when the channel is over.
fn try_send(channel: &Channel, bytes: &[u8]) -> io::Result<usize> {
    let mut io = channel.io();
    if channel.shut_write.load(Ordering::Relaxed) || channel.hung_up(&io) {
        return Err(errno(libc::EPIPE));
    }
    match io.chan.try_write(bytes) {
        Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
        Ok(n) => {
            channel.write_epoch.fetch_add(1, Ordering::Relaxed);
            channel.reply_due.store(true, Ordering::Relaxed);
            Ok(n)
        }
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Err(errno(libc::EPIPE)),
        Err(error) if error.kind() == io::ErrorKind::InvalidData => Err(errno(libc::ECONNRESET)),
        Err(error) => Err(error),
    }
}

/// Sends SIGPIPE to the calling thread, as a write to a closed socket does without MSG_NOSIGNAL.
fn raise_sigpipe() {
    // SAFETY: signalling our own thread.
    unsafe {
        let pid = libc::syscall(libc::SYS_getpid);
        let tid = libc::syscall(libc::SYS_gettid);
        libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGPIPE);
    }
}

/// send on a redirected socket: a blocking socket writes everything (waiting for room), a non-blocking
/// one what fits. `flags` as send's (MSG_DONTWAIT, MSG_NOSIGNAL; MSG_MORE is moot on a ring).
pub fn send(channel: &Channel, bytes: &[u8], flags: i32) -> io::Result<usize> {
    if channel.inherited() {
        return Err(errno(libc::ECONNRESET));
    }
    if bytes.is_empty() {
        // As TCP: nothing to send is sent at once (a ring write of nothing would read as "full").
        return Ok(0);
    }
    let nonblocking =
        flags & libc::MSG_DONTWAIT != 0 || channel.nonblocking.load(Ordering::Relaxed);
    let deadline = deadline_after(channel.send_timeout_ns.load(Ordering::Relaxed));
    let mut sent = 0;
    loop {
        match try_send(channel, &bytes[sent..]) {
            Ok(n) => {
                sent += n;
                if sent == bytes.len() || nonblocking {
                    return Ok(sent);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock && !nonblocking => {}
            Err(error) => {
                if sent > 0 {
                    return Ok(sent);
                }
                if error.raw_os_error() == Some(libc::EPIPE) && flags & libc::MSG_NOSIGNAL == 0 {
                    raise_sigpipe();
                }
                return Err(would_block_as_eagain(error));
            }
        }
        if bytes.len() == sent {
            return Ok(sent);
        }
        match wait(channel, Want::Write, deadline) {
            Ok(true) => {}
            Ok(false) => {
                return if sent > 0 {
                    Ok(sent)
                } else {
                    Err(errno(libc::EAGAIN))
                }
            }
            Err(error) => return if sent > 0 { Ok(sent) } else { Err(error) },
        }
    }
}

/// A gather send (writev, sendmsg): each buffer in turn, stopping where a non-blocking one fell short.
pub fn send_vectored(channel: &Channel, bufs: &[&[u8]], flags: i32) -> io::Result<usize> {
    let mut total = 0;
    for buf in bufs.iter().filter(|b| !b.is_empty()) {
        let n = match send(channel, buf, flags) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(error) => return Err(error),
        };
        total += n;
        if n < buf.len() {
            break;
        }
    }
    Ok(total)
}

/// Bytes a read would return now (FIONREAD).
pub fn readable_bytes(channel: &Channel) -> usize {
    let io = channel.io();
    io.peeked.len() + io.chan.readable_bytes().min(usize::MAX / 2)
}
