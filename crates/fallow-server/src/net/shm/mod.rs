//! Shared-memory channels (YASMIN; DESIGN.md "Transports"). A connection on the Unix socket that runs
//! `SHM.OPEN` moves onto a channel: fallow creates the memfd rings (`fallow_shm`), checks the peer's
//! credentials, answers with the layout and the descriptors (`SCM_RIGHTS`), and the same session (client
//! id, user, database, RESP version, pipelined requests) goes on over the rings, run by the channel
//! poller (`poller`). The socket stays open as the lifeline: when it closes, or carries a byte, the
//! channel closes. A memcached channel starts a memcached connection instead.
mod poller;
mod stream;

use crate::clients::{ClientHandle, ClientKind};
use crate::connection::{ShmOpenRequest, Transport};
use crate::net::resp::{Exit, Session};
use crate::server::Server;
use fallow_shm::layout::{Layout, Protocol};
use fallow_shm::server::ServerChannel;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stream::{Channel, ShmStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;

/// Serves a RESP connection on a Unix socket (the RESP port's, or the memcached port's control
/// socket): until it closes, or until SHM.OPEN moves it onto a channel.
pub(crate) async fn serve_unix(
    server: Arc<Server>,
    mut stream: UnixStream,
    handle: Arc<ClientHandle>,
    transport: Transport,
) {
    let mut session = Session::new(&server, handle.clone(), transport);
    loop {
        if session.run(&server, &mut stream).await == Exit::Closed {
            break;
        }
        let request = session.conn.shm_open.take().expect("set by SHM.OPEN");
        match open(&server, &stream, request, session.conn.resp3).await {
            Ok(opened) => return start(server, stream, session, opened),
            Err(message) => {
                server.shm.refused.fetch_add(1, Ordering::Relaxed);
                server.stats.count_error(message.as_bytes());
                let reply = format!("-{message}\r\n");
                if stream.write_all(reply.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
    }
    session.end(&server, &mut stream).await;
    server.unregister_client(handle.id);
}

/// A channel created and announced to the client.
struct Opened {
    channel: Arc<Channel>,
    protocol: Protocol,
    /// The memcached connection's registration (a memcached channel is a new client).
    memcache_handle: Option<Arc<ClientHandle>>,
}

/// Checks the peer, creates the rings and sends the reply with the descriptors. Err: the error reply.
async fn open(
    server: &Arc<Server>,
    stream: &UnixStream,
    request: ShmOpenRequest,
    resp3: bool,
) -> Result<Opened, String> {
    check_peer(server, stream)?;
    let spin_us = server.config.read().shm_spin_us;
    let layout = Layout {
        request_ring_bytes: request.ring_bytes,
        reply_ring_bytes: request.ring_bytes,
        protocol: request.protocol,
        server_spin_ns: spin_us.saturating_mul(1000),
    };
    let mut rings = ServerChannel::create(layout)
        .map_err(|error| format!("ERR cannot create the shared-memory channel: {error}"))?;
    let memcache_handle = match request.protocol {
        Protocol::Resp => None,
        Protocol::Memcache => Some(
            server
                .register_client(ClientKind::Memcache, "/unixsocket:0".into(), String::new())
                .ok_or("ERR max number of clients reached")?,
        ),
    };
    let reply = fallow_shm::server::open_reply(&layout, resp3);
    let fds = rings.fds_to_pass();
    let sent = loop {
        let attempt = stream.try_io(Interest::WRITABLE, || {
            fallow_shm::sys::send_with_fds(stream.as_raw_fd(), &reply, &fds)
        });
        match attempt {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                if stream.writable().await.is_err() {
                    break Err(error);
                }
            }
            other => break other,
        }
    };
    // The reply is one small message on a socket whose earlier replies were written: it goes whole or
    // not at all (a partial send would leave the client without its descriptors' explanation).
    if !matches!(sent, Ok(n) if n == reply.len()) {
        if let Some(handle) = &memcache_handle {
            server.unregister_client(handle.id);
        }
        return Err("ERR could not pass the channel's descriptors".into());
    }
    rings.forget_memfd();
    Ok(Opened {
        channel: Channel::new(rings, server.clone()),
        protocol: request.protocol,
        memcache_handle,
    })
}

/// The peer must be the server's user, root, or listed in `shm-allowed-uids`: the rings are mapped into
/// both processes, so the channel is offered only to processes the operator trusts with that.
fn check_peer(server: &Server, stream: &UnixStream) -> Result<(), String> {
    let uid = stream
        .peer_cred()
        .map_err(|error| format!("ERR cannot read the peer's credentials: {error}"))?
        .uid();
    // SAFETY: geteuid has no preconditions.
    let own = unsafe { libc::geteuid() };
    let listed = crate::units::parse_uid_list(&server.config.read().shm_allowed_uids)
        .unwrap_or_default()
        .contains(&uid);
    if uid == own || uid == 0 || listed {
        return Ok(());
    }
    Err(format!(
        "ERR shared-memory channels are for the server's user; uid {uid} is not in shm-allowed-uids"
    ))
}

/// Hands the session (or a new memcached connection) to the poller and watches the lifeline.
fn start(server: Arc<Server>, stream: UnixStream, session: Session, opened: Opened) {
    let channel = opened.channel;
    server.shm.opened.fetch_add(1, Ordering::Relaxed);
    server
        .shm
        .ring_bytes
        .fetch_add(channel.ring_bytes_total, Ordering::Relaxed);
    let handle = session.conn.handle.clone();
    // The client the channel's connection runs as: CLIENT KILL's and the lifeline's target.
    let runs_as = opened
        .memcache_handle
        .clone()
        .unwrap_or_else(|| handle.clone());
    let future: poller::ConnectionFuture = match (opened.protocol, opened.memcache_handle) {
        (Protocol::Memcache, Some(memcache)) => {
            let (server, channel) = (server.clone(), channel.clone());
            // The RESP session that asked ends here; the channel carries a memcached connection.
            Box::pin(async move {
                let _guard = Finish::new(&channel);
                let rings = ShmStream::new(channel.clone());
                let mut session = session;
                session.conn.transport = Transport::Shm;
                crate::command::dispatch::txn::disconnect(&server, &mut session.conn);
                server.unregister_client(handle.id);
                let id = memcache.id;
                crate::net::memcache::serve(server.clone(), rings, memcache).await;
                server.unregister_client(id);
            })
        }
        _ => {
            let (server, channel) = (server.clone(), channel.clone());
            Box::pin(async move {
                let _guard = Finish::new(&channel);
                let mut session = session;
                session.conn.transport = Transport::Shm;
                let mut rings = ShmStream::new(channel.clone());
                // SHM.OPEN on a channel is refused by the command (not a Unix socket): it ends here.
                session.run(&server, &mut rings).await;
                session.end(&server, &mut rings).await;
                server.unregister_client(handle.id);
            })
        }
    };
    let spin_us = server.config.read().shm_spin_us;
    if let Err(error) = poller::submit(channel.clone(), future, spin_us) {
        tracing::error!(%error, "cannot start the shared-memory channel poller");
        channel.finish();
    }
    tokio::spawn(lifeline(stream, channel, runs_as));
}

/// Closes the channel (client side told, lifeline released, counters) when its connection ends, however
/// it ends (a panic included).
struct Finish {
    channel: Arc<Channel>,
}

impl Finish {
    fn new(channel: &Arc<Channel>) -> Finish {
        Finish {
            channel: channel.clone(),
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let stats = &self.channel.server.shm;
        stats.closed.fetch_add(1, Ordering::Relaxed);
        stats
            .ring_bytes
            .fetch_sub(self.channel.ring_bytes_total, Ordering::Relaxed);
        self.channel.finish();
    }
}

/// Holds the Unix socket while the channel lives. The client closing it (or dying, or writing to it)
/// closes the channel; the channel's connection ending closes it.
async fn lifeline(mut stream: UnixStream, channel: Arc<Channel>, runs_as: Arc<ClientHandle>) {
    let mut byte = [0u8; 1];
    tokio::select! {
        _ = channel.ended.notified() => {}
        _ = stream.read(&mut byte) => {
            channel
                .server
                .shm
                .closed_by_lifeline
                .fetch_add(1, Ordering::Relaxed);
            channel.close_from_lifeline();
            // A connection waiting in a blocking command reads nothing until it wakes: close it now.
            runs_as.kill();
        }
    }
}
