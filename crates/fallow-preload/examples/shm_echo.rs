//! A channel echo server for trying the preload library without fallow: it listens on the Unix socket
//! given as its argument, answers each SHM.OPEN with a channel, and echoes the request bytes back as
//! replies until the client closes. `FALLOW_SOCKET=PATH FALLOW_PRELOAD_TARGETS=127.0.0.1:PORT
//! LD_PRELOAD=.../libfallow_preload.so PROGRAM` then talks to it through any TCP client.
use fallow_shm::layout::{Layout, Protocol, Side};
use fallow_shm::server::{open_reply, ServerChannel};
use fallow_shm::wait::wait_until;
use fallow_shm::SpinPolicy;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};

const RING_BYTES: usize = 64 << 10;

/// Reads one RESP request (an array of bulk strings) byte by byte; None on a short or oversized one.
fn read_request(socket: &mut UnixStream) -> Option<Vec<u8>> {
    const REQUEST_BYTES_MAX: usize = 4096;
    let mut request = Vec::new();
    let mut lines_left: Option<usize> = None;
    while lines_left != Some(0) {
        let mut byte = [0u8; 1];
        socket.read_exact(&mut byte).ok()?;
        request.push(byte[0]);
        if request.len() > REQUEST_BYTES_MAX {
            return None;
        }
        if request.ends_with(b"\r\n") {
            lines_left = match lines_left {
                // "*N": N bulk strings follow, two lines each.
                None => Some(
                    std::str::from_utf8(&request[1..request.len() - 2])
                        .ok()?
                        .parse::<usize>()
                        .ok()?
                        * 2,
                ),
                Some(n) => Some(n - 1),
            };
        }
    }
    Some(request)
}

fn serve(mut socket: UnixStream) {
    match read_request(&mut socket) {
        Some(request)
            if request
                .windows(8)
                .any(|w| w.eq_ignore_ascii_case(b"SHM.OPEN")) => {}
        _ => return,
    }
    let layout = Layout {
        request_ring_bytes: RING_BYTES,
        reply_ring_bytes: RING_BYTES,
        protocol: Protocol::Resp,
        server_spin_ns: 50_000,
    };
    let mut channel = ServerChannel::create(layout).expect("channel");
    let reply = open_reply(&channel.mapping.layout(), false);
    if fallow_shm::sys::send_with_fds(socket.as_raw_fd(), &reply, &channel.fds_to_pass()).is_err() {
        return;
    }
    channel.forget_memfd();
    let mut buf = vec![0u8; RING_BYTES];
    loop {
        let mapping = channel.mapping.clone();
        let requests = &channel.requests;
        let ready = wait_until(
            &mapping,
            Side::Server,
            &channel.server_bell,
            SpinPolicy::default(),
            None,
            || {
                requests.available_bytes().map_or(true, |n| n > 0)
                    || mapping.is_closed(Side::Client)
            },
        );
        if ready.is_err() {
            return;
        }
        let n = match channel.requests.read(&mut buf) {
            Ok(n) => n,
            Err(_) => return channel.close(),
        };
        if n == 0 && channel.mapping.is_closed(Side::Client) {
            return channel.close();
        }
        let mut sent = 0;
        while sent < n {
            match channel.replies.write(&buf[sent..n]) {
                Ok(k) => sent += k,
                Err(_) => return channel.close(),
            }
            channel.wake_client_if_sleeping();
            if sent < n {
                let (mapping, replies) = (channel.mapping.clone(), &mut channel.replies);
                let room = wait_until(
                    &mapping,
                    Side::Server,
                    &channel.server_bell,
                    SpinPolicy::default(),
                    None,
                    || {
                        replies.free_bytes().map_or(true, |n| n > 0)
                            || mapping.is_closed(Side::Client)
                    },
                );
                if room.is_err() || mapping.is_closed(Side::Client) {
                    return channel.close();
                }
            }
        }
    }
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: shm_echo SOCKET-PATH");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("bind");
    println!("listening on {path}");
    for socket in listener.incoming().flatten() {
        std::thread::spawn(move || serve(socket));
    }
}
