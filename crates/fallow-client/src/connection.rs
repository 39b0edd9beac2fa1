//! Blocking RESP2 connections over TCP, a Unix socket or a shared-memory channel opened on the Unix
//! socket (docs/shm.md), and the per-node pools that keep them.
//!
//! A node given as `unix:...` is reached over a shared-memory channel when `ConnectionSettings::shm_channels`
//! is on (the default) and the server grants one: the same RESP bytes then cross two rings in a memfd
//! instead of the kernel's socket buffers. When the server refuses (`shm-channels no`, a server without
//! SHM.OPEN, a peer it does not allow) or the open fails, the connection falls back to the plain socket,
//! so turning channels on never costs a working connection.
//!
//! A connection carries at most one server transaction at a time, so a transaction holds its connections
//! from TXN.BEGIN to TXN.COMMIT/TXN.ABORT and gives them back only in a clean state. A connection whose
//! exchange failed half-way is dropped (the server aborts its transaction on disconnect), never reused.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fallow_shm::layout::Protocol;
use fallow_shm::{AdaptiveSpin, ClientChannel, OpenOptions, SpinPolicy};
use parking_lot::Mutex;

use crate::error::ClientError;
use crate::reply::{parse_reply, ParsedReply, Reply, ReplyLimits};

/// How long one read or write may block. Longer than the server's default lock wait (500 ms), so a
/// command waiting for a lock gets its TXNABORT rather than a client-side timeout.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

const READ_CHUNK_BYTES: usize = 16 << 10;

/// How often a reader waiting on a channel looks at its lifeline.
const LIFELINE_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// What every connection of a client is opened with.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionSettings {
    pub limits: ReplyLimits,
    /// `ClientConfig::emulated_link_delay_us`: each flush sleeps this long first.
    pub link_delay: Duration,
    /// `ClientConfig::shm_channels`: open a shared-memory channel on `unix:` nodes when the server grants
    /// one (else the plain socket).
    pub shm_channels: bool,
}

impl Default for ConnectionSettings {
    fn default() -> ConnectionSettings {
        ConnectionSettings {
            limits: ReplyLimits::default(),
            link_delay: Duration::ZERO,
            shm_channels: true,
        }
    }
}

/// What a connection runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Unix,
    /// A shared-memory channel (its Unix socket kept open as the lifeline).
    Shm,
}

/// A node's address: `host:port` (TCP), `unix:/path`, or `unix:` alone for the local server's socket as
/// every fallow tool finds it (`$FALLOW_SOCKET`, else the default path for port 6379,
/// `fallow_proto::socket_path`).
pub fn unix_socket_of(address: &str) -> Option<PathBuf> {
    let path = address.strip_prefix("unix:")?;
    Some(if path.is_empty() {
        fallow_proto::socket_path::socket_path(6379)
    } else {
        PathBuf::from(path)
    })
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Shm(Box<ShmStream>),
}

/// A channel and this client's spin budget for it.
struct ShmStream {
    channel: ClientChannel,
    spin: AdaptiveSpin,
}

impl Stream {
    /// Opens `address`; `shm_refusal` gets why a channel was not used on a `unix:` node, if it was tried.
    fn open(
        address: &str,
        shm_channels: bool,
        shm_refusal: &mut Option<String>,
    ) -> std::io::Result<Stream> {
        let Some(path) = unix_socket_of(address) else {
            let stream = TcpStream::connect(address)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(IO_TIMEOUT))?;
            stream.set_write_timeout(Some(IO_TIMEOUT))?;
            return Ok(Stream::Tcp(stream));
        };
        if shm_channels {
            let options = OpenOptions {
                // RESP whatever the socket: this client speaks nothing else, even to the memcached
                // port's control socket (whose channels default to memcached).
                protocol: Some(Protocol::Resp),
                // The channel's own waits sleep at once: reads spin here first (`AdaptiveSpin`).
                spin: SpinPolicy { spin_ns: 0 },
                ..OpenOptions::default()
            };
            // Any failure (refused, an old server, descriptors that do not make a channel) falls back:
            // the plain socket works wherever the channel does not.
            match ClientChannel::open(&path, &options) {
                Ok(channel) => {
                    let spin = AdaptiveSpin::new(SpinPolicy::from_env().spin_ns);
                    return Ok(Stream::Shm(Box::new(ShmStream { channel, spin })));
                }
                Err(error) => *shm_refusal = Some(error.to_string()),
            }
        }
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Stream::Unix(stream))
    }

    fn transport(&self) -> Transport {
        match self {
            Stream::Tcp(_) => Transport::Tcp,
            Stream::Unix(_) => Transport::Unix,
            Stream::Shm(_) => Transport::Shm,
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.write_all(bytes),
            Stream::Unix(stream) => stream.write_all(bytes),
            Stream::Shm(shm) => shm_write_all(&mut shm.channel, bytes),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            Stream::Unix(stream) => stream.read(buf),
            Stream::Shm(shm) => shm_read(shm, buf),
        }
    }
}

/// Writes all of `bytes` to the request ring, waiting (spin, then sleep) while it is full; a server that
/// takes nothing for `IO_TIMEOUT` is an error, as a socket's write timeout would be.
fn shm_write_all(channel: &mut ClientChannel, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let written = channel.try_write(bytes)?;
        bytes = &bytes[written..];
        if !bytes.is_empty() && !channel.wait_writable(Some(IO_TIMEOUT))? {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
    }
    Ok(())
}

/// Reads at least one byte of replies, waiting up to `IO_TIMEOUT`; Ok(0) when the server closed the
/// channel or its end of the lifeline (a server that died marks nothing in the header).
fn shm_read(shm: &mut ShmStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let ShmStream { channel, spin } = shm;
    if !channel.read_ready() {
        spin.wait(|| channel.read_ready());
    }
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        match channel.try_read(buf) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                // In slices, looking at the lifeline between them: a long wait (BLPOP 0, a subscriber)
                // on a dead server ends within a slice instead of at the timeout.
                let slice = (deadline - now).min(LIFELINE_CHECK_INTERVAL);
                if !channel.wait_readable(Some(slice))? && channel.lifeline_closed() {
                    return Ok(0);
                }
            }
            other => return other,
        }
    }
}

pub struct Connection {
    stream: Stream,
    /// Received bytes not yet parsed: `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    out: Vec<u8>,
    limits: ReplyLimits,
    link_delay: Duration,
    /// Why a shared-memory channel was not used, when one was tried (`shm_refusal`).
    shm_refusal: Option<String>,
}

impl Connection {
    pub fn open(address: &str, settings: ConnectionSettings) -> Result<Connection, ClientError> {
        let mut shm_refusal = None;
        let stream = Stream::open(address, settings.shm_channels, &mut shm_refusal)?;
        Ok(Connection {
            stream,
            shm_refusal,
            buf: Vec::with_capacity(READ_CHUNK_BYTES),
            start: 0,
            out: Vec::new(),
            limits: settings.limits,
            link_delay: settings.link_delay,
        })
    }

    /// What this connection runs over (`Transport::Shm` when a channel was granted).
    pub fn transport(&self) -> Transport {
        self.stream.transport()
    }

    /// Why the server's shared-memory channel was not used on this `unix:` connection (the refusal or
    /// the failure, e.g. "shared-memory channel refused: ERR ..."); None when it was used or not tried.
    pub fn shm_refusal(&self) -> Option<&str> {
        self.shm_refusal.as_deref()
    }

    /// Queues one command; `flush` sends every queued command in one write (a pipeline).
    pub fn push(&mut self, args: &[&[u8]]) {
        fallow_proto::resp::encode_request(args, &mut self.out);
    }

    pub fn flush(&mut self) -> Result<(), ClientError> {
        // Before the write, not after the read: the server then sees the request as late as a real link
        // would deliver it, so locks are held across the delay (a delay overlapping a lock wait would not).
        if !self.link_delay.is_zero() {
            std::thread::sleep(self.link_delay);
        }
        let result = self.stream.write_all(&self.out);
        self.out.clear();
        Ok(result?)
    }

    /// Sends one command and reads its reply: one round trip.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, ClientError> {
        self.push(args);
        self.flush()?;
        self.read_reply()
    }

    pub fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            match parse_reply(&self.buf[self.start..], &self.limits) {
                ParsedReply::Complete(reply, used) => {
                    self.consume(used);
                    return Ok(reply);
                }
                ParsedReply::Invalid(message) => return Err(ClientError::Protocol(message)),
                ParsedReply::Incomplete => self.fill()?,
            }
        }
    }

    fn consume(&mut self, used: usize) {
        self.start += used;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more bytes. The buffer holds at most one reply's worth plus a chunk (the parser's limits bound
    /// a reply), so a server streaming garbage without end is cut off.
    fn fill(&mut self) -> Result<(), ClientError> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let buffered_bytes_max = self.limits.bulk_bytes_max.saturating_mul(2) + READ_CHUNK_BYTES;
        if self.buf.len() > buffered_bytes_max {
            return Err(ClientError::Protocol(format!(
                "reply larger than {buffered_bytes_max} bytes"
            )));
        }
        let old_len = self.buf.len();
        self.buf.resize(old_len + READ_CHUNK_BYTES, 0);
        let read = self.stream.read(&mut self.buf[old_len..]);
        let read_bytes = match read {
            Ok(n) => n,
            Err(error) => {
                self.buf.truncate(old_len);
                return Err(error.into());
            }
        };
        self.buf.truncate(old_len + read_bytes);
        if read_bytes == 0 {
            return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(())
    }
}

/// Idle connections to one node. Up to `idle_max` are kept; a checkout when none is idle opens a new
/// connection, so a pool never makes a thread wait (waiting for a connection held by a transaction that
/// waits for a lock held by this thread would deadlock outside the server's sight). Open connections are
/// bounded by the number of threads using the client, times the nodes a transaction touches.
pub struct Pool {
    address: String,
    idle: Mutex<Vec<Connection>>,
    idle_max: usize,
    settings: ConnectionSettings,
}

impl Pool {
    pub fn new(address: String, idle_max: usize, settings: ConnectionSettings) -> Pool {
        Pool {
            address,
            idle: Mutex::new(Vec::new()),
            idle_max,
            settings,
        }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn checkout(&self) -> Result<Connection, ClientError> {
        if let Some(connection) = self.idle.lock().pop() {
            return Ok(connection);
        }
        Connection::open(&self.address, self.settings)
    }

    /// Returns a connection in a clean state (no transaction, nothing unread).
    pub fn checkin(&self, connection: Connection) {
        debug_assert!(connection.start == connection.buf.len() && connection.out.is_empty());
        let mut idle = self.idle.lock();
        if idle.len() < self.idle_max {
            idle.push(connection);
        }
    }

    /// Opens connections up front so a bad address fails at `Client::connect`.
    pub fn warm(&self) -> Result<(), ClientError> {
        let connection = Connection::open(&self.address, self.settings)?;
        self.checkin(connection);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_addresses() {
        assert_eq!(unix_socket_of("127.0.0.1:6379"), None);
        assert_eq!(
            unix_socket_of("unix:/run/fallow/s.sock"),
            Some(PathBuf::from("/run/fallow/s.sock"))
        );
        assert_eq!(
            unix_socket_of("unix:"),
            Some(fallow_proto::socket_path::socket_path(6379)),
            "unix: alone is the shared default"
        );
    }
}
