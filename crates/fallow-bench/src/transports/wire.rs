//! One blocking connection over TCP, a Unix socket or a shared-memory channel, speaking just enough RESP
//! for GET and SET: requests are encoded once and reused, replies are checked and skipped. The three
//! transports share this code so the only difference measured is the transport.
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fallow_shm::{AdaptiveSpin, ClientChannel, OpenOptions, SpinPolicy};

/// The largest reply a connection buffers (a 1 MiB value and its framing fit many times over).
pub const REPLY_BYTES_MAX: usize = 64 << 20;
/// Bytes asked of the transport per read when the buffer has room.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// How a benchmark client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Unix,
    Shm,
    /// The shared-memory client against a thread that answers without a server (the floor).
    Ring,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
            Transport::Shm => "shm",
            Transport::Ring => "ring",
        }
    }
}

/// How the shared-memory client waits for a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientSpin {
    /// The channel's own wait: spin the whole budget, then sleep on the doorbell.
    Fixed,
    /// As fallow-client: a spin that runs out halves the next budget, one that sees the reply restores it,
    /// and every 64th wait spins the whole budget again.
    Adaptive,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// The channel, and the adaptive spin when the client uses it (the channel's own wait then sleeps at
    /// once).
    Shm(Box<ClientChannel>, Option<AdaptiveSpin>),
}

/// A connection with its reply buffer.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    /// Bytes of `buf` already parsed.
    start: usize,
    /// Bytes of `buf` filled.
    end: usize,
}

/// What a reply was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Status,
    Integer,
    /// A bulk string of this many bytes.
    Bulk(usize),
    Nil,
    Error(String),
}

impl Conn {
    pub fn tcp(addr: &str) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Conn::new(Stream::Tcp(stream)))
    }

    pub fn unix(path: &Path) -> anyhow::Result<Conn> {
        let stream = UnixStream::connect(path)
            .with_context(|| format!("connecting to {}", path.display()))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Conn::new(Stream::Unix(stream)))
    }

    /// Opens a shared-memory channel on the server's Unix socket; `ring_bytes` None takes the server's.
    pub fn shm(
        path: &Path,
        ring_bytes: Option<usize>,
        spin: SpinPolicy,
        client_spin: ClientSpin,
    ) -> anyhow::Result<Conn> {
        let (channel_spin, adaptive) = match client_spin {
            ClientSpin::Fixed => (spin, None),
            ClientSpin::Adaptive => (
                SpinPolicy { spin_ns: 0 },
                Some(AdaptiveSpin::new(spin.spin_ns)),
            ),
        };
        let options = OpenOptions {
            ring_bytes,
            spin: channel_spin,
            ..OpenOptions::default()
        };
        let channel = ClientChannel::open(path, &options)
            .with_context(|| format!("SHM.OPEN on {}", path.display()))?;
        Ok(Conn::new(Stream::Shm(Box::new(channel), adaptive)))
    }

    fn new(stream: Stream) -> Conn {
        Conn {
            stream,
            buf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
            Stream::Shm(c, _) => shm_write_all(c, bytes),
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.buf.len() - self.end < READ_CHUNK_BYTES / 4 {
            // Move the unparsed bytes down, then grow if that did not make room.
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            if self.buf.len() - self.end < READ_CHUNK_BYTES / 4 {
                let grown = (self.buf.len() * 2).min(REPLY_BYTES_MAX);
                if grown == self.buf.len() {
                    return Err(io::Error::other("reply larger than REPLY_BYTES_MAX"));
                }
                self.buf.resize(grown, 0);
            }
        }
        let room = &mut self.buf[self.end..];
        let n = match &mut self.stream {
            Stream::Tcp(s) => s.read(room)?,
            Stream::Unix(s) => s.read(room)?,
            Stream::Shm(c, adaptive) => {
                if let Some(adaptive) = adaptive {
                    adaptive.wait(|| c.read_ready());
                }
                shm_read(c, room)?
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end += n;
        Ok(())
    }

    /// Reads one reply (waiting for all of it) and says what it was.
    pub fn read_reply(&mut self) -> anyhow::Result<Reply> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf[self.start..self.end])? {
                self.start += used;
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Sends one request and reads its reply; an error reply is an error.
    pub fn call(&mut self, request: &[u8]) -> anyhow::Result<Reply> {
        self.send(request)?;
        match self.read_reply()? {
            Reply::Error(e) => bail!("server error: {e}"),
            reply => Ok(reply),
        }
    }
}

/// How long a connection waits for a server that neither answers nor closes before it errors.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// A shared-memory wait sleeps this long at most before it looks at the lifeline socket again.
const SHM_WAIT_SLICE: Duration = Duration::from_millis(100);

/// Waits in slices while `wait` says not ready, erroring when the server died or `IO_TIMEOUT` passed.
fn shm_wait(
    channel: &mut ClientChannel,
    mut wait: impl FnMut(&mut ClientChannel) -> io::Result<bool>,
) -> io::Result<()> {
    let started = Instant::now();
    while !wait(channel)? {
        if channel.lifeline_closed() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the server closed the channel's socket",
            ));
        }
        if started.elapsed() > IO_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no reply from the server",
            ));
        }
    }
    Ok(())
}

/// `ClientChannel::read` that gives up on a dead or stuck server.
fn shm_read(channel: &mut ClientChannel, out: &mut [u8]) -> io::Result<usize> {
    loop {
        match channel.try_read(out) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                shm_wait(channel, |c| c.wait_readable(Some(SHM_WAIT_SLICE)))?;
            }
            other => return other,
        }
    }
}

/// `ClientChannel::write_all` that gives up on a dead or stuck server.
fn shm_write_all(channel: &mut ClientChannel, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = channel.try_write(bytes)?;
        bytes = &bytes[n..];
        if !bytes.is_empty() {
            shm_wait(channel, |c| c.wait_writable(Some(SHM_WAIT_SLICE)))?;
        }
    }
    Ok(())
}

/// A RESP request from its arguments.
pub fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    fallow_proto::resp::encode_request(args, &mut out);
    out
}

fn line_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf).filter(|&i| i > 0 && buf[i - 1] == b'\r')
}

fn number(text: &[u8]) -> anyhow::Result<i64> {
    fallow_proto::resp::parse_i64(text)
        .with_context(|| format!("bad number {:?}", String::from_utf8_lossy(text)))
}

/// One reply at the start of `buf`: what it is and its length, or None while incomplete. Arrays are not
/// expected from GET or SET and are refused.
pub fn parse_reply(buf: &[u8]) -> anyhow::Result<Option<(Reply, usize)>> {
    let Some(end) = line_end(buf) else {
        if buf.len() > 512 {
            bail!("reply line longer than 512 bytes");
        }
        return Ok(None);
    };
    let text = &buf[1..end - 1];
    let used = end + 1;
    let reply = match buf[0] {
        b'+' => Reply::Status,
        b':' => Reply::Integer,
        b'_' => Reply::Nil,
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b'$' => {
            let len = number(text)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, used)));
            }
            let len = len as usize;
            if len > REPLY_BYTES_MAX {
                bail!("bulk reply of {len} bytes");
            }
            if buf.len() < used + len + 2 {
                return Ok(None);
            }
            if &buf[used + len..used + len + 2] != b"\r\n" {
                bail!("bulk reply not ended by CRLF");
            }
            return Ok(Some((Reply::Bulk(len), used + len + 2)));
        }
        other => bail!("unexpected reply type {:?}", other as char),
    };
    Ok(Some((reply, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_whole_and_wait_when_cut() {
        let bulk = b"$5\r\nhello\r\n";
        for cut in 0..bulk.len() {
            assert!(parse_reply(&bulk[..cut]).unwrap().is_none(), "{cut}");
        }
        assert_eq!(
            parse_reply(bulk).unwrap(),
            Some((Reply::Bulk(5), bulk.len()))
        );
        assert_eq!(parse_reply(b"+OK\r\n").unwrap(), Some((Reply::Status, 5)));
        assert_eq!(parse_reply(b"$-1\r\n").unwrap(), Some((Reply::Nil, 5)));
        assert!(matches!(
            parse_reply(b"-ERR x\r\n").unwrap(),
            Some((Reply::Error(e), 8)) if e == "ERR x"
        ));
        assert!(parse_reply(b"$3\r\nabcXY").is_err());
        assert!(parse_reply(b"*1\r\n").is_err());
    }
}
