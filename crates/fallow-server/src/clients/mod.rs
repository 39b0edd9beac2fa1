//! The connected clients as the rest of the server sees them: each one's handle (kind, addresses, what
//! CLIENT LIST shows, its kill switch and its buffers' bytes) and the map of all of them. Their
//! buffers' limits and accounting are in `memory`.
pub mod memory;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Every connected client by id (`Server::clients`).
pub type ClientMap = Mutex<HashMap<u64, Arc<ClientHandle>>>;

/// Which listener a client came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    Resp,
    Memcache,
}

/// What CLIENT LIST shows of a connection; updated by the connection as it runs.
#[derive(Clone, Debug, Default)]
pub struct ClientSnapshot {
    pub name: String,
    pub db: usize,
    pub last_command: &'static str,
    pub user: String,
    pub resp: u8,
    pub subscriptions: usize,
    pub pattern_subscriptions: usize,
    pub in_multi: bool,
    pub blocked: bool,
    /// Client-side caching: (redirection client id or 0, BCAST) while tracking is on.
    pub tracking: Option<(u64, bool)>,
    /// CLIENT NO-TOUCH is on (flag `T`, as Redis 7.2 shows it).
    pub no_touch: bool,
}

/// One connected client as the rest of the server sees it.
pub struct ClientHandle {
    pub id: u64,
    pub kind: ClientKind,
    pub peer_addr: String,
    pub local_addr: String,
    pub created: Instant,
    pub last_active: Mutex<Instant>,
    pub snapshot: Mutex<ClientSnapshot>,
    pub(crate) killed: AtomicBool,
    pub kill_signal: tokio::sync::Notify,
    /// Set while it waits in a blocking command (BLPOP, XREAD BLOCK...): CLIENT UNBLOCK may end the wait.
    pub unblockable: AtomicBool,
    /// How CLIENT UNBLOCK asked the wait to end (true: with an error, false: as a timeout).
    pub unblock_with_error: AtomicBool,
    pub unblock_signal: tokio::sync::Notify,
    /// It runs MONITOR (flag `O`); set by `crate::monitor::Monitors`.
    pub monitoring: AtomicBool,
    /// Its output, queued pub/sub and query bytes, for the output limits and maxmemory-clients.
    pub memory: memory::ClientMemory,
}

impl ClientHandle {
    /// Asks the connection to close (CLIENT KILL, a slow pub/sub subscriber).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.kill_signal.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// A Unix-socket or loopback client (Redis's islocalClient), for the `local` value of the
    /// `enable-*` switches. A peer that is no socket address is a Unix-socket one.
    pub fn is_local(&self) -> bool {
        match self.peer_addr.parse::<std::net::SocketAddr>() {
            Ok(address) => match address.ip() {
                std::net::IpAddr::V4(v4) => v4.is_loopback(),
                std::net::IpAddr::V6(v6) => {
                    v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
                }
            },
            Err(_) => true,
        }
    }

    /// CLIENT UNBLOCK: ends its blocking command's wait (as a timeout, or with an error); false when it
    /// is not waiting in one.
    pub fn unblock(&self, with_error: bool) -> bool {
        if !self.unblockable.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.unblock_with_error.store(with_error, Ordering::Relaxed);
        self.unblock_signal.notify_one();
        true
    }
}

impl ClientHandle {
    /// A handle for a new connection, as CLIENT LIST first shows it.
    pub fn new(id: u64, kind: ClientKind, peer_addr: String, local_addr: String) -> ClientHandle {
        ClientHandle {
            id,
            kind,
            peer_addr,
            local_addr,
            created: Instant::now(),
            last_active: Mutex::new(Instant::now()),
            snapshot: Mutex::new(ClientSnapshot {
                user: "default".into(),
                resp: 2,
                ..ClientSnapshot::default()
            }),
            killed: AtomicBool::new(false),
            kill_signal: tokio::sync::Notify::new(),
            unblockable: AtomicBool::new(false),
            unblock_with_error: AtomicBool::new(false),
            unblock_signal: tokio::sync::Notify::new(),
            monitoring: AtomicBool::new(false),
            memory: Default::default(),
        }
    }
}

/// Closes every client of `kind`; returns how many.
pub fn kill_kind(clients: &ClientMap, kind: ClientKind) -> usize {
    let matching: Vec<_> = clients
        .lock()
        .values()
        .filter(|client| client.kind == kind)
        .cloned()
        .collect();
    for client in &matching {
        client.kill();
    }
    matching.len()
}

/// One CLIENT LIST line in Redis's format.
pub fn describe_client(handle: &ClientHandle) -> String {
    let snapshot = handle.snapshot.lock().clone();
    let idle_s = handle.last_active.lock().elapsed().as_secs();
    let mut flags = String::new();
    if handle.monitoring.load(Ordering::Relaxed) {
        flags.push('O');
    }
    if snapshot.subscriptions + snapshot.pattern_subscriptions > 0 {
        flags.push('P');
    }
    if snapshot.in_multi {
        flags.push('x');
    }
    if snapshot.blocked {
        flags.push('b');
    }
    if let Some((_, bcast)) = snapshot.tracking {
        flags.push('t');
        if bcast {
            flags.push('B');
        }
    }
    if snapshot.no_touch {
        flags.push('T');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let command = if snapshot.last_command.is_empty() {
        "NULL".to_string()
    } else {
        snapshot.last_command.to_string()
    };
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db={} sub={} psub={} ssub=0 multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user={} redir={} resp={}{}",
        handle.id,
        handle.peer_addr,
        handle.local_addr,
        snapshot.name,
        handle.created.elapsed().as_secs(),
        idle_s,
        flags,
        snapshot.db,
        snapshot.subscriptions,
        snapshot.pattern_subscriptions,
        if snapshot.in_multi { 0 } else { -1 },
        handle.memory.query_bytes.load(std::sync::atomic::Ordering::Relaxed),
        handle.memory.output_total(),
        handle.memory.total(),
        command,
        snapshot.user,
        snapshot.tracking.map_or(-1, |(redirect, _)| redirect as i64),
        snapshot.resp,
        // Redis 7.0's field set; memcached clients are told apart by a field of their own.
        match handle.kind {
            ClientKind::Resp => "",
            ClientKind::Memcache => " lib=memcache",
        }
    )
}
