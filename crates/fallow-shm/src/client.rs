//! The client's end: the SHM.OPEN handshake over a Unix socket, and blocking or non-blocking reads and
//! writes on the rings. Used by `fallow-client`, the preload library and `fallow-bench`.
use crate::layout::{Mapping, Protocol, Side};
use crate::ring::{Consumer, Direction, Producer, RingError};
use crate::sys;
use crate::wait::{wait_until, Doorbell, SpinPolicy};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest handshake reply read (a refusal's message included).
const OPEN_REPLY_BYTES_MAX: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The protocol on the rings; None lets the server pick by the socket it was asked on.
    pub protocol: Option<Protocol>,
    /// The TCP port the client meant (`PORT p`): the server picks RESP or memcached by it, so one
    /// socket (`$FALLOW_SOCKET`) serves both. None leaves it to the socket asked on.
    pub port: Option<u16>,
    /// Ring sizes to ask for (both rings); None takes the server's.
    pub ring_bytes: Option<usize>,
    /// Sent as `AUTH` before SHM.OPEN: (user, password). The channel starts as the socket's connection
    /// stands, authenticated or not.
    pub auth: Option<(Option<String>, String)>,
    pub spin: SpinPolicy,
}

#[derive(Debug)]
pub enum OpenError {
    /// The socket could not be reached or the exchange failed.
    Io(io::Error),
    /// The server answered with an error (too old, channels off, peer not allowed...): use the socket.
    Refused(String),
    /// The server's reply or its descriptors do not make a channel.
    Invalid(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(error) => write!(f, "shared-memory channel: {error}"),
            OpenError::Refused(message) => write!(f, "shared-memory channel refused: {message}"),
            OpenError::Invalid(message) => write!(f, "shared-memory channel invalid: {message}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<io::Error> for OpenError {
    fn from(error: io::Error) -> OpenError {
        OpenError::Io(error)
    }
}

/// An open channel, client side.
pub struct ClientChannel {
    pub mapping: Arc<Mapping>,
    requests: Producer,
    replies: Consumer,
    server_bell: Doorbell,
    client_bell: Doorbell,
    /// The Unix socket the channel was opened on; closing it frees the channel.
    lifeline: i32,
    spin: SpinPolicy,
}

fn encode_request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One RESP line at `at`: its type byte, its text and the offset after it; None when incomplete.
fn line(buf: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((*buf.get(at)?, &buf[at + 1..end], end + 2))
}

/// Parses one reply of the handshake: +OK / -error / a flat map or array of bulk strings and integers.
/// Ok(None) while incomplete; the values come back as text.
fn parse_reply(buf: &[u8]) -> Result<Option<(Vec<String>, usize)>, OpenError> {
    let Some((kind, text, mut at)) = line(buf, 0) else {
        return Ok(None);
    };
    let text_of = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let items = match kind {
        b'+' => return Ok(Some((vec![text_of(text)], at))),
        b'-' => return Err(OpenError::Refused(text_of(text))),
        b'*' | b'%' => {
            let count: usize = text_of(text)
                .parse()
                .map_err(|_| OpenError::Invalid("bad count".into()))?;
            if count > 64 {
                return Err(OpenError::Invalid("reply too long".into()));
            }
            count * if kind == b'%' { 2 } else { 1 }
        }
        _ => {
            return Err(OpenError::Invalid(format!(
                "unexpected reply {:?}",
                text_of(&buf[..at])
            )))
        }
    };
    let mut values = Vec::with_capacity(items);
    for _ in 0..items {
        let Some((kind, text, next)) = line(buf, at) else {
            return Ok(None);
        };
        at = next;
        match kind {
            b':' | b'+' => values.push(text_of(text)),
            b'$' => {
                let len: usize = text_of(text)
                    .parse()
                    .map_err(|_| OpenError::Invalid("bad length".into()))?;
                if buf.len() < at + len + 2 {
                    return Ok(None);
                }
                values.push(text_of(&buf[at..at + len]));
                at += len + 2;
            }
            _ => return Err(OpenError::Invalid("unexpected item in reply".into())),
        }
    }
    Ok(Some((values, at)))
}

/// Reads one handshake reply from `socket`, keeping any descriptors that come with it.
fn read_reply(
    socket: i32,
    buf: &mut Vec<u8>,
    fds: &mut Vec<i32>,
) -> Result<Vec<String>, OpenError> {
    loop {
        if let Some((values, used)) = parse_reply(buf)? {
            buf.drain(..used);
            return Ok(values);
        }
        if buf.len() >= OPEN_REPLY_BYTES_MAX {
            return Err(OpenError::Invalid("reply too long".into()));
        }
        let mut chunk = [0u8; 1024];
        let n = sys::recv_with_fds(socket, &mut chunk, fds)?;
        if n == 0 {
            return Err(OpenError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl ClientChannel {
    /// Connects to the server's Unix socket at `path` and opens a channel on it.
    pub fn open(path: &Path, options: &OpenOptions) -> Result<ClientChannel, OpenError> {
        let socket = sys::unix_connect(path)?;
        let mut fds = Vec::new();
        let opened = Self::handshake(socket, options, &mut fds);
        match opened {
            Ok(channel) => Ok(channel),
            Err(error) => {
                for fd in fds {
                    sys::close(fd);
                }
                sys::close(socket);
                Err(error)
            }
        }
    }

    fn handshake(
        socket: i32,
        options: &OpenOptions,
        fds: &mut Vec<i32>,
    ) -> Result<ClientChannel, OpenError> {
        // A socket timeout keeps a stuck server from hanging the client's connect.
        let timeout = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: setting a plain option on our socket.
        unsafe {
            libc::syscall(
                libc::SYS_setsockopt,
                socket,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        let mut buf = Vec::new();
        if let Some((user, password)) = &options.auth {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = user {
                args.push(user.as_bytes());
            }
            args.push(password.as_bytes());
            sys::write_all(socket, &encode_request(&args))?;
            read_reply(socket, &mut buf, fds)?;
        }
        let ring_bytes = options.ring_bytes.map(|bytes| bytes.to_string());
        let mut args: Vec<&[u8]> = vec![b"SHM.OPEN"];
        match options.protocol {
            Some(Protocol::Resp) => args.extend([&b"PROTOCOL"[..], b"resp"]),
            Some(Protocol::Memcache) => args.extend([&b"PROTOCOL"[..], b"memcache"]),
            None => {}
        }
        let port = options.port.map(|port| port.to_string());
        if let Some(port) = &port {
            args.extend([&b"PORT"[..], port.as_bytes()]);
        }
        if let Some(bytes) = &ring_bytes {
            args.extend([&b"RING-BYTES"[..], bytes.as_bytes()]);
        }
        sys::write_all(socket, &encode_request(&args))?;
        read_reply(socket, &mut buf, fds)?;
        if !buf.is_empty() {
            return Err(OpenError::Invalid("bytes after the SHM.OPEN reply".into()));
        }
        let [memfd, server_bell, client_bell] = fds[..] else {
            return Err(OpenError::Invalid(format!(
                "{} descriptors passed, 3 expected",
                fds.len()
            )));
        };
        let seals = sys::seals(memfd)?;
        if seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
            != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
        {
            return Err(OpenError::Invalid(
                "memfd not sealed against resizing".into(),
            ));
        }
        let len = sys::file_bytes(memfd)?;
        let (base, len) = Mapping::map(memfd, len)?;
        let mapping = Mapping::adopt(base, len).map_err(OpenError::Invalid)?;
        sys::close(memfd);
        fds.clear();
        let mapping = Arc::new(mapping);
        Ok(ClientChannel {
            requests: Producer::new(mapping.clone(), Direction::Request),
            replies: Consumer::new(mapping.clone(), Direction::Reply),
            mapping,
            server_bell: Doorbell::from_fd(server_bell),
            client_bell: Doorbell::from_fd(client_bell),
            lifeline: socket,
            spin: options.spin,
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.mapping.layout().protocol
    }

    /// The eventfd the server rings when this side sleeps (poll it for readability).
    pub fn client_bell_fd(&self) -> i32 {
        self.client_bell.fd()
    }

    /// True when the server's end of the lifeline is gone (it exited or dropped the connection without
    /// marking the channel closed), or the server wrote on it (which ends the channel too).
    pub fn lifeline_closed(&self) -> bool {
        let mut poll = [libc::pollfd {
            fd: self.lifeline,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        }];
        if !matches!(sys::ppoll(&mut poll, Some(Duration::ZERO)), Ok(n) if n > 0) {
            return false;
        }
        if poll[0].revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0 {
            return true;
        }
        let mut byte = 0u8;
        // SAFETY: peeks at most one byte into a local.
        let peeked = unsafe {
            libc::syscall(
                libc::SYS_recvfrom,
                self.lifeline,
                &mut byte as *mut u8,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
                std::ptr::null_mut::<libc::sockaddr>(),
                std::ptr::null_mut::<libc::socklen_t>(),
            )
        };
        peeked >= 0
    }

    /// The server's doorbell (rung when the server sleeps and this side moved an index).
    pub fn server_bell_fd(&self) -> i32 {
        self.server_bell.fd()
    }

    pub fn lifeline_fd(&self) -> i32 {
        self.lifeline
    }

    pub fn spin(&self) -> SpinPolicy {
        self.spin
    }

    fn ring_server_if_sleeping(&self) {
        if self.mapping.peer_needs_wake(Side::Client) {
            self.server_bell.ring();
        }
    }

    /// Writes what fits now; 0 when the ring is full. Errors when the server has closed the channel.
    pub fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.mapping.is_closed(Side::Server) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let n = self.requests.write(bytes).map_err(corrupt)?;
        if n > 0 {
            self.ring_server_if_sleeping();
        }
        Ok(n)
    }

    /// Reads what is there now; Ok(0) with `WouldBlock` semantics is `Err(WouldBlock)`, and Ok(0) is the
    /// end of the stream (the server closed and everything it sent has been read).
    pub fn try_read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.replies.read(out).map_err(corrupt)?;
        if n > 0 {
            self.ring_server_if_sleeping();
            return Ok(n);
        }
        if self.mapping.is_closed(Side::Server) {
            // Replies published before the close are read first.
            let n = self.replies.read(out).map_err(corrupt)?;
            return Ok(n);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Bytes waiting in the reply ring.
    pub fn readable_bytes(&self) -> usize {
        self.replies.available_bytes().unwrap_or(usize::MAX)
    }

    /// True when a read would not block: data, end of stream, or a broken ring (whose read errors).
    pub fn read_ready(&self) -> bool {
        self.readable_bytes() > 0 || self.mapping.is_closed(Side::Server)
    }

    /// True when a write would not block.
    pub fn write_ready(&mut self) -> bool {
        self.mapping.is_closed(Side::Server) || self.requests.free_bytes().map_or(true, |n| n > 0)
    }

    /// Writes all of `bytes`, waiting (spin, then sleep) while the ring is full.
    pub fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = self.try_write(bytes)?;
            bytes = &bytes[n..];
            if !bytes.is_empty() {
                self.wait_writable(None)?;
            }
        }
        Ok(())
    }

    /// Reads at least one byte, waiting (spin, then sleep) until the server sends; Ok(0) at the end.
    pub fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.try_read(out) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_readable(None)?;
                }
                other => return other,
            }
        }
    }

    /// Waits until a read would not block or `timeout` passes; false on timeout.
    pub fn wait_readable(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (mapping, replies) = (&self.mapping, &self.replies);
        wait_until(
            mapping,
            Side::Client,
            &self.client_bell,
            self.spin,
            deadline,
            || replies.available_bytes().map_or(true, |n| n > 0) || mapping.is_closed(Side::Server),
        )
    }

    pub fn wait_writable(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (mapping, requests) = (&self.mapping, &mut self.requests);
        wait_until(
            mapping,
            Side::Client,
            &self.client_bell,
            self.spin,
            deadline,
            || requests.free_bytes().map_or(true, |n| n > 0) || mapping.is_closed(Side::Server),
        )
    }

    /// Marks this side sleeping (before a poll on the client doorbell by someone else, e.g. the preload's
    /// epoll_wait) and says whether the channel became ready meanwhile (then do not sleep).
    pub fn prepare_to_sleep(&mut self, want_read: bool, want_write: bool) -> bool {
        self.mapping.mark_sleeping(Side::Client);
        let ready = (want_read && self.read_ready()) || (want_write && self.write_ready());
        if ready {
            self.mapping.clear_sleeping(Side::Client);
        }
        ready
    }

    /// After a sleep on the doorbell: clears the mark and the doorbell's counter.
    pub fn woke(&self) {
        self.client_bell.drain();
        self.mapping.clear_sleeping(Side::Client);
    }
}

fn corrupt(error: RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

impl Drop for ClientChannel {
    fn drop(&mut self) {
        self.mapping.mark_closed(Side::Client);
        self.server_bell.ring();
        sys::close(self.lifeline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_replies_parse_in_pieces() {
        let reply = crate::server::open_reply(
            &crate::Layout {
                request_ring_bytes: 8192,
                reply_ring_bytes: 4096,
                protocol: Protocol::Resp,
                server_spin_ns: 0,
            },
            false,
        );
        for cut in 0..reply.len() {
            assert!(
                parse_reply(&reply[..cut]).unwrap().is_none(),
                "complete at {cut}"
            );
        }
        let (values, used) = parse_reply(&reply).unwrap().unwrap();
        assert_eq!(used, reply.len());
        assert_eq!(values[0..4], ["version", "1", "layout", "fallow-shm-v1"]);
        assert!(matches!(parse_reply(b"-ERR no\r\n"), Err(OpenError::Refused(m)) if m == "ERR no"));
    }
}
