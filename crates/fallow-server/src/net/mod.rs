//! Listeners: RESP over TCP and a Unix socket, memcached over TCP. Each accepted connection becomes a task
//! on the runtime's worker threads; the connection limit (maxclients) is enforced at accept.
pub mod memcache;
pub mod resp;

use crate::server::{ClientKind, Server};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UnixListener};

/// Binds every configured listener and serves until `shutdown` resolves; then stops accepting, asks every
/// connection to finish, and removes the Unix socket.
pub async fn serve(
    server: Arc<Server>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let config = server.config.read().clone();
    let mut tasks = Vec::new();
    if config.port != 0 {
        let listener = TcpListener::bind((config.bind.as_str(), config.port)).await?;
        tracing::info!(address = %listener.local_addr()?, "RESP listening");
        tasks.push(tokio::spawn(accept_tcp(
            server.clone(),
            listener,
            ClientKind::Resp,
        )));
    }
    if config.memcache_port != 0 {
        let listener = TcpListener::bind((config.bind.as_str(), config.memcache_port)).await?;
        tracing::info!(address = %listener.local_addr()?, "memcached protocol listening");
        tasks.push(tokio::spawn(accept_tcp(
            server.clone(),
            listener,
            ClientKind::Memcache,
        )));
    }
    let socket_path = (!config.unixsocket.is_empty()).then(|| config.unixsocket.clone());
    if let Some(path) = &socket_path {
        // A stale socket from a crashed run would make bind fail.
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        tracing::info!(path = %path, "RESP listening on Unix socket");
        tasks.push(tokio::spawn(accept_unix(server.clone(), listener)));
    }
    if config.metrics_port != 0 {
        let listener = TcpListener::bind((config.bind.as_str(), config.metrics_port)).await?;
        tracing::info!(address = %listener.local_addr()?, "Prometheus metrics at /metrics");
        tasks.push(tokio::spawn(crate::metrics::serve(
            server.clone(),
            listener,
        )));
    }
    tasks.push(tokio::spawn(housekeeping(server.clone())));
    crate::elastic::start(&server).map_err(std::io::Error::other)?;
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
    if let Some(path) = socket_path {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

async fn accept_tcp(server: Arc<Server>, listener: TcpListener, kind: ClientKind) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
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
            let Some(handle) = server.register_client(kind, peer.to_string(), local) else {
                return reject(stream, kind).await;
            };
            let id = handle.id;
            match kind {
                ClientKind::Resp => resp::serve(server.clone(), stream, handle).await,
                ClientKind::Memcache => memcache::serve(server.clone(), stream, handle).await,
            }
            server.unregister_client(id);
        });
    }
}

async fn accept_unix(server: Arc<Server>, listener: UnixListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let server = server.clone();
        tokio::spawn(async move {
            let Some(handle) =
                server.register_client(ClientKind::Resp, "/unixsocket:0".into(), String::new())
            else {
                return reject(stream, ClientKind::Resp).await;
            };
            let id = handle.id;
            resp::serve(server.clone(), stream, handle).await;
            server.unregister_client(id);
        });
    }
}

/// Tells a client over the connection limit why it is dropped.
async fn reject<S: tokio::io::AsyncWrite + Unpin>(mut stream: S, kind: ClientKind) {
    let message: &[u8] = match kind {
        ClientKind::Resp => b"-ERR max number of clients reached\r\n",
        ClientKind::Memcache => b"SERVER_ERROR Too many open connections\r\n",
    };
    let _ = stream.write_all(message).await;
}

/// Active expiry and compaction, `hz` times a second. It runs as a task among the connections, in small
/// slices with a yield between them, rather than on a thread of its own: on a machine with few cores an
/// extra runnable thread gets preempted while holding a shard lock, and every client of that shard then
/// waits out the scheduler's time slice.
async fn housekeeping(server: Arc<Server>) {
    /// Items checked per shard per active-expiry round.
    const EXPIRE_ITEMS_PER_ROUND: usize = 2000;
    /// Live items moved per compaction slice (one lock hold, a few microseconds).
    const COMPACT_ITEMS_PER_SLICE: usize = 32;
    /// Compaction time per shard per tick; enough to keep up with heavy overwrite loads at 10 ticks/s.
    const COMPACT_BUDGET: Duration = Duration::from_millis(2);
    loop {
        let hz = server.config.read().hz.max(1);
        tokio::time::sleep(Duration::from_millis(1000 / hz)).await;
        let store = &server.store;
        for index in 0..store.shard_count() {
            store.expire_shard(index, EXPIRE_ITEMS_PER_ROUND);
            tokio::task::yield_now().await;
            let deadline = std::time::Instant::now() + COMPACT_BUDGET;
            while store.compact_shard_slice(index, COMPACT_ITEMS_PER_SLICE)
                && std::time::Instant::now() < deadline
            {
                tokio::task::yield_now().await;
            }
        }
        // Under an elastic pool limit the controller reclaims the excess (in bounded slices); evicting here
        // too would hold every shard lock for the whole excess and release it twice.
        if store.pool_limit_bytes() == 0 {
            store.enforce_maxmemory();
        }
        store.memory.sample_peak();
    }
}
