//! The floor of the shared-memory round trip: a thread that takes the SHM.OPEN handshake like a server,
//! then answers every request of a known length with a fixed reply, doing no other work. The client is
//! the same `Conn::shm` the fallow measurements use, so the difference to fallow is fallow's own work
//! (parsing, dispatch, the store, its event loop) and not the ring or its waits.
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use fallow_proto::{parse_request, Parsed, RespLimits};
use fallow_shm::layout::Protocol;
use fallow_shm::server::{open_reply, ServerChannel};
use fallow_shm::wait::wait_until;
use fallow_shm::{Layout, Side, SpinPolicy};

/// The most bytes of a handshake request the echo reads before giving up on it.
const HANDSHAKE_BYTES_MAX: usize = 4096;
/// Bytes the echo copies out of the request ring per read.
const READ_BYTES: usize = 64 << 10;

/// A running echo: connect to `path` with `Conn::shm`; the thread ends when that channel closes.
pub struct RingEcho {
    pub path: PathBuf,
    thread: Option<JoinHandle<anyhow::Result<u64>>>,
}

impl RingEcho {
    /// Listens on `path`; each request of `request_bytes` bytes gets `reply`. `ring_bytes` sizes both rings;
    /// the thread runs on `cpus` when given.
    pub fn start(
        path: &Path,
        request_bytes: usize,
        reply: Vec<u8>,
        ring_bytes: usize,
        spin: SpinPolicy,
        cpus: Option<Vec<usize>>,
    ) -> anyhow::Result<RingEcho> {
        assert!(request_bytes > 0, "a request has bytes");
        let _ = std::fs::remove_file(path);
        let listener =
            UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        let layout = Layout {
            request_ring_bytes: ring_bytes,
            reply_ring_bytes: ring_bytes,
            protocol: Protocol::Resp,
            server_spin_ns: spin.spin_ns,
        };
        layout.check().map_err(anyhow::Error::msg)?;
        let thread = std::thread::Builder::new()
            .name("ring-echo".into())
            .spawn(move || {
                if let Some(cpus) = cpus {
                    super::affinity::pin(0, &cpus)?;
                }
                let (socket, _) = listener.accept()?;
                serve(socket, layout, request_bytes, &reply, spin)
            })?;
        Ok(RingEcho {
            path: path.to_path_buf(),
            thread: Some(thread),
        })
    }

    /// Waits for the thread (after the client closed its channel); returns the requests answered.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        let thread = self.thread.take().expect("joined once");
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the ring echo thread panicked"))?
    }
}

impl Drop for RingEcho {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads the SHM.OPEN request whole (its arguments are not needed: the echo has one layout).
fn read_handshake(socket: &mut UnixStream) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let limits = RespLimits::default();
    let mut args = Vec::new();
    loop {
        match parse_request(&buf, &limits, &mut args) {
            Parsed::Multibulk { .. } => return Ok(()),
            Parsed::Incomplete { .. } => {}
            other => bail!("handshake: {other:?}"),
        }
        if buf.len() > HANDSHAKE_BYTES_MAX {
            bail!("handshake longer than {HANDSHAKE_BYTES_MAX} bytes");
        }
        let n = socket.read(&mut chunk)?;
        if n == 0 {
            bail!("client left before SHM.OPEN");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn serve(
    mut socket: UnixStream,
    layout: Layout,
    request_bytes: usize,
    reply: &[u8],
    spin: SpinPolicy,
) -> anyhow::Result<u64> {
    read_handshake(&mut socket)?;
    let mut channel = ServerChannel::create(layout)?;
    let sent = fallow_shm::sys::send_with_fds(
        socket.as_raw_fd(),
        &open_reply(&layout, false),
        &channel.fds_to_pass(),
    )?;
    assert_eq!(
        sent,
        open_reply(&layout, false).len(),
        "a short handshake reply"
    );
    channel.forget_memfd();
    let mut buf = vec![0u8; READ_BYTES];
    // Bytes of a request received so far (requests are counted, not kept).
    let mut partial_bytes = 0usize;
    let mut answered = 0u64;
    loop {
        let ServerChannel {
            mapping,
            requests,
            server_bell,
            ..
        } = &channel;
        wait_until(mapping, Side::Server, server_bell, spin, None, || {
            requests.available_bytes().map_or(true, |n| n > 0) || mapping.is_closed(Side::Client)
        })?;
        let n = channel.requests.read(&mut buf)?;
        if n == 0 && channel.mapping.is_closed(Side::Client) {
            return Ok(answered);
        }
        partial_bytes += n;
        while partial_bytes >= request_bytes {
            partial_bytes -= request_bytes;
            write_reply(&mut channel, reply)?;
            answered += 1;
        }
        channel.wake_client_if_sleeping();
    }
}

/// Writes all of `reply`, spinning while the reply ring is full (the client reads as it goes).
fn write_reply(channel: &mut ServerChannel, mut reply: &[u8]) -> anyhow::Result<()> {
    while !reply.is_empty() {
        let n = channel.replies.write(reply)?;
        reply = &reply[n..];
        if n == 0 {
            if channel.mapping.is_closed(Side::Client) {
                bail!("client closed with replies pending");
            }
            channel.wake_client_if_sleeping();
            std::hint::spin_loop();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transports::measure::Op;
    use crate::transports::wire::{ClientSpin, Conn};

    #[test]
    fn the_echo_answers_each_request_through_the_client_channel() {
        let path =
            std::env::temp_dir().join(format!("fallow-ring-echo-{}.sock", std::process::id()));
        let value = vec![b'v'; 64];
        let request = Op::Get.request(b"k", &value);
        let spin = SpinPolicy { spin_ns: 10_000 };
        let echo = RingEcho::start(
            &path,
            request.len(),
            Op::Get.reply_bytes(&value),
            4096,
            spin,
            None,
        )
        .unwrap();
        let mut conn = Conn::shm(&path, None, spin, ClientSpin::Adaptive).unwrap();
        for _ in 0..1000 {
            assert_eq!(conn.call(&request).unwrap(), Op::Get.expected(64));
        }
        // Pipelined: the replies (7 KiB) pass the 4 KiB reply ring while the client reads them.
        let batch = request.repeat(100);
        assert!(batch.len() < 4096);
        conn.send(&batch).unwrap();
        for _ in 0..100 {
            assert_eq!(conn.read_reply().unwrap(), Op::Get.expected(64));
        }
        drop(conn);
        assert_eq!(echo.finish().unwrap(), 1100);
    }

    /// A server that hands out a channel and then dies without marking it closed: the client errors
    /// (the lifeline is closed) instead of waiting for ever.
    #[test]
    fn a_server_that_dies_is_an_error_not_a_hang() {
        let path =
            std::env::temp_dir().join(format!("fallow-dead-echo-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let layout = Layout {
            request_ring_bytes: 4096,
            reply_ring_bytes: 4096,
            protocol: Protocol::Resp,
            server_spin_ns: 0,
        };
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            read_handshake(&mut socket).unwrap();
            let mut channel = ServerChannel::create(layout).unwrap();
            let reply = open_reply(&layout, false);
            fallow_shm::sys::send_with_fds(socket.as_raw_fd(), &reply, &channel.fds_to_pass())
                .unwrap();
            channel.forget_memfd();
            // Dropped here: the socket closes, the channel is never marked closed.
        });
        let spin = SpinPolicy { spin_ns: 1_000 };
        let mut conn = Conn::shm(&path, None, spin, ClientSpin::Fixed).unwrap();
        server.join().unwrap();
        let started = std::time::Instant::now();
        let error = conn.call(&Op::Get.request(b"k", b"")).unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{error:#}"
        );
        let _ = std::fs::remove_file(&path);
    }
}
