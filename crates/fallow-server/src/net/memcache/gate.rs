//! Whether the memcached listener is open (`ListenerGate`, held by the server): closed while
//! authentication is required and `memcache-auth` is `no`. The supervisor in `listener` opens and closes
//! the socket; a change of users or password closes it here at once, killing its connections.
use crate::acl::Acl;
use crate::clients::{ClientKind, ClientMap};
use crate::stats::McStats;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::Notify;

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
    pub(crate) wake: Notify,
    open: AtomicBool,
    closed_reason: Mutex<Option<ClosedReason>>,
    /// Times the listener was closed at run time because authentication became required.
    pub(crate) closures: AtomicU64,
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
    pub fn close_now_if_gated(&self, clients: &ClientMap, acl: &Acl, memcache_auth: bool) {
        if !memcache_auth && auth_required(acl) && self.is_open() {
            self.set_closed(ClosedReason::AuthRequired);
            crate::clients::kill_kind(clients, ClientKind::Memcache);
        }
    }

    pub(crate) fn set_open(&self) {
        *self.closed_reason.lock() = None;
        self.open.store(true, Ordering::Release);
    }

    pub(crate) fn set_closed(&self, reason: ClosedReason) {
        self.open.store(false, Ordering::Release);
        *self.closed_reason.lock() = Some(reason);
    }

    /// INFO fields: whether the listener is open, why not, and how often it was closed.
    pub fn info_fields(&self, auth: bool, mc: &McStats) -> Vec<(&'static str, String)> {
        let state = if self.is_open() { "open" } else { "closed" };
        let reason = self.closed_reason.lock().map(ClosedReason::name);
        vec![
            ("memcache_listener", state.into()),
            (
                "memcache_listener_closed_reason",
                reason.unwrap_or("").into(),
            ),
            ("memcache_auth", crate::units::yes_no(auth).into()),
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
