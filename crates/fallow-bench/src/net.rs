//! A client stream over TCP or a Unix socket, usable with mio, and how one is opened.
use std::io::{self, Read, Write};
use std::time::Duration;

use anyhow::{bail, Context};
use mio::event::Source;
use mio::{Interest, Registry, Token};

use crate::options::ServerAddr;
use crate::protocol::{Family, ReadBuffer, ReplyKind};

/// How long connecting and the RESP3 handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A nonblocking connection to the server.
#[derive(Debug)]
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interests),
            Stream::Unix(s) => s.register(registry, token, interests),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interests),
            Stream::Unix(s) => s.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        }
    }
}

/// Connects to `server`; for RESP3 sends HELLO 3 and checks the reply. The stream comes back nonblocking.
pub fn connect(server: &ServerAddr, resp3: bool) -> anyhow::Result<Stream> {
    match server {
        ServerAddr::Tcp(host_port) => {
            let stream = connect_tcp(host_port)
                .with_context(|| format!("connecting to tcp://{host_port}"))?;
            stream.set_nodelay(true)?;
            if resp3 {
                hello3(&mut &stream)?;
            }
            stream.set_nonblocking(true)?;
            Ok(Stream::Tcp(mio::net::TcpStream::from_std(stream)))
        }
        ServerAddr::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path)
                .with_context(|| format!("connecting to unix:{}", path.display()))?;
            if resp3 {
                hello3(&mut &stream)?;
            }
            stream.set_nonblocking(true)?;
            Ok(Stream::Unix(mio::net::UnixStream::from_std(stream)))
        }
    }
}

/// Connects to the first address `host_port` resolves to that answers within the timeout.
fn connect_tcp(host_port: &str) -> io::Result<std::net::TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last_error = io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address");
    for addr in host_port.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(e) => last_error = e,
        }
    }
    Err(last_error)
}

/// Something whose reads and writes time out.
trait Timeouts {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Timeouts for &std::net::TcpStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

impl Timeouts for &std::os::unix::net::UnixStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

/// Sends HELLO 3 and waits for one reply, which must not be an error.
fn hello3<S: Read + Write + Timeouts>(stream: &mut S) -> anyhow::Result<()> {
    stream.set_timeouts(Some(CONNECT_TIMEOUT))?;
    stream
        .write_all(crate::protocol::Encoder::hello3())
        .context("sending HELLO 3")?;
    let mut buffer = ReadBuffer::new();
    let kind = loop {
        if let Some(kind) = buffer
            .next_reply(Family::Resp)
            .map_err(|e| anyhow::anyhow!("HELLO 3 reply: {e}"))?
        {
            break kind;
        }
        let spare = buffer.spare().map_err(|e| anyhow::anyhow!(e))?;
        let n = stream.read(spare).context("reading the HELLO 3 reply")?;
        if n == 0 {
            bail!("the server closed the connection after HELLO 3");
        }
        buffer.filled(n);
    };
    if kind == ReplyKind::Error {
        bail!("the server refused HELLO 3 (it does not speak RESP3)");
    }
    stream.set_timeouts(None)?;
    Ok(())
}
