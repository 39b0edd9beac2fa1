//! RESP over `AF_VSOCK` (`vsock-port`, 0 = off), for clients in virtual machines on this host: a guest
//! reaches the host's fallow at CID 2 (VMADDR_CID_HOST) without a network between them. Each connection
//! runs the same RESP loop as TCP (`resp::serve`), behind the same maxclients and protected-mode checks.
//!
//! Tokio has no vsock type; a small `AsyncFd` wrapper over a non-blocking socket (the `libc` calls tokio's
//! own TCP types make) serves instead of the `tokio-vsock` crate, whose `vsock`/`nix` dependencies would
//! add a second copy of the system-call layer for a few dozen lines.
use crate::clients::ClientKind;
use crate::server::Server;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Connections waiting to be accepted (the kernel caps it at somaxconn), as the TCP listener's.
const BACKLOG: i32 = 1024;

/// A vsock address: context id (the machine: 2 is the host, guests have their own) and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VsockAddr {
    pub cid: u32,
    pub port: u32,
}

impl std::fmt::Display for VsockAddr {
    /// `vsock:CID:PORT`, as CLIENT LIST shows the peer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vsock:{}:{}", self.cid, self.port)
    }
}

impl std::str::FromStr for VsockAddr {
    type Err = String;

    /// `vsock:CID:PORT` (or `CID:PORT`); CID and PORT are unsigned 32-bit numbers.
    fn from_str(text: &str) -> Result<VsockAddr, String> {
        let rest = text.strip_prefix("vsock:").unwrap_or(text);
        let (cid, port) = rest
            .split_once(':')
            .ok_or_else(|| format!("'{text}' is not a vsock address (vsock:CID:PORT)"))?;
        let number = |part: &str, what: &str| {
            part.parse::<u32>().map_err(|_| {
                format!("'{text}': {what} '{part}' is not a number from 0 to 4294967295")
            })
        };
        Ok(VsockAddr {
            cid: number(cid, "CID")?,
            port: number(port, "port")?,
        })
    }
}

impl VsockAddr {
    fn to_raw(self) -> libc::sockaddr_vm {
        // SAFETY: sockaddr_vm is plain data; all-zero is a valid value (its reserved fields must be 0).
        let mut raw: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
        raw.svm_family = libc::AF_VSOCK as libc::sa_family_t;
        raw.svm_cid = self.cid;
        raw.svm_port = self.port;
        raw
    }

    fn from_raw(raw: &libc::sockaddr_vm) -> VsockAddr {
        VsockAddr {
            cid: raw.svm_cid,
            port: raw.svm_port,
        }
    }
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A listening vsock socket.
pub struct VsockListener {
    fd: AsyncFd<OwnedFd>,
}

impl VsockListener {
    /// Listens on `port` of every CID this machine has. The error names the port; a kernel without
    /// vsock gives "Address family not supported".
    pub fn bind(port: u32) -> io::Result<VsockListener> {
        Self::bind_raw(port).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot listen on vsock port {port}: {error}"),
            )
        })
    }

    fn bind_raw(port: u32) -> io::Result<VsockListener> {
        // SAFETY: plain system calls on a descriptor owned from creation by `OwnedFd`; the address
        // outlives the bind call.
        let fd = unsafe {
            let raw = check(libc::socket(
                libc::AF_VSOCK,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            ))?;
            let fd = OwnedFd::from_raw_fd(raw);
            let address = VsockAddr {
                cid: libc::VMADDR_CID_ANY,
                port,
            }
            .to_raw();
            check(libc::bind(
                raw,
                (&address as *const libc::sockaddr_vm).cast(),
                std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
            ))?;
            check(libc::listen(raw, BACKLOG))?;
            fd
        };
        Ok(VsockListener { fd: register(fd)? })
    }

    /// The address bound (CID VMADDR_CID_ANY, the port asked for).
    pub fn local_addr(&self) -> io::Result<VsockAddr> {
        local_addr_of(self.fd.as_raw_fd())
    }

    pub async fn accept(&self) -> io::Result<(VsockStream, VsockAddr)> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| accept_raw(fd.as_raw_fd())) {
                Ok(result) => {
                    let (fd, peer) = result?;
                    return Ok((VsockStream::new(fd)?, peer));
                }
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsRawFd for VsockListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn local_addr_of(fd: RawFd) -> io::Result<VsockAddr> {
    // SAFETY: getsockname writes at most `len` bytes of `raw`.
    unsafe {
        let mut raw: libc::sockaddr_vm = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;
        check(libc::getsockname(
            fd,
            (&mut raw as *mut libc::sockaddr_vm).cast(),
            &mut len,
        ))?;
        Ok(VsockAddr::from_raw(&raw))
    }
}

fn accept_raw(listener: RawFd) -> io::Result<(OwnedFd, VsockAddr)> {
    // SAFETY: accept4 writes at most `len` bytes of `raw`; the new descriptor is owned at once.
    unsafe {
        let mut raw: libc::sockaddr_vm = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;
        let fd = check(libc::accept4(
            listener,
            (&mut raw as *mut libc::sockaddr_vm).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        ))?;
        Ok((OwnedFd::from_raw_fd(fd), VsockAddr::from_raw(&raw)))
    }
}

/// An accepted vsock connection, readable and writable as tokio's streams are.
pub struct VsockStream {
    fd: AsyncFd<OwnedFd>,
}

impl VsockStream {
    fn new(fd: OwnedFd) -> io::Result<VsockStream> {
        Ok(VsockStream { fd: register(fd)? })
    }

    /// This end's address: the CID the guest addressed and the listening port (CLIENT LIST's laddr).
    pub fn local_addr(&self) -> io::Result<VsockAddr> {
        local_addr_of(self.fd.as_raw_fd())
    }
}

impl AsyncRead for VsockStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            // SAFETY: reads at most `unfilled.len()` bytes into initialised memory we borrow mutably.
            let read = guard.try_io(|fd| {
                check_size(unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                })
            });
            match read {
                Ok(result) => {
                    let n = result?;
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for VsockStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            // SAFETY: sends at most `bytes.len()` bytes from a live slice; MSG_NOSIGNAL turns a closed
            // peer into EPIPE rather than a signal.
            let written = guard.try_io(|fd| {
                check_size(unsafe {
                    libc::send(
                        fd.as_raw_fd(),
                        bytes.as_ptr().cast(),
                        bytes.len(),
                        libc::MSG_NOSIGNAL,
                    )
                })
            });
            match written {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered here: every write went to the kernel.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown on a descriptor we own.
        let result = unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) };
        Poll::Ready(check(result).map(|_| ()))
    }
}

/// Registers a socket with the runtime's reactor.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is a valid open descriptor that stays open, and names the same description,
    // until the AsyncFd that owns it drops it.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

fn check_size(result: isize) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result as usize)
    }
}

/// Binds `port` and serves RESP there until the task is aborted (at shutdown).
pub fn start(server: &Arc<Server>, port: u32) -> io::Result<tokio::task::JoinHandle<()>> {
    let listener = VsockListener::bind(port)?;
    tracing::info!(port, "RESP listening on vsock");
    Ok(tokio::spawn(accept_loop(server.clone(), listener)))
}

async fn accept_loop(server: Arc<Server>, listener: VsockListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                let refusal = super::too_many(ClientKind::Resp);
                super::accept::failed(&server, error, listener.as_raw_fd(), refusal).await;
                continue;
            }
        };
        let server = server.clone();
        tokio::spawn(async move {
            // A guest is another machine: protected mode treats it as it treats a non-loopback TCP
            // peer (an address that is not loopback stands for it).
            if !server.admits(Some(std::net::Ipv4Addr::UNSPECIFIED.into())) {
                return super::refuse(stream, super::protected::denial(ClientKind::Resp)).await;
            }
            let local = stream
                .local_addr()
                .map(|address| address.to_string())
                .unwrap_or_default();
            let Some(handle) = server.register_client(ClientKind::Resp, peer.to_string(), local)
            else {
                return super::refuse(stream, super::too_many(ClientKind::Resp)).await;
            };
            let id = handle.id;
            let transport = crate::connection::Transport::Vsock;
            super::resp::serve(server.clone(), stream, handle, transport).await;
            server.unregister_client(id);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        let address: VsockAddr = "vsock:2:6379".parse().unwrap();
        assert_eq!(address, VsockAddr { cid: 2, port: 6379 });
        assert_eq!(address.to_string(), "vsock:2:6379");
        assert_eq!("3:1".parse::<VsockAddr>().unwrap().cid, 3);
        assert_eq!(
            "vsock:4294967295:4294967295"
                .parse::<VsockAddr>()
                .unwrap()
                .port,
            u32::MAX
        );
        for bad in [
            "vsock:",
            "vsock:2",
            "vsock:x:1",
            "vsock:2:-1",
            "2:4294967296",
            "",
        ] {
            let error = bad.parse::<VsockAddr>().unwrap_err();
            assert!(error.contains(bad), "{error} names the input {bad}");
        }
    }

    #[test]
    fn the_raw_address_carries_cid_and_port() {
        let address = VsockAddr { cid: 7, port: 1234 };
        let raw = address.to_raw();
        assert_eq!(raw.svm_family as i32, libc::AF_VSOCK);
        assert_eq!(VsockAddr::from_raw(&raw), address);
    }

    /// The stream wrapper moves bytes both ways, sees the peer's end, and shuts its writing half down.
    /// Any stream socket exercises it the same way: a Unix socket pair stands in for a vsock connection,
    /// which cannot be made on a machine without a guest.
    #[tokio::test]
    async fn the_stream_reads_writes_and_shuts_down() {
        use std::io::{Read, Write};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut stream = VsockStream::new(OwnedFd::from(ours)).unwrap();
        let mut peer = theirs;
        // More than a socket buffer holds: the write waits for the peer to read.
        let sent: Vec<u8> = (0..4_000_000u32).map(|i| i as u8).collect();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 4_000_000];
            peer.read_exact(&mut got).unwrap();
            peer.write_all(b"+PONG\r\n").unwrap();
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).unwrap();
            (got, rest)
        });
        stream.write_all(&sent).await.unwrap();
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
        stream.write_all(b"tail").await.unwrap();
        stream.shutdown().await.unwrap();
        let (got, rest) = reader.join().unwrap();
        assert!(got == sent, "bytes arrive in order");
        assert_eq!(rest, b"tail", "the peer sees the end after the last bytes");
        let mut more = [0u8; 8];
        assert_eq!(
            stream.read(&mut more).await.unwrap(),
            0,
            "the peer closed: end of stream"
        );
    }

    /// Binding a port twice fails with an error naming the port; so does binding where the kernel has
    /// no vsock at all (then the first bind is the one that fails).
    #[tokio::test]
    async fn a_failed_bind_names_the_port() {
        let port = 40_000 + std::process::id() % 20_000;
        let message = match VsockListener::bind(port) {
            Ok(listener) => {
                assert_eq!(listener.local_addr().unwrap().port, port);
                let second = VsockListener::bind(port);
                second.err().expect("a second bind fails").to_string()
            }
            Err(error) => error.to_string(),
        };
        assert!(message.contains(&format!("vsock port {port}")), "{message}");
    }
}
