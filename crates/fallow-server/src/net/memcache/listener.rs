//! The memcached listener's supervisor. memcached clients must not bypass authentication: while the
//! server requires it (requirepass, or ACL users other than an unrestricted passwordless `default`) and
//! `memcache-auth` is `no`, the listener stays closed. The supervisor re-evaluates this whenever users or
//! the configuration change (`ListenerGate::wake`): it closes the listener and its connections, or binds
//! it again.
use super::gate::{auth_required, ClosedReason};
use crate::clients::ClientKind;
use crate::server::Server;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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
                let killed = crate::clients::kill_kind(&server.clients, ClientKind::Memcache);
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;

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
