//! Listeners: RESP over TCP and a Unix socket, memcached over TCP. Each accepted connection becomes a task
//! on the runtime's worker threads; the connection limit (maxclients) is enforced at accept.
pub(crate) mod accept;
pub mod memcache;
pub mod protected;
pub mod resp;
mod shm;
mod unix_socket;
pub mod vsock;

use crate::clients::ClientKind;
use crate::connection::Transport;
use crate::server::Server;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

/// Binds every configured listener and serves until `shutdown` resolves; then stops accepting, asks every
/// connection to finish, and removes the Unix socket.
pub async fn serve(
    server: Arc<Server>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let config = server.config.read().clone();
    // Pairs every command's metadata with its handler now: a missing one stops the server before it
    // listens, not at the first client's command.
    let commands = crate::command::table().len();
    tracing::debug!(commands, "command table ready");
    accept::reserve_spare();
    let mut tasks = Vec::new();
    if config.port != 0 {
        let listener = bind_tcp(&config.bind, config.port).await?;
        tracing::info!(address = %listener.local_addr()?, "RESP listening");
        tasks.push(tokio::spawn(accept_tcp(
            server.clone(),
            listener,
            ClientKind::Resp,
        )));
    }
    // Opened, closed and reopened as authentication requires (see memcache::listener).
    tasks.push(memcache::listener::start(&server).await?);
    let mut unix_socket = None;
    if let Some(path) = config.unix_socket_path() {
        let from_default = config.unixsocket.is_none();
        let (listener, file) =
            unix_socket::bind(&path, config.unixsocketperm, from_default).await?;
        tracing::info!(path = %path.display(), "RESP listening on Unix socket");
        unix_socket = Some(file);
        tasks.push(tokio::spawn(accept_unix(
            server.clone(),
            listener,
            Transport::Unix,
        )));
    }
    let mut memcache_control_socket = None;
    if let Some(path) = config.memcache_control_socket_path() {
        // Best effort: a host without the memcached port's socket still opens memcached channels with
        // SHM.OPEN PROTOCOL memcache on the RESP socket.
        match unix_socket::bind(&path, config.unixsocketperm, true).await {
            Ok((listener, file)) => {
                tracing::info!(path = %path.display(), "memcached channels' control socket (RESP)");
                memcache_control_socket = Some(file);
                tasks.push(tokio::spawn(accept_unix(
                    server.clone(),
                    listener,
                    Transport::UnixForMemcache,
                )));
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "no control socket for memcached channels")
            }
        }
    }
    if config.vsock_port != 0 {
        tasks.push(vsock::start(&server, config.vsock_port)?);
    }
    if config.metrics_port != 0 {
        let listener = bind_tcp(&config.bind, config.metrics_port).await?;
        tracing::info!(address = %listener.local_addr()?, "Prometheus metrics at /metrics");
        tasks.push(tokio::spawn(crate::metrics::serve(
            server.clone(),
            listener,
        )));
    }
    warn_if_exposed(&server, &config.bind).await;
    tasks.push(tokio::spawn(housekeeping(server.clone())));
    if let Some(tier2) = server.durability.get().and_then(|d| d.tier2.as_ref()) {
        if config.tier2_reads == "io-uring" {
            tasks.extend(crate::command::dispatch::tier2::start_async_reads(tier2));
        }
    }
    crate::elastic::start::start(&server).map_err(std::io::Error::other)?;
    shutdown.await;
    server.elastic.stop();
    tracing::info!("shutting down");
    server.shutting_down.store(true, Ordering::Relaxed);
    for task in &tasks {
        task.abort();
    }
    let clients: Vec<_> = server.clients.lock().values().cloned().collect();
    for client in clients {
        client.kill();
    }
    // Connections finish the batch they are executing and close; give them a moment.
    for _ in 0..100 {
        if server.clients.lock().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for socket in [unix_socket, memcache_control_socket].into_iter().flatten() {
        socket.remove();
    }
    if let Some(durability) = server.durability.get() {
        durability.shutdown(&server.store);
    }
    Ok(())
}

/// Binds a TCP listener; the error names the address (a second server on the same port is the usual cause).
async fn bind_tcp(bind: &str, port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind((bind, port)).await.map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("cannot listen on {bind}:{port}: {error}"),
        )
    })
}

/// One warning at start when the TCP listeners are reachable from other hosts: what protected mode
/// will do, or that anyone who reaches the port can use the data.
async fn warn_if_exposed(server: &Server, bind: &str) {
    let exposed = tokio::net::lookup_host((bind, 0))
        .await
        .map(|mut addresses| addresses.any(|address| !address.ip().is_loopback()))
        .unwrap_or(false);
    if !exposed {
        return;
    }
    if server.protected_mode_in_force() {
        tracing::warn!(
            bind,
            "protected mode: bound to a non-loopback address with no password for the default user, so \
only loopback and Unix-socket clients are answered; set requirepass, or --protected-mode no to serve \
other hosts without a password"
        );
    } else if server.config.read().requirepass.is_empty() {
        tracing::warn!(
            bind,
            "bound to a non-loopback address with protected mode off and no requirepass: any host that \
reaches the ports can read and change the data"
        );
    }
}

pub(crate) async fn accept_tcp(server: Arc<Server>, listener: TcpListener, kind: ClientKind) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                accept::failed(&server, error, listener.as_raw_fd(), too_many(kind)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream
            .local_addr()
            .map(|address| address.to_string())
            .unwrap_or_default();
        let server = server.clone();
        tokio::spawn(async move {
            if !server.admits(Some(peer.ip())) {
                return refuse(stream, protected::denial(kind)).await;
            }
            let Some(handle) = server.register_client(kind, peer.to_string(), local) else {
                return refuse(stream, too_many(kind)).await;
            };
            let id = handle.id;
            if kind == ClientKind::Memcache && !server.memcache_gate.is_open() {
                // Accepted just before the gate closed the listener: authentication is required now.
                server.unregister_client(id);
                return;
            }
            match kind {
                ClientKind::Resp => {
                    resp::serve(server.clone(), stream, handle, Transport::Tcp).await
                }
                ClientKind::Memcache => memcache::serve(server.clone(), stream, handle).await,
            }
            server.unregister_client(id);
        });
    }
}

async fn accept_unix(server: Arc<Server>, listener: UnixListener, transport: Transport) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                let refusal = too_many(ClientKind::Resp);
                accept::failed(&server, error, listener.as_raw_fd(), refusal).await;
                continue;
            }
        };
        let server = server.clone();
        tokio::spawn(async move {
            let Some(handle) =
                server.register_client(ClientKind::Resp, "/unixsocket:0".into(), String::new())
            else {
                return refuse(stream, too_many(ClientKind::Resp)).await;
            };
            shm::serve_unix(server, stream, handle, transport).await;
        });
    }
}

/// What a client over the connection limit is told.
/// Sleeps for `duration`, or forever when None (a `select!` branch that may be off).
pub(crate) async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// Waits out a slowed failed authentication (RESP AUTH, memcached SASL or text auth): its answer, and
/// reading more, wait until `not_before`; the task sleeps, no thread or lock is held. False when the client
/// was killed meanwhile.
pub(crate) async fn wait_reply_delay(
    handle: &crate::clients::ClientHandle,
    not_before: &mut Option<tokio::time::Instant>,
) -> bool {
    let Some(deadline) = not_before.take() else {
        return true;
    };
    tokio::select! {
        _ = handle.kill_signal.notified() => false,
        _ = tokio::time::sleep_until(deadline) => true,
    }
}

fn too_many(kind: ClientKind) -> &'static [u8] {
    match kind {
        ClientKind::Resp => b"-ERR max number of clients reached\r\n",
        ClientKind::Memcache => b"SERVER_ERROR Too many open connections\r\n",
    }
}

/// Tells a refused client why, then closes. What it already sent is read first (without waiting), so
/// the close is a FIN and not a reset that could discard the message.
async fn refuse<S: tokio::io::AsyncWrite + tokio::io::AsyncRead + Unpin>(
    mut stream: S,
    message: &[u8],
) {
    let _ = stream.write_all(message).await;
    let mut unread = [0u8; 4096];
    // A zero timeout still polls the read once: it takes what has arrived and never waits.
    let _ = tokio::time::timeout(Duration::ZERO, stream.read(&mut unread)).await;
}

/// Active expiry and compaction, `hz` times a second. It runs as a task among the connections, in small
/// slices with a yield between them, rather than on a thread of its own: on a machine with few cores an
/// extra runnable thread gets preempted while holding a shard lock, and every client of that shard then
/// waits out the scheduler's time slice.
async fn housekeeping(server: Arc<Server>) {
    loop {
        let hz = server.config.read().hz.max(1);
        tokio::time::sleep(Duration::from_millis(1000 / hz)).await;
        // Expiry, compaction and maxmemory enforcement lock shards, which a running script may hold for
        // long: they wait for the next tick rather than block a worker.
        if !server.scripts.any_running() {
            shard_housekeeping(&server).await;
            // Active expiry and eviction of this tick (and evictions other commands made room with).
            server.publish_store_events();
        }
        if server.durability.get().is_some() {
            // Cleaning reads a whole region and takes shard locks record by record: off the workers.
            let server = server.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(durability) = server.durability.get() {
                    durability.maintain(&server.store);
                }
            })
            .await;
        }
        server.store.memory.sample_peak();
        // Pub/sub queues grow without their connections running: catch a total PUBLISH pushed over.
        crate::clients::memory::enforce_maxmemory_clients(&server.clients, &server.clients_memory);
        crate::clients::memory::trim_if_wanted(&server.clients_memory);
        server.acl_log.report_auth_failures();
    }
}

/// Expiry, compaction, and (fixed mode) maxmemory enforcement: one tick's work, yielding between slices.
async fn shard_housekeeping(server: &Server) {
    /// Items checked per shard per active-expiry round.
    const EXPIRE_ITEMS_PER_ROUND: usize = 2000;
    /// Live items moved per compaction slice (one lock hold, a few microseconds).
    const COMPACT_ITEMS_PER_SLICE: usize = 32;
    /// Compaction time per shard per tick; enough to keep up with heavy overwrite loads at 10 ticks/s.
    const COMPACT_BUDGET: Duration = Duration::from_millis(2);
    /// Eviction time per tick after maxmemory was lowered (in slices with yields between them): 1 GB of
    /// 50 KB values goes in ~0.1 s on 2 cores, so a large cut finishes within a tick or two.
    const ENFORCE_BUDGET: Duration = Duration::from_millis(250);
    /// Compaction time per shard per tick while fixed mode holds resident bytes over their target
    /// (overwrites faster than `COMPACT_BUDGET` keeps up with): maxmemory bounds resident memory too.
    const COMPACT_BUDGET_OVER_TARGET: Duration = Duration::from_millis(5);
    let store = &server.store;
    let target = store.resident_target_bytes();
    let budget = if target != 0 && store.resident_bytes() > target {
        COMPACT_BUDGET_OVER_TARGET
    } else {
        COMPACT_BUDGET
    };
    // DEBUG SET-ACTIVE-EXPIRE 0 stops active expiry (tests of lazy expiry rely on it).
    let expires = server.active_expire.load(Ordering::Relaxed);
    let mut expire_time = Duration::ZERO;
    for index in 0..store.shard_count() {
        if server.scripts.any_running() {
            return;
        }
        if expires {
            let started = std::time::Instant::now();
            store.expire_shard(index, EXPIRE_ITEMS_PER_ROUND);
            expire_time += started.elapsed();
            crate::command::tracking::invalidate_unattributed(server);
        }
        tokio::task::yield_now().await;
        let deadline = std::time::Instant::now() + budget;
        while store.compact_shard_slice(index, COMPACT_ITEMS_PER_SLICE)
            && std::time::Instant::now() < deadline
        {
            tokio::task::yield_now().await;
        }
    }
    // The latency monitor's events, as Redis names its cycles (time with the locks held, yields left out).
    server.latency.record_if_needed("expire-cycle", expire_time);
    // Under an elastic pool limit the controller reclaims the excess (in bounded slices); evicting here
    // too would release it twice. In fixed mode, after CONFIG SET lowered maxmemory: evict the excess
    // one bounded slice per shard lock hold, yielding between rounds, then give spare segments back
    // while resident bytes are over their target (compaction above handles dead space).
    if store.pool_limit_bytes() == 0 {
        let started = std::time::Instant::now();
        let deadline = started + ENFORCE_BUDGET;
        let mut evict_time = Duration::ZERO;
        loop {
            let slice_started = std::time::Instant::now();
            let more = store.enforce_maxmemory();
            evict_time += slice_started.elapsed();
            crate::command::tracking::invalidate_unattributed(server);
            if !more || std::time::Instant::now() >= deadline {
                break;
            }
            tokio::task::yield_now().await;
        }
        server
            .latency
            .record_if_needed("eviction-cycle", evict_time);
    }
}
