//! A blocking RESP2 client connection for bulk load and dump: TCP or Unix socket, commands encoded into a
//! send buffer, replies parsed from a bounded receive buffer.
use anyhow::{bail, Context};
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

/// One reply in the shapes bulk load and dump meet.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Status(Vec<u8>),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
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

/// Arrays a reply may nest (fallow's replies nest two at most; fallow-client allows as many).
const REPLY_DEPTH_MAX: usize = 32;
/// Receive buffer size to start with; it grows (up to `reply_bytes_max`) only for larger replies.
const RECV_BUFFER_BYTES: usize = 256 << 10;

impl Conn {
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

    pub fn read_reply(&mut self) -> anyhow::Result<Reply> {
        self.read_reply_nested(0)
    }

    /// Reads a reply that sits `depth` arrays deep: a bound on it keeps a hostile server's deeply nested
    /// reply from overflowing the stack.
    fn read_reply_nested(&mut self, depth: usize) -> anyhow::Result<Reply> {
        if depth > REPLY_DEPTH_MAX {
            bail!("reply nested deeper than {REPLY_DEPTH_MAX} arrays");
        }
        let line = self.read_line()?;
        let (kind, body) = (line[0], &line[1..]);
        let reply = match kind {
            b'+' => Reply::Status(body.to_vec()),
            b'-' => Reply::Error(String::from_utf8_lossy(body).into_owned()),
            b':' => Reply::Int(parse_number(body)?),
            b'$' => {
                let len = parse_number(body)?;
                self.consume_line();
                return Ok(Reply::Bulk(self.read_bulk_body(len)?.map(<[u8]>::to_vec)));
            }
            b'*' => {
                let len = parse_number(body)?;
                self.consume_line();
                let items = (0..len.max(0))
                    .map(|_| self.read_reply_nested(depth + 1))
                    .collect::<anyhow::Result<_>>()?;
                return Ok(Reply::Array(items));
            }
            other => bail!("unexpected reply type byte {:?}", other as char),
        };
        self.consume_line();
        Ok(reply)
    }

    /// Reads a `$len` bulk and lends its bytes; None for a null bulk.
    pub fn read_bulk(&mut self) -> anyhow::Result<Option<&[u8]>> {
        // The common case, a complete non-null bulk in the buffer, skips the general line reader.
        if let Some((header, len)) = bulk_header(&self.buf[self.start..self.end]) {
            if self.end - self.start >= header + len + 2 {
                let body = self.start + header..self.start + header + len;
                if self.buf[body.end..body.end + 2] == *b"\r\n" {
                    self.start = body.end + 2;
                    return Ok(Some(&self.buf[body]));
                }
            }
        }
        let line = self.read_line()?;
        if line[0] != b'$' {
            bail!(
                "expected a bulk string, got {:?}",
                String::from_utf8_lossy(line)
            );
        }
        let len = parse_number(&line[1..])?;
        self.consume_line();
        self.read_bulk_body(len)
    }

    /// Reads the header of an array reply (`*len`); an error reply becomes an Err.
    pub fn read_array_len(&mut self) -> anyhow::Result<i64> {
        let line = self.read_line()?;
        let len = match line[0] {
            b'*' => parse_number(&line[1..])?,
            b'-' => bail!("server error: {}", String::from_utf8_lossy(&line[1..])),
            _ => bail!("expected an array, got {:?}", String::from_utf8_lossy(line)),
        };
        self.consume_line();
        Ok(len)
    }

    fn read_bulk_body(&mut self, len: i64) -> anyhow::Result<Option<&[u8]>> {
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        self.ensure(len + 2)?;
        let body = self.start..self.start + len;
        self.start += len + 2;
        Ok(Some(&self.buf[body]))
    }

    /// The next reply line (without CRLF), left in the buffer until `consume_line`.
    fn read_line(&mut self) -> anyhow::Result<&[u8]> {
        let mut searched = 0;
        loop {
            let window = &self.buf[self.start + searched..self.end];
            if let Some(found) = memchr::memchr(b'\n', window) {
                let end = self.start + searched + found;
                if end == self.start || self.buf[end - 1] != b'\r' {
                    bail!("protocol error: reply line without CRLF");
                }
                if end - 1 == self.start {
                    bail!("protocol error: empty reply line");
                }
                return Ok(&self.buf[self.start..end - 1]);
            }
            searched = self.end - self.start;
            let want = searched + 1;
            self.ensure(want)?;
        }
    }

    fn consume_line(&mut self) {
        let found = memchr::memchr(b'\n', &self.buf[self.start..self.end]).expect("line read");
        self.start += found + 1;
    }

    /// Makes at least `bytes` unconsumed bytes available, reading (and growing the buffer) as needed.
    fn ensure(&mut self, bytes: usize) -> anyhow::Result<()> {
        if bytes > self.reply_bytes_max {
            bail!(
                "reply element of {bytes} bytes is over the limit of {} bytes",
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

fn parse_number(text: &[u8]) -> anyhow::Result<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .with_context(|| format!("bad number in reply: {:?}", String::from_utf8_lossy(text)))
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
        assert_eq!(conn.read_reply().unwrap(), Reply::Status(b"OK".to_vec()));
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Error("ERR bad thing".into())
        );
        assert_eq!(conn.read_reply().unwrap(), Reply::Int(42));
        assert_eq!(conn.read_reply().unwrap(), Reply::Bulk(None));
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Array(vec![
                Reply::Bulk(Some(b"hello".to_vec())),
                Reply::Bulk(Some(Vec::new())),
                Reply::Int(7)
            ])
        );
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
