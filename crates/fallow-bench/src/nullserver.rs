//! The null server: a minimal epoll server that answers every request with a fixed reply. Its rate under
//! the same connections and pipeline depth as a key-value benchmark is the ceiling for any
//! request/response server on this machine.
//!
//! One acceptor thread hands accepted connections round-robin to `threads` event-loop threads (so the
//! load is balanced exactly, for TCP and Unix sockets alike). Each event loop finds request boundaries
//! with fallow-proto's own parsers, appends the fixed reply per request, and writes once per read.
use std::io::{self, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use fallow_model::calibrate::{NullProbeSpec, Transport};
use fallow_proto::memcache::{self, McLimits, McRequest};
use fallow_proto::resp::{self, RespLimits};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::net::Stream;
use crate::options::{HumanDuration, Protocol, Ratio, RunOptions, ServerAddr};

/// Largest request accepted (a RESP bulk argument); larger requests close the connection.
const REQUEST_BYTES_MAX: usize = 64 << 20;
/// Reply bytes queued on one connection before it stops reading (the client is not reading).
const REPLY_BACKLOG_BYTES_MAX: usize = 4 << 20;
/// Smallest free space offered to a read.
const READ_CHUNK_BYTES: usize = 16 << 10;
/// Most connections one event loop holds; more are closed on arrival.
const CONNECTIONS_PER_THREAD_MAX: usize = 65_536;
const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
/// Connection tokens start here.
const FIRST_CONN: usize = 2;

/// Which fixed reply the null server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NullProtocol {
    /// RESP requests, answered `+OK`.
    Resp,
    /// memcached text/meta requests, answered `END`.
    Memcache,
}

/// `fallow-bench null-server`: answer every request with one fixed reply.
#[derive(clap::Args, Debug, Clone)]
pub struct NullServerArgs {
    /// Address to listen on (TCP).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// TCP port (0 = any free port, printed at start).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Listen on this Unix socket instead of TCP.
    #[arg(long)]
    pub unix: Option<PathBuf>,
    /// Request syntax: resp (replies +OK) or memcache (replies END).
    #[arg(long, value_enum, default_value_t = NullProtocol::Resp)]
    pub protocol: NullProtocol,
    /// Event-loop threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

impl Default for NullServerArgs {
    fn default() -> Self {
        NullServerArgs {
            bind: "127.0.0.1".into(),
            port: 0,
            unix: None,
            protocol: NullProtocol::Resp,
            threads: 1,
        }
    }
}

/// A running null server; stops (and removes its Unix socket) when dropped.
pub struct NullServer {
    addr: ServerAddr,
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
}

enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener, PathBuf),
}

impl Listener {
    fn bind(args: &NullServerArgs) -> anyhow::Result<(Listener, ServerAddr)> {
        if let Some(path) = &args.unix {
            remove_stale_socket(path)?;
            let listener = mio::net::UnixListener::bind(path)
                .with_context(|| format!("listening on {}", path.display()))?;
            return Ok((
                Listener::Unix(listener, path.clone()),
                ServerAddr::Unix(path.clone()),
            ));
        }
        let text = format!("{}:{}", args.bind, args.port);
        let addr: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&text)
            .with_context(|| format!("resolving {text}"))?
            .next()
            .with_context(|| format!("{text} resolves to no address"))?;
        let listener =
            mio::net::TcpListener::bind(addr).with_context(|| format!("listening on {text}"))?;
        let local = listener.local_addr()?;
        Ok((Listener::Tcp(listener), ServerAddr::Tcp(local.to_string())))
    }

    /// The next pending connection, or `None` when there is none.
    fn accept(&self) -> io::Result<Option<Stream>> {
        let accepted = match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                // Replies must not wait for Nagle's algorithm.
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        };
        match accepted {
            Ok(stream) => Ok(Some(stream)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Removes a socket file left by an earlier run; refuses to touch anything that is not a socket.
fn remove_stale_socket(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)
            .with_context(|| format!("removing the old socket {}", path.display())),
        Ok(_) => bail!("{} exists and is not a socket", path.display()),
        Err(_) => Ok(()),
    }
}

impl NullServer {
    /// Binds and starts the acceptor and event-loop threads.
    pub fn start(args: &NullServerArgs) -> anyhow::Result<NullServer> {
        if args.threads == 0 || args.threads > 1024 {
            bail!("--threads must be between 1 and 1024");
        }
        let (listener, addr) = Listener::bind(args)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = NullServer {
            addr,
            stop: stop.clone(),
            wakers: Vec::new(),
            threads: Vec::new(),
        };
        let mut inboxes = Vec::new();
        for index in 0..args.threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = mpsc::channel();
            let event_loop = EventLoop::new(poll, rx, args.protocol, stop.clone());
            let handle = std::thread::Builder::new()
                .name(format!("null-{index}"))
                .spawn(move || event_loop.run())?;
            server.threads.push(handle);
            server.wakers.push(waker.clone());
            inboxes.push((tx, waker));
        }
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        server.wakers.push(waker);
        let handle = std::thread::Builder::new()
            .name("null-accept".into())
            .spawn(move || accept_loop(poll, listener, inboxes, stop))?;
        server.threads.push(handle);
        Ok(server)
    }

    /// Where clients connect.
    pub fn addr(&self) -> &ServerAddr {
        &self.addr
    }
}

impl Drop for NullServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for waker in &self.wakers {
            let _ = waker.wake();
        }
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

type Inbox = (mpsc::Sender<Stream>, Arc<Waker>);

fn accept_loop(mut poll: Poll, listener: Listener, inboxes: Vec<Inbox>, stop: Arc<AtomicBool>) {
    let mut listener = listener;
    let registered = match &mut listener {
        Listener::Tcp(l) => poll.registry().register(l, LISTENER, Interest::READABLE),
        Listener::Unix(l, _) => poll.registry().register(l, LISTENER, Interest::READABLE),
    };
    if let Err(e) = registered {
        eprintln!("null server: cannot watch the listener: {e}");
        return;
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            eprintln!("null server: poll: {e}");
            return;
        }
        loop {
            match listener.accept() {
                Ok(Some(stream)) => {
                    let (tx, waker) = &inboxes[next % inboxes.len()];
                    next += 1;
                    if tx.send(stream).is_ok() {
                        let _ = waker.wake();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    // Out of descriptors, most likely: say so and wait for the next event.
                    eprintln!("null server: accept: {e}");
                    break;
                }
            }
        }
    }
}

/// One event-loop thread.
struct EventLoop {
    poll: Poll,
    inbox: mpsc::Receiver<Stream>,
    protocol: NullProtocol,
    stop: Arc<AtomicBool>,
    conns: Vec<Option<ServerConn>>,
    free: Vec<usize>,
    resp_limits: RespLimits,
    mc_limits: McLimits,
    args: Vec<Range<usize>>,
}

impl EventLoop {
    fn new(
        poll: Poll,
        inbox: mpsc::Receiver<Stream>,
        protocol: NullProtocol,
        stop: Arc<AtomicBool>,
    ) -> EventLoop {
        EventLoop {
            poll,
            inbox,
            protocol,
            stop,
            conns: Vec::new(),
            free: Vec::new(),
            resp_limits: RespLimits {
                bulk_len_max: REQUEST_BYTES_MAX,
                ..RespLimits::default()
            },
            mc_limits: McLimits::default(),
            args: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("null server: poll: {e}");
                return;
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => {
                        if self.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        self.adopt_new_connections();
                    }
                    Token(t) => {
                        let readable = event.is_readable() || event.is_read_closed();
                        self.service(t - FIRST_CONN, readable);
                    }
                }
            }
        }
    }

    fn adopt_new_connections(&mut self) {
        while let Ok(mut stream) = self.inbox.try_recv() {
            let slot = match self.free.pop() {
                Some(slot) => slot,
                None if self.conns.len() < CONNECTIONS_PER_THREAD_MAX => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
                // Full: dropping the stream closes it.
                None => continue,
            };
            let token = Token(slot + FIRST_CONN);
            let interest = Interest::READABLE | Interest::WRITABLE;
            if self
                .poll
                .registry()
                .register(&mut stream, token, interest)
                .is_ok()
            {
                self.conns[slot] = Some(ServerConn::new(stream));
            } else {
                self.free.push(slot);
            }
        }
    }

    fn service(&mut self, slot: usize, readable: bool) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        conn.readable |= readable;
        let parsers = Parsers {
            protocol: self.protocol,
            resp_limits: &self.resp_limits,
            mc_limits: &self.mc_limits,
            args: &mut self.args,
        };
        if conn.service(parsers).is_err() {
            if let Some(mut conn) = self.conns[slot].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
            }
            self.free.push(slot);
        }
    }
}

struct Parsers<'a> {
    protocol: NullProtocol,
    resp_limits: &'a RespLimits,
    mc_limits: &'a McLimits,
    args: &'a mut Vec<Range<usize>>,
}

/// Why a connection ends.
struct Closed;

struct ServerConn {
    stream: Stream,
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes the request at `start` needs before parsing it again is worthwhile.
    need: usize,
    /// Bytes still to skip: the rest of an oversized memcached value.
    discard: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// The socket may hold unread bytes (set by a readable event, cleared by a short read).
    readable: bool,
    /// A fatal protocol error was answered: close once the reply is out.
    closing: bool,
}

impl ServerConn {
    fn new(stream: Stream) -> ServerConn {
        ServerConn {
            stream,
            rbuf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
            need: 0,
            discard: 0,
            wbuf: Vec::new(),
            wpos: 0,
            readable: false,
            closing: false,
        }
    }

    fn backlog(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Answers what is buffered, writes, and reads more while the socket has bytes and the client keeps
    /// up with the replies.
    fn service(&mut self, mut parsers: Parsers) -> Result<(), Closed> {
        loop {
            self.answer(&mut parsers);
            self.flush()?;
            if self.closing {
                return if self.backlog() == 0 {
                    Err(Closed)
                } else {
                    Ok(())
                };
            }
            if !self.readable || self.backlog() >= REPLY_BACKLOG_BYTES_MAX {
                return Ok(());
            }
            self.read_once()?;
        }
    }

    fn read_once(&mut self) -> Result<(), Closed> {
        let spare_len = self.make_room()?;
        match self.stream.read(&mut self.rbuf[self.end..]) {
            Ok(0) => Err(Closed),
            Ok(n) => {
                self.end += n;
                if n < spare_len {
                    self.readable = false;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(_) => Err(Closed),
        }
    }

    /// Compacts or grows the read buffer so a read has room; a request over the limit closes.
    fn make_room(&mut self) -> Result<usize, Closed> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        let wanted = READ_CHUNK_BYTES.max(self.need.saturating_sub(self.end - self.start));
        if self.rbuf.len() - self.end < wanted && self.start > 0 {
            self.rbuf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.rbuf.len() - self.end < wanted {
            let size = (self.end + wanted)
                .max(self.rbuf.len() * 2)
                .min(REQUEST_BYTES_MAX + READ_CHUNK_BYTES);
            if size <= self.end {
                return Err(Closed);
            }
            self.rbuf.resize(size, 0);
        }
        Ok(self.rbuf.len() - self.end)
    }

    /// Appends one fixed reply per complete request in the buffer.
    fn answer(&mut self, parsers: &mut Parsers) {
        while !self.closing && self.backlog() < REPLY_BACKLOG_BYTES_MAX {
            if self.discard > 0 {
                let skipped = self.discard.min(self.end - self.start);
                self.start += skipped;
                self.discard -= skipped;
                if self.discard > 0 {
                    break;
                }
            }
            let pending = self.end - self.start;
            if pending == 0 || pending < self.need {
                break;
            }
            let answered = match parsers.protocol {
                NullProtocol::Resp => self.answer_resp(parsers),
                NullProtocol::Memcache => self.answer_memcache(parsers.mc_limits),
            };
            if !answered {
                break;
            }
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Answers the RESP request at `start`; false when it is incomplete or the stream failed.
    fn answer_resp(&mut self, parsers: &mut Parsers) -> bool {
        let buf = &self.rbuf[self.start..self.end];
        match resp::parse_request(buf, parsers.resp_limits, parsers.args) {
            resp::Parsed::Incomplete { bytes_needed_min } => {
                self.need = bytes_needed_min.max(buf.len() + 1);
                false
            }
            resp::Parsed::Multibulk { consumed } | resp::Parsed::Inline { consumed, .. } => {
                self.start += consumed;
                self.need = 0;
                self.wbuf.extend_from_slice(b"+OK\r\n");
                true
            }
            resp::Parsed::Empty { consumed } => {
                self.start += consumed;
                true
            }
            resp::Parsed::Error(message) => {
                self.wbuf.extend_from_slice(b"-ERR ");
                self.wbuf.extend_from_slice(message.as_bytes());
                self.wbuf.extend_from_slice(b"\r\n");
                self.closing = true;
                false
            }
        }
    }

    /// Answers the memcached request at `start`; false when it is incomplete or the stream ends.
    fn answer_memcache(&mut self, limits: &McLimits) -> bool {
        let buf = &self.rbuf[self.start..self.end];
        match memcache::parse(buf, limits) {
            memcache::Parsed::Incomplete => {
                self.need = buf.len() + 1;
                false
            }
            memcache::Parsed::Request {
                request: McRequest::Quit,
                ..
            } => {
                self.closing = true;
                false
            }
            memcache::Parsed::Request { consumed, .. } => {
                self.start += consumed;
                self.need = 0;
                self.wbuf.extend_from_slice(b"END\r\n");
                true
            }
            memcache::Parsed::Error {
                error,
                consumed: Some(consumed),
            } => {
                error.encode(&mut self.wbuf);
                let skip_now = consumed.min(buf.len());
                self.discard = consumed - skip_now;
                self.start += skip_now;
                self.need = 0;
                true
            }
            memcache::Parsed::Error {
                error,
                consumed: None,
            } => {
                error.encode(&mut self.wbuf);
                self.closing = true;
                false
            }
        }
    }

    fn flush(&mut self) -> Result<(), Closed> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(Closed),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }
}

/// `fallow-bench null-server`: runs until the process is stopped.
pub fn run_null_server(args: &NullServerArgs) -> anyhow::Result<()> {
    let server = NullServer::start(args)?;
    eprintln!(
        "null server listening on {} ({} thread{}, {:?} protocol); stop with Ctrl-C",
        server.addr(),
        args.threads,
        if args.threads == 1 { "" } else { "s" },
        args.protocol
    );
    loop {
        std::thread::park();
    }
}

/// A Unix socket path no other probe in this process is using.
fn probe_socket_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "fallow-null-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The load generator's settings for a probe: GETs of 32-byte keys, closed loop, two client threads,
/// `duration_ms` measured after a warm-up of a tenth of that.
pub fn probe_options(spec: &NullProbeSpec, server: ServerAddr) -> anyhow::Result<RunOptions> {
    let protocol = match spec.protocol.as_str() {
        "resp" => Protocol::Resp2,
        "memcache" => Protocol::MemcacheText,
        other => bail!("null probe: unknown protocol {other:?} (resp or memcache)"),
    };
    if spec.connections == 0 || spec.pipeline == 0 || spec.duration_ms == 0 {
        bail!("null probe: connections, pipeline and duration_ms must be above 0");
    }
    let mut options = RunOptions::defaults();
    options.server = server;
    options.protocol = protocol;
    options.threads = 2;
    options.connections_total = Some(spec.connections);
    options.pipeline = spec.pipeline;
    options.ratio = Ratio { sets: 0, gets: 1 };
    options.keys = 100_000;
    options.key_bytes = 32;
    options.duration = Some(HumanDuration(Duration::from_millis(spec.duration_ms)));
    options.warmup = HumanDuration(Duration::from_millis(spec.duration_ms / 10));
    options.quiet = true;
    options.validate()?;
    Ok(options)
}

/// Starts a null server, drives it with the load generator as `spec` says, and returns requests/s.
pub fn probe(spec: &NullProbeSpec) -> anyhow::Result<f64> {
    let protocol = match spec.protocol.as_str() {
        "memcache" => NullProtocol::Memcache,
        _ => NullProtocol::Resp,
    };
    let args = NullServerArgs {
        unix: (spec.transport == Transport::Unix).then(probe_socket_path),
        protocol,
        threads: spec.server_threads,
        ..NullServerArgs::default()
    };
    let server = NullServer::start(&args)?;
    let options = probe_options(spec, server.addr().clone())?;
    let results = crate::runner::run(&options)?;
    if results.errors > 0 {
        bail!(
            "null probe: {} errors ({})",
            results.errors,
            results.drop_reason.as_deref().unwrap_or("error replies")
        );
    }
    Ok(results.ops_per_sec)
}
