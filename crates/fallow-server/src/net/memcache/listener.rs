//! The memcached listener's supervisor. memcached clients must not bypass authentication: while the
//! server requires it (requirepass, or ACL users other than an unrestricted passwordless `default`) and
//! `memcache-auth` is `no`, the listener stays closed. The supervisor re-evaluates this whenever users or
//! the configuration change (`ListenerGate::wake`): it closes the listener and its connections, or binds
//! it again.
use crate::acl::Acl;
use crate::server::{ClientKind, Server};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Why the listener is closed, as INFO shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedReason {
    /// `memcache-port 0`.
    Disabled,
    /// Authentication is required and `memcache-auth` is `no`.
    AuthRequired,
    /// Reopening failed to bind the port.
    BindFailed,
}

impl ClosedReason {
    fn name(self) -> &'static str {
        match self {
            ClosedReason::Disabled => "disabled",
            ClosedReason::AuthRequired => "auth_required_memcache_auth_no",
            ClosedReason::BindFailed => "bind_failed",
        }
    }
}

/// The listener's state, shared through `Server::memcache_gate`.
#[derive(Default)]
pub struct ListenerGate {
    wake: Notify,
    open: AtomicBool,
    closed_reason: Mutex<Option<ClosedReason>>,
    /// Times the listener was closed at run time because authentication became required.
    closures: AtomicU64,
}

impl ListenerGate {
    /// Asks the supervisor to re-evaluate (users or configuration changed). A wake-up while it is busy
    /// is kept, so none is lost.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Whether memcached connections may be served now.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Closes memcached service at once when `acl` and `memcache_auth` gate it: its connections are killed
    /// before the command that changed the users or the password replies, so no unauthenticated request
    /// slips in after it; the supervisor then closes the socket.
    pub fn close_now_if_gated(&self, server: &Server, acl: &Acl, memcache_auth: bool) {
        if !memcache_auth && auth_required(acl) && self.is_open() {
            self.set_closed(ClosedReason::AuthRequired);
            kill_connections(server);
        }
    }

    fn set_open(&self) {
        *self.closed_reason.lock() = None;
        self.open.store(true, Ordering::Release);
    }

    fn set_closed(&self, reason: ClosedReason) {
        self.open.store(false, Ordering::Release);
        *self.closed_reason.lock() = Some(reason);
    }

    /// INFO fields: whether the listener is open, why not, and how often it was closed.
    pub fn info_fields(&self, server: &Server) -> Vec<(&'static str, String)> {
        let state = if self.is_open() { "open" } else { "closed" };
        let reason = self.closed_reason.lock().map(ClosedReason::name);
        let auth = server.config.read().memcache_auth;
        let mc = &server.memcache;
        vec![
            ("memcache_listener", state.into()),
            (
                "memcache_listener_closed_reason",
                reason.unwrap_or("").into(),
            ),
            ("memcache_auth", crate::tenants::yes_no(auth).into()),
            (
                "memcache_listener_closures",
                self.closures.load(Ordering::Relaxed).to_string(),
            ),
            (
                "memcache_auth_cmds",
                mc.auth_cmds.load(Ordering::Relaxed).to_string(),
            ),
            (
                "memcache_auth_errors",
                mc.auth_errors.load(Ordering::Relaxed).to_string(),
            ),
        ]
    }
}

/// True unless the only user is an enabled, passwordless `default` that may run everything on every key.
pub fn auth_required(acl: &Acl) -> bool {
    acl.users.len() > 1 || acl.default_user_requires_auth() || !acl.default_is_unrestricted()
}

/// Whether the listener must stay closed for authentication's sake.
pub fn gated(server: &Server) -> bool {
    // One lock at a time: ACL SETUSER holds the ACL lock while it wakes the supervisor.
    let memcache_auth = server.config.read().memcache_auth;
    !memcache_auth && auth_required(&server.acl.read())
}

/// Binds the listener at start unless authentication keeps it closed (then one warning says why and how
/// to enable it), and starts the supervisor. Err only when the first bind fails.
pub async fn start(server: &Arc<Server>) -> std::io::Result<JoinHandle<()>> {
    let gate = &server.memcache_gate;
    let accepting = if server.config.read().memcache_port == 0 {
        gate.set_closed(ClosedReason::Disabled);
        None
    } else if gated(server) {
        gate.set_closed(ClosedReason::AuthRequired);
        tracing::warn!(
            "memcached listener not started: the server requires authentication (requirepass or ACL \
             users) and memcached clients would bypass it; enable memcached authentication with \
             --memcache-auth yes (or CONFIG SET memcache-auth yes)"
        );
        None
    } else {
        Some(bind(server).await?)
    };
    Ok(tokio::spawn(supervise(server.clone(), accepting)))
}

/// Binds the port and starts accepting on it.
async fn bind(server: &Arc<Server>) -> std::io::Result<Accepting> {
    let (bind, port) = {
        let config = server.config.read();
        (config.bind.clone(), config.memcache_port)
    };
    let listener = TcpListener::bind((bind.as_str(), port)).await?;
    tracing::info!(address = %listener.local_addr()?, "memcached protocol listening");
    server.memcache_gate.set_open();
    let task = tokio::spawn(crate::net::accept_tcp(
        server.clone(),
        listener,
        ClientKind::Memcache,
    ));
    Ok(Accepting(task))
}

/// The accept loop; dropping it (supervisor closing it, or shutting down) closes the listener.
struct Accepting(JoinHandle<()>);

impl Accepting {
    /// Stops accepting and waits until the socket is closed, so the port can be bound again.
    async fn close(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl Drop for Accepting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn supervise(server: Arc<Server>, mut accepting: Option<Accepting>) {
    let gate = &server.memcache_gate;
    loop {
        gate.wake.notified().await;
        if server.config.read().memcache_port == 0 {
            continue;
        }
        let closed = gated(&server);
        match accepting.take() {
            Some(open) if closed => {
                gate.set_closed(ClosedReason::AuthRequired);
                open.close().await;
                let killed = kill_connections(&server);
                gate.closures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    connections_closed = killed,
                    "memcached listener closed: authentication is now required and memcache-auth is \
                     no; enable memcached authentication with CONFIG SET memcache-auth yes"
                );
            }
            None if !closed => match bind(&server).await {
                Ok(open) => accepting = Some(open),
                Err(error) => {
                    gate.set_closed(ClosedReason::BindFailed);
                    tracing::warn!(%error, "memcached listener could not be reopened");
                }
            },
            unchanged => accepting = unchanged,
        }
    }
}

/// Closes every memcached connection; returns how many.
fn kill_connections(server: &Server) -> usize {
    let clients: Vec<_> = server
        .clients
        .lock()
        .values()
        .filter(|client| client.kind == ClientKind::Memcache)
        .cloned()
        .collect();
    for client in &clients {
        client.kill();
    }
    clients.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_is_required_by_a_password_or_any_other_user() {
        let mut acl = Acl::new("");
        assert!(!auth_required(&acl));
        acl.set_default_password("s3cret");
        assert!(auth_required(&acl));
        acl.set_default_password("");
        let mut restricted = acl.users["default"].clone();
        restricted.apply_rule("-flushall").unwrap();
        acl.users.insert("default".into(), restricted);
        assert!(auth_required(&acl), "a restricted default user");
        let mut acl = Acl::new("");
        let mut tenant = acl.users["default"].clone();
        tenant.name = "tenant".into();
        acl.users.insert("tenant".into(), tenant);
        assert!(auth_required(&acl));
    }
}
