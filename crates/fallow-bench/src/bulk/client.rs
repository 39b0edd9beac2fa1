//! A blocking RESP2 client connection for bulk load and dump: TCP or Unix socket, commands encoded into a
//! send buffer, replies parsed from a bounded receive buffer. Whole replies go through fallow-client's
//! parser (`fallow_client::reply`); a large array reply can instead be streamed item by item
//! (`read_array_len`, then `read_bulk`, which lends each string from the buffer without a copy).
use anyhow::{anyhow, bail, Context};
use fallow_client::reply::{parse_reply, ParsedReply, ReplyLimits};
pub use fallow_client::Reply;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

use crate::options::ServerAddr;

/// The server address of `fallow load` and `fallow dump`: the load generator's `--server` syntax
/// (`tcp://HOST:PORT` or `unix:/path`), and a bare `HOST:PORT` taken as TCP.
pub fn parse_server(text: &str) -> anyhow::Result<ServerAddr> {
    let has_scheme = text.starts_with("tcp://") || text.starts_with("unix:");
    if has_scheme {
        text.parse()
    } else {
        format!("tcp://{text}").parse()
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Replies held in memory: the fuzz target's server.
    Memory(io::Cursor<Vec<u8>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            Stream::Unix(stream) => stream.read(buf),
            Stream::Memory(replies) => replies.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buf),
            Stream::Unix(stream) => stream.write(buf),
            Stream::Memory(_) => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection with its send and receive buffers.
pub struct Conn {
    stream: Stream,
    /// Encoded commands not yet sent.
    pub out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    reply_bytes_max: usize,
}

/// Receive buffer size to start with; it grows (up to `reply_bytes_max`) only for larger replies.
const RECV_BUFFER_BYTES: usize = 256 << 10;

impl Conn {
    /// `reply_bytes_max` bounds what is buffered at once: a whole reply read by `read_reply`, or one bulk
    /// string of a reply streamed with `read_array_len` and `read_bulk`.
    pub fn connect(addr: &ServerAddr, reply_bytes_max: usize) -> anyhow::Result<Conn> {
        let stream = match addr {
            ServerAddr::Tcp(address) => {
                let stream = TcpStream::connect(address)
                    .with_context(|| format!("cannot connect to {addr}"))?;
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            ServerAddr::Unix(path) => Stream::Unix(
                UnixStream::connect(path).with_context(|| format!("cannot connect to {addr}"))?,
            ),
        };
        Ok(Conn {
            stream,
            out: Vec::with_capacity(RECV_BUFFER_BYTES),
            buf: vec![0; RECV_BUFFER_BYTES],
            start: 0,
            end: 0,
            reply_bytes_max,
        })
    }

    /// A connection whose server sent `replies` and then closed (for the fuzz target).
    #[doc(hidden)]
    pub fn from_replies(replies: Vec<u8>, reply_bytes_max: usize) -> Conn {
        Conn {
            stream: Stream::Memory(io::Cursor::new(replies)),
            out: Vec::new(),
            buf: vec![0; 64],
            start: 0,
            end: 0,
            reply_bytes_max,
        }
    }

    /// Appends one command to the send buffer.
    pub fn push_command(&mut self, args: &[&[u8]]) {
        fallow_proto::resp::encode_request(args, &mut self.out);
    }

    /// Sends the buffered commands.
    pub fn send(&mut self) -> io::Result<()> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        self.push_command(args);
        self.send()?;
        self.read_reply()
    }

    /// Reads the next whole reply (of pipelined ones, the oldest) with fallow-client's parser, whose
    /// limits keep a bad or hostile server from making it allocate without bound or recurse without end.
    /// An error reply is `Reply::Error`, not an Err.
    pub fn read_reply(&mut self) -> anyhow::Result<Reply> {
        let limits = ReplyLimits {
            bulk_bytes_max: self.reply_bytes_max,
            ..ReplyLimits::default()
        };
        loop {
            match parse_reply(&self.buf[self.start..self.end], &limits) {
                ParsedReply::Complete(reply, used) => {
                    self.start += used;
                    return Ok(reply);
                }
                ParsedReply::Incomplete => {
                    let buffered = self.end - self.start;
                    self.ensure(buffered + 1)?;
                }
                ParsedReply::Invalid(message) => bail!("protocol error: {message}"),
            }
        }
    }

    /// Reads a `$len` bulk and lends its bytes; None for a null bulk. For the items of a large array read
    /// one at a time (SHARDSCAN's records), which `read_reply` would copy whole.
    pub fn read_bulk(&mut self) -> anyhow::Result<Option<&[u8]>> {
        // The common case, a complete non-null bulk in the buffer, skips the general header reader.
        if let Some((header, len)) = bulk_header(&self.buf[self.start..self.end]) {
            if len + 2 <= self.reply_bytes_max && self.end - self.start >= header + len + 2 {
                let body = self.start + header..self.start + header + len;
                if self.buf[body.end..body.end + 2] == *b"\r\n" {
                    self.start = body.end + 2;
                    return Ok(Some(&self.buf[body]));
                }
            }
        }
        match self.read_header(b'$')? {
            Some(len) if len < 0 => Ok(None),
            Some(len) => self.read_bulk_body(len as usize).map(Some),
            None => Err(self.unexpected("a bulk string")),
        }
    }

    /// Reads the header of an array reply (`*len`), leaving its items to be read one by one; an error
    /// reply becomes an Err.
    pub fn read_array_len(&mut self) -> anyhow::Result<i64> {
        match self.read_header(b'*')? {
            Some(len) => Ok(len),
            None => Err(self.unexpected("an array")),
        }
    }

    /// The error for a reply that is not of the type wanted: the server's error, or what came instead.
    fn unexpected(&mut self, wanted: &str) -> anyhow::Error {
        match self.read_reply() {
            Ok(Reply::Error(message)) => anyhow!("server error: {message}"),
            Ok(other) => anyhow!("expected {wanted}, got {other:?}"),
            Err(error) => error,
        }
    }

    /// The length in a header line of type `kind` (`$len`, `*len`) at the read position, consumed; None,
    /// with nothing consumed, when the next reply is of another type.
    fn read_header(&mut self, kind: u8) -> anyhow::Result<Option<i64>> {
        let line_end = self.read_line()?;
        if self.buf[self.start] != kind {
            return Ok(None);
        }
        let digits = &self.buf[self.start + 1..line_end];
        let len = fallow_proto::resp::parse_i64(digits).with_context(|| {
            format!(
                "protocol error: bad length {:?}",
                String::from_utf8_lossy(digits)
            )
        })?;
        self.start = line_end + 2;
        Ok(Some(len))
    }

    fn read_bulk_body(&mut self, len: usize) -> anyhow::Result<&[u8]> {
        self.ensure(len.saturating_add(2))?;
        let body = self.start..self.start + len;
        if self.buf[body.end..body.end + 2] != *b"\r\n" {
            bail!("protocol error: bulk string not followed by CRLF");
        }
        self.start = body.end + 2;
        Ok(&self.buf[body])
    }

    /// Reads until the line at the read position is whole and returns where it ends (its CR); a line
    /// that is empty or not ended by CRLF is an error.
    fn read_line(&mut self) -> anyhow::Result<usize> {
        let mut searched = 0;
        loop {
            let window = &self.buf[self.start + searched..self.end];
            if let Some(found) = memchr::memchr(b'\n', window) {
                let newline = self.start + searched + found;
                if newline == self.start || self.buf[newline - 1] != b'\r' {
                    bail!("protocol error: reply line without CRLF");
                }
                if newline - 1 == self.start {
                    bail!("protocol error: empty reply line");
                }
                return Ok(newline - 1);
            }
            searched = self.end - self.start;
            self.ensure(searched + 1)?;
        }
    }

    /// Makes at least `bytes` unconsumed bytes available, reading (and growing the buffer) as needed.
    fn ensure(&mut self, bytes: usize) -> anyhow::Result<()> {
        if bytes > self.reply_bytes_max {
            bail!(
                "reply of {bytes} bytes or more is over the limit of {} bytes",
                self.reply_bytes_max
            );
        }
        while self.end - self.start < bytes {
            if self.start + bytes > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if bytes > self.buf.len() {
                    self.buf.resize(bytes.next_power_of_two(), 0);
                }
            }
            let read = self.stream.read(&mut self.buf[self.end..])?;
            if read == 0 {
                bail!("the server closed the connection");
            }
            self.end += read;
        }
        Ok(())
    }
}

/// `$<digits>\r\n` at the start of `window`: the header's length and the bulk's length.
fn bulk_header(window: &[u8]) -> Option<(usize, usize)> {
    if window.first() != Some(&b'$') {
        return None;
    }
    let mut len: usize = 0;
    for (position, &byte) in window.iter().enumerate().skip(1).take(12) {
        match byte {
            b'0'..=b'9' => len = len * 10 + usize::from(byte - b'0'),
            b'\r' if position > 1 => {
                return (window.get(position + 1) == Some(&b'\n')).then_some((position + 2, len))
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            parse_server("tcp://127.0.0.1:7400").unwrap(),
            ServerAddr::Tcp("127.0.0.1:7400".into())
        );
        assert_eq!(
            parse_server("localhost:6379").unwrap(),
            ServerAddr::Tcp("localhost:6379".into())
        );
        assert_eq!(
            parse_server("unix:/tmp/s.sock").unwrap(),
            ServerAddr::Unix("/tmp/s.sock".into())
        );
        assert_eq!(
            parse_server("unix:").unwrap(),
            ServerAddr::Unix(fallow_proto::socket_path::socket_path(6379))
        );
        assert!(parse_server("127.0.0.1").is_err());
        assert!(parse_server("http://x/y").is_err());
    }

    /// A connection whose server side is a Unix socket pair the test writes replies into.
    fn paired(replies: &[u8], reply_bytes_max: usize) -> (Conn, UnixStream) {
        let (client, mut server) = UnixStream::pair().unwrap();
        server.write_all(replies).unwrap();
        let conn = Conn {
            stream: Stream::Unix(client),
            out: Vec::new(),
            buf: vec![0; 8],
            start: 0,
            end: 0,
            reply_bytes_max,
        };
        (conn, server)
    }

    #[test]
    fn replies_parse_across_small_reads() {
        let (mut conn, _server) = paired(
            b"+OK\r\n-ERR bad thing\r\n:42\r\n$-1\r\n*3\r\n$5\r\nhello\r\n$0\r\n\r\n:7\r\n",
            1 << 20,
        );
        assert_eq!(conn.read_reply().unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Error("ERR bad thing".into())
        );
        assert_eq!(conn.read_reply().unwrap(), Reply::Int(42));
        assert_eq!(conn.read_reply().unwrap(), Reply::Nil);
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Array(vec![
                Reply::Bulk(b"hello".to_vec()),
                Reply::Bulk(Vec::new()),
                Reply::Int(7)
            ])
        );
    }

    #[test]
    fn pipelined_replies_and_a_streamed_scan_reply() {
        // A pipelined SET's replies, then SHARDSCAN's [cursor, [key, value, ...], skipped] read item by item.
        let (mut conn, _server) = paired(
            b"+OK\r\n-OOM full\r\n*3\r\n$2\r\n17\r\n*4\r\n$1\r\na\r\n$3\r\none\r\n$1\r\nb\r\n$0\r\n\r\n:2\r\n",
            1 << 20,
        );
        assert_eq!(conn.read_reply().unwrap(), Reply::Simple("OK".into()));
        assert_eq!(conn.read_reply().unwrap(), Reply::Error("OOM full".into()));
        assert_eq!(conn.read_array_len().unwrap(), 3);
        assert_eq!(conn.read_bulk().unwrap(), Some(&b"17"[..]));
        assert_eq!(conn.read_array_len().unwrap(), 4);
        for expected in [&b"a"[..], b"one", b"b", b""] {
            assert_eq!(conn.read_bulk().unwrap(), Some(expected));
        }
        assert_eq!(conn.read_reply().unwrap(), Reply::Int(2));
    }

    #[test]
    fn streamed_readers_report_what_came_instead() {
        let (mut conn, _server) = paired(b"-ERR unknown command\r\n:5\r\n$-1\r\n$3\r\nabcXY", 64);
        let error = conn.read_array_len().unwrap_err().to_string();
        assert_eq!(error, "server error: ERR unknown command");
        let error = conn.read_bulk().unwrap_err().to_string();
        assert_eq!(error, "expected a bulk string, got Int(5)");
        assert_eq!(conn.read_bulk().unwrap(), None, "null bulk");
        assert!(conn.read_bulk().is_err(), "no CRLF after the bulk");
        let (mut conn, _server) = paired(b"$100\r\n", 64);
        assert!(conn.read_bulk().is_err(), "over the reply limit");
    }

    #[test]
    fn bulk_headers_parse() {
        assert_eq!(bulk_header(b"$5\r\nhello"), Some((4, 5)));
        assert_eq!(bulk_header(b"$123\r\n"), Some((6, 123)));
        assert_eq!(bulk_header(b"$12"), None, "incomplete");
        assert_eq!(bulk_header(b"$-1\r\n"), None, "null goes the general way");
        assert_eq!(bulk_header(b"$\r\n"), None);
        assert_eq!(bulk_header(b"+OK\r\n"), None);
    }

    #[test]
    fn oversized_and_broken_replies_are_errors() {
        let (mut conn, _server) = paired(b"$100\r\n", 64);
        assert!(conn.read_reply().is_err(), "over the reply limit");
        let (mut conn, server) = paired(b"+OK\n", 64);
        assert!(conn.read_reply().is_err(), "no CRLF");
        drop(server);
        let (mut conn, server) = paired(b"$5\r\nab", 64);
        drop(server);
        assert!(conn.read_reply().is_err(), "closed mid-reply");
    }

    #[test]
    fn deeply_nested_reply_is_an_error_not_a_stack_overflow() {
        let mut nested = b"*1\r\n".repeat(1_000_000);
        nested.extend_from_slice(b":1\r\n");
        let mut conn = Conn::from_replies(nested, 1 << 20);
        let error = conn.read_reply().unwrap_err().to_string();
        assert!(error.contains("nested deeper"), "{error}");
        let mut conn = Conn::from_replies(b"*1\r\n*1\r\n:1\r\n".to_vec(), 1 << 20);
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Array(vec![Reply::Array(vec![Reply::Int(1)])])
        );
    }

    #[test]
    fn commands_encode_as_multibulk() {
        let (mut conn, _server) = paired(b"", 64);
        conn.push_command(&[b"SET", b"k", b""]);
        assert_eq!(conn.out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
