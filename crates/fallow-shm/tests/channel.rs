//! A channel end to end between two threads: the handshake over a real Unix socket with SCM_RIGHTS, an
//! echo through the rings with spin-then-sleep wake-ups, values larger than a ring, and a hostile index.
use fallow_shm::layout::{Layout, Protocol, Side};
use fallow_shm::server::{open_reply, ServerChannel};
use fallow_shm::wait::wait_until;
use fallow_shm::{ClientChannel, OpenError, OpenOptions, SpinPolicy};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::time::Duration;

fn layout(ring_bytes: usize) -> Layout {
    Layout {
        request_ring_bytes: ring_bytes,
        reply_ring_bytes: ring_bytes,
        protocol: Protocol::Resp,
        server_spin_ns: 10_000,
    }
}

/// Accepts one client, answers its SHM.OPEN (or refuses it), then echoes request bytes until the client
/// closes. Returns how the echo ended.
fn echo_server(listener: UnixListener, ring_bytes: usize, refuse: bool) -> String {
    let (mut socket, _) = listener.accept().unwrap();
    let mut request = Vec::new();
    while !request.ends_with(b"SHM.OPEN\r\n") {
        let mut byte = [0u8; 1];
        socket.read_exact(&mut byte).unwrap();
        request.push(byte[0]);
    }
    if refuse {
        fallow_shm::sys::write_all(socket.as_raw_fd(), b"-ERR channels are off\r\n").unwrap();
        return "refused".into();
    }
    let mut channel = ServerChannel::create(layout(ring_bytes)).unwrap();
    let reply = open_reply(&channel.mapping.layout(), false);
    fallow_shm::sys::send_with_fds(socket.as_raw_fd(), &reply, &channel.fds_to_pass()).unwrap();
    channel.forget_memfd();
    let mut buf = vec![0u8; 64 << 10];
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
        )
        .unwrap();
        assert!(ready);
        let n = match channel.requests.read(&mut buf) {
            Ok(n) => n,
            Err(error) => {
                channel.close();
                return error.to_string();
            }
        };
        if n == 0 && channel.mapping.is_closed(Side::Client) {
            return "client closed".into();
        }
        let mut sent = 0;
        while sent < n {
            sent += channel.replies.write(&buf[sent..n]).unwrap();
            channel.wake_client_if_sleeping();
            if sent < n {
                let (mapping, replies) = (channel.mapping.clone(), &mut channel.replies);
                wait_until(
                    &mapping,
                    Side::Server,
                    &channel.server_bell,
                    SpinPolicy::default(),
                    None,
                    || replies.free_bytes().map_or(true, |n| n > 0),
                )
                .unwrap();
            }
        }
    }
}

fn start(ring_bytes: usize, refuse: bool) -> (tempdir::Dir, std::thread::JoinHandle<String>) {
    let dir = tempdir::Dir::new();
    let listener = UnixListener::bind(dir.socket()).unwrap();
    let server = std::thread::spawn(move || echo_server(listener, ring_bytes, refuse));
    (dir, server)
}

mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("fallow-shm-test-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }
        pub fn socket(&self) -> std::path::PathBuf {
            self.0.join("s.sock")
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn read_exactly(channel: &mut ClientChannel, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = channel.read(&mut out[got..]).unwrap();
        assert!(n > 0, "end of stream after {got} of {len} bytes");
        got += n;
    }
    out
}

#[test]
fn bytes_echo_through_a_channel_opened_over_a_unix_socket() {
    let (dir, server) = start(4096, false);
    let mut channel = ClientChannel::open(&dir.socket(), &OpenOptions::default()).unwrap();
    assert_eq!(channel.protocol(), Protocol::Resp);
    channel.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    assert_eq!(read_exactly(&mut channel, 14), b"*1\r\n$4\r\nPING\r\n");
    // A megabyte through 4 KiB rings, written and read by one thread: the writer must interleave reads.
    let value: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i * 7) as u8).collect();
    let mut echoed = Vec::new();
    let mut written = 0;
    while written < value.len() {
        written += channel.try_write(&value[written..]).unwrap();
        let mut chunk = [0u8; 8192];
        if let Ok(n) = channel.try_read(&mut chunk) {
            echoed.extend_from_slice(&chunk[..n]);
        }
    }
    echoed.extend(read_exactly(&mut channel, value.len() - echoed.len()));
    assert!(echoed == value, "the megabyte came back changed");
    drop(channel);
    assert_eq!(server.join().unwrap(), "client closed");
}

#[test]
fn a_sleeping_client_is_woken_by_the_doorbell() {
    let (dir, server) = start(4096, false);
    let options = OpenOptions {
        spin: SpinPolicy { spin_ns: 0 },
        ..OpenOptions::default()
    };
    let mut channel = ClientChannel::open(&dir.socket(), &options).unwrap();
    for round in 0..200u32 {
        let message = format!("round {round}");
        channel.write_all(message.as_bytes()).unwrap();
        assert_eq!(
            read_exactly(&mut channel, message.len()),
            message.as_bytes()
        );
    }
    assert!(
        !channel
            .wait_readable(Some(Duration::from_millis(20)))
            .unwrap(),
        "nothing was sent"
    );
    drop(channel);
    assert_eq!(server.join().unwrap(), "client closed");
}

#[test]
fn a_refusal_is_reported_for_the_caller_to_fall_back() {
    let (dir, server) = start(4096, true);
    match ClientChannel::open(&dir.socket(), &OpenOptions::default()) {
        Err(OpenError::Refused(message)) => assert_eq!(message, "ERR channels are off"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("opened a refused channel"),
    }
    assert_eq!(server.join().unwrap(), "refused");
}

#[test]
fn a_client_that_lies_about_its_tail_breaks_only_its_channel() {
    let (dir, server) = start(4096, false);
    let channel = ClientChannel::open(&dir.socket(), &OpenOptions::default()).unwrap();
    // Scribble a tail a megabyte ahead of the server's head straight into the shared header.
    let tail = channel.mapping.as_ptr_for_tests(128) as *mut u64;
    // SAFETY: the header page is mapped; this is what a hostile client can do.
    unsafe { std::ptr::write_volatile(tail, 1 << 20) };
    fallow_shm::sys::eventfd_ring(channel_server_bell(&channel));
    let ended = server.join().unwrap();
    assert!(ended.contains("corrupt"), "{ended}");
    assert!(
        channel.mapping.is_closed(Side::Server),
        "the server closed the channel"
    );
}

fn channel_server_bell(channel: &ClientChannel) -> i32 {
    channel.server_bell_fd()
}
