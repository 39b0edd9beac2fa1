//! The state every connection shares: the store, the live configuration, the client registry, pub/sub,
//! users, and the server-wide counters INFO reports.
use crate::acl::Acl;
use crate::clients::{ClientHandle, ClientKind, ClientMap};
use crate::config::Config;
use crate::pubsub::PubSub;
use crate::stats::ServerStats;
use fallow_store::{EvictionPolicy, Store, StoreConfig};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub struct Server {
    pub store: Store,
    pub config: RwLock<Config>,
    /// Bumped on every CONFIG SET, so connections know to refresh cached limits.
    pub config_generation: AtomicU64,
    /// Bumped when tenants change (TENANT SET), so connections re-resolve their tenant.
    tenant_generation: AtomicU64,
    pub clients: ClientMap,
    next_client_id: AtomicU64,
    pub pubsub: PubSub,
    /// Keyspace notifications: the classes on and the counters.
    pub notify: crate::notify::Notifier,
    /// Client output buffer limits, maxmemory-clients and what all clients' buffers hold.
    pub clients_memory: crate::clients::memory::ClientsMemory,
    pub acl: RwLock<Acl>,
    /// Mirrors `Acl::default_is_unrestricted`, read on every command without touching the ACL lock.
    pub acl_default_unrestricted: AtomicBool,
    /// Protected mode's two conditions, mirrored from the config and the users so every TCP accept checks
    /// them without a lock (see `admits`).
    protected_mode_on: AtomicBool,
    default_user_needs_no_password: AtomicBool,
    /// ACL LOG entries and the `acl_access_denied_*` counters.
    pub acl_log: crate::acl::log::AclLog,
    pub stats: ServerStats,
    /// memcached-protocol counters (`stats`) and flush_all state.
    pub memcache: crate::stats::McStats,
    /// Shared-memory channels (INFO shm).
    pub shm: crate::stats::ShmStats,
    /// The mounted file caches' last reports (FSCACHE, INFO fscache).
    pub fscache: crate::fscache::FsCaches,
    /// Whether the memcached listener is open; woken when users or settings change (auth gating).
    pub memcache_gate: crate::net::memcache::gate::ListenerGate,
    pub started: Instant,
    pub run_id: String,
    /// Per-command call counts and microseconds, indexed like the command table.
    pub command_stats: Vec<(AtomicU64, AtomicU64)>,
    pub shutting_down: AtomicBool,
    /// The elastic controller's shared state (wake-ups, last host sample, counters).
    pub elastic: crate::elastic::Elastic,
    /// Interactive transactions: the lock table and its counters.
    pub txns: crate::txn::Txns,
    /// CLIENT PAUSE: until when, and whether only writes wait.
    pub pause: parking_lot::Mutex<Option<ClientPause>>,
    /// Mirrors whether `pause` is set, read on every command without the lock.
    pub paused: AtomicBool,
    /// SLOWLOG's entries.
    pub slowlog: crate::slowlog::SlowLog,
    /// Client-side caching (CLIENT TRACKING).
    pub tracking: crate::tracking::Tracking,
    /// LATENCY's monitor and the per-command latency histograms.
    pub latency: crate::latency::Latency,
    /// MONITOR's clients.
    pub monitors: crate::monitor::Monitors,
    /// Active expiry runs (DEBUG SET-ACTIVE-EXPIRE 0 stops it; keys then expire only when touched).
    pub active_expire: AtomicBool,
    /// Lua scripting: the script cache and the runs in progress.
    pub scripts: crate::scripting::Scripts,
    /// The data directory and tier 2 (set by `Server::open`; servers made by `new`, in tests, have none).
    pub durability: std::sync::OnceLock<crate::durability::Durability>,
}

/// A CLIENT PAUSE in force.
#[derive(Clone, Copy, Debug)]
pub struct ClientPause {
    pub until: Instant,
    /// WRITE: only commands that may write (or replicate) wait; ALL: every command waits.
    pub writes_only: bool,
}

impl Server {
    /// Whether a command (`writes`: it may write) must wait for a CLIENT PAUSE to end; a pause whose
    /// time has passed is lifted here.
    pub fn paused_for(&self, writes: bool) -> bool {
        if !self.paused.load(Ordering::Relaxed) {
            return false;
        }
        let mut pause = self.pause.lock();
        match *pause {
            Some(current) if current.until > Instant::now() => writes || !current.writes_only,
            _ => {
                *pause = None;
                self.paused.store(false, Ordering::Relaxed);
                false
            }
        }
    }

    /// A server with the configuration's tenants defined (validated by `Config::load`).
    pub fn new(config: Config) -> Server {
        let tenants = config.tenants.clone();
        let server = Server::without_tenants(config);
        if let Err(error) = crate::tenants::define_configured(&server.store, &tenants) {
            tracing::error!(%error, "a configured tenant was not defined");
        }
        server.tenants_changed();
        server
    }

    /// The server as `fallow` runs it: locks `--dir`, defines the saved tenants (in their id order) then
    /// the configured ones, restores the saved users, and replays tier 2 into the store. Err when the
    /// directory is taken or tier 2 cannot be opened.
    pub fn open(config: Config) -> Result<Server, String> {
        let (dir, lock) = crate::durability::Durability::lock(std::path::Path::new(&config.dir))?;
        let tenants = config.tenants.clone();
        let server = Server::without_tenants(config);
        let saved = crate::durability::saved_tenants(&dir);
        crate::tenants::define_configured(&server.store, &saved).map_err(|error| {
            format!(
                "{}: {error}",
                dir.join(crate::durability::TENANTS_FILE).display()
            )
        })?;
        crate::tenants::define_configured(&server.store, &tenants)?;
        server.restore_users(&crate::durability::saved_users(&dir))?;
        server.load_acl_file()?;
        let config = server.config.read().clone();
        let durability = crate::durability::Durability::open(&config, dir, lock, &server.store)?;
        let _ = server.durability.set(durability);
        // Keys the replay put back are not news (Redis's loading publishes nothing): drop their events.
        server.set_notify_flags(server.notify.flags());
        server.tenants_changed();
        server.acl_changed(&server.acl.read());
        Ok(server)
    }

    /// Users saved as ACL LIST lines (`user NAME rule...`).
    fn restore_users(&self, lines: &[String]) -> Result<(), String> {
        let mut acl = self.acl.write();
        for line in lines {
            let mut words = line.split_whitespace();
            let (Some("user"), Some(name)) = (words.next(), words.next()) else {
                return Err(format!("users.acl: not a user line: '{line}'"));
            };
            let mut user = crate::acl::User::new(name);
            let words: Vec<&str> = words.collect();
            let rules = crate::acl::merge_selectors(&words)
                .map_err(|start| format!("users.acl, user {name}: unmatched '{start}'"))?;
            for rule in &rules {
                user.apply_rule(rule)
                    .map_err(|error| format!("users.acl, user {name}: {error}"))?;
            }
            acl.users.insert(name.to_string(), user);
        }
        Ok(())
    }

    /// With `aclfile` set, its users replace all others (as in Redis, where they cannot be mixed with
    /// users from the configuration). Err (a bad file) refuses the start.
    fn load_acl_file(&self) -> Result<(), String> {
        let path = self.config.read().aclfile.clone();
        if path.is_empty() {
            return Ok(());
        }
        let users = crate::acl::file::load(&path)?;
        self.acl.write().users = users;
        Ok(())
    }

    fn without_tenants(config: Config) -> Server {
        let store = Store::new(&StoreConfig {
            shards: config.shards,
            databases: config.databases,
            segment_bytes: config.segment_size_bytes as usize,
            maxmemory_bytes: config.maxmemory_bytes as usize,
            policy: EvictionPolicy::from_name(&config.maxmemory_policy).expect("validated policy"),
        });
        let txn_settings = config.txn_settings();
        let clients_memory = crate::clients::memory::ClientsMemory::default();
        clients_memory.configure(
            config.client_output_buffer_limit,
            config.maxmemory_clients,
            config.maxmemory_bytes,
        );
        let tracking = crate::tracking::Tracking::new(
            config.tracking_table_max_keys,
            config.tracking_table_max_bytes as usize,
        );
        let notify_flags = crate::notify::parse_classes(&config.notify_keyspace_events)
            .expect("validated notify-keyspace-events");
        let run_id: String = (0..40)
            .map(|_| format!("{:x}", rand::random::<u8>() % 16))
            .collect();
        let server = Server {
            store,
            acl: RwLock::new(Acl::new(&config.requirepass)),
            acl_default_unrestricted: AtomicBool::new(true),
            protected_mode_on: AtomicBool::new(config.protected_mode),
            default_user_needs_no_password: AtomicBool::new(config.requirepass.is_empty()),
            acl_log: Default::default(),
            config: RwLock::new(config),
            config_generation: AtomicU64::new(0),
            tenant_generation: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
            next_client_id: AtomicU64::new(1),
            pubsub: PubSub::default(),
            notify: crate::notify::Notifier::default(),
            clients_memory,
            stats: ServerStats::default(),
            memcache: crate::stats::McStats::default(),
            shm: crate::stats::ShmStats::default(),
            fscache: crate::fscache::FsCaches::default(),
            memcache_gate: crate::net::memcache::gate::ListenerGate::default(),
            started: Instant::now(),
            run_id,
            command_stats: crate::command::info::table()
                .iter()
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            shutting_down: AtomicBool::new(false),
            elastic: crate::elastic::Elastic::default(),
            txns: crate::txn::Txns::new(txn_settings),
            scripts: crate::scripting::Scripts::default(),
            slowlog: crate::slowlog::SlowLog::default(),
            tracking,
            latency: crate::latency::Latency::new(crate::command::info::table().len()),
            monitors: crate::monitor::Monitors::default(),
            active_expire: AtomicBool::new(true),
            pause: parking_lot::Mutex::new(None),
            paused: AtomicBool::new(false),
            durability: std::sync::OnceLock::new(),
        };
        server.set_notify_flags(notify_flags);
        server
    }

    /// Turns keyspace notifications' classes on or off, and the store's recording of the key events
    /// they publish (expired, evicted, new, keymiss).
    fn set_notify_flags(&self, flags: u32) {
        self.notify.set_flags(flags);
        let causes = crate::notify::Notifier::store_causes(flags);
        self.store.record_key_events(&causes);
    }

    /// Publishes the key events the store recorded in every shard (expired, evicted, new, keymiss).
    pub fn publish_store_events(&self) {
        if crate::notify::Notifier::store_causes(self.notify.flags()).is_empty() {
            return;
        }
        let mut events = Vec::new();
        for index in 0..self.store.shard_count() {
            events.append(&mut self.store.take_key_events(index));
        }
        if !events.is_empty() {
            self.publish_key_events(events);
        }
    }

    /// Publishes recorded key events in the order they happened (they come from several shards),
    /// enforcing maxmemory-clients if the messages passed it.
    pub fn publish_key_events(&self, mut events: Vec<fallow_store::shard::KeyEvent>) {
        events.sort_unstable_by_key(|event| event.sequence);
        if self
            .notify
            .publish_store_events(&self.pubsub, &self.clients_memory, events)
        {
            crate::clients::memory::enforce_maxmemory_clients(&self.clients, &self.clients_memory);
        }
    }

    pub fn tenant_generation(&self) -> u64 {
        self.tenant_generation.load(Ordering::Relaxed)
    }

    /// Call after defining or changing a tenant: connections re-resolve theirs before their next batch.
    pub fn tenants_changed(&self) {
        self.tenant_generation.fetch_add(1, Ordering::Relaxed);
        if let Some(durability) = self.durability.get() {
            durability.save_tenants(&self.store.memory.pool.specs());
        }
    }

    /// Call after changing users, with the ACL still locked.
    pub fn acl_changed(&self, acl: &Acl) {
        self.acl_default_unrestricted
            .store(acl.default_is_unrestricted(), Ordering::Relaxed);
        self.default_user_needs_no_password
            .store(!acl.default_user_requires_auth(), Ordering::Relaxed);
        // Users that make authentication required close an unauthenticated memcached listener.
        let memcache_auth = self.config.read().memcache_auth;
        self.memcache_gate
            .close_now_if_gated(&self.clients, acl, memcache_auth);
        self.memcache_gate.wake();
        if let Some(durability) = self.durability.get() {
            durability.save_users(acl);
        }
    }

    /// Records a denied command, key or channel of a RESP client (counter, ACL LOG entry).
    pub fn note_acl_denial(
        &self,
        handle: &ClientHandle,
        reason: crate::acl::log::Reason,
        context: crate::acl::log::Context,
        object: &[u8],
        username: &str,
    ) {
        let max_len = self.config.read().acllog_max_len;
        self.acl_log.record(
            reason,
            context,
            &String::from_utf8_lossy(object),
            username,
            crate::clients::describe_client(handle),
            max_len,
        );
    }

    /// Records one failed authentication of any listener (RESP AUTH/HELLO, memcached SASL): counts it
    /// (`acl_access_denied_auth`), logs it to ACL LOG with `object` (the command, e.g. "auth") and the username
    /// tried, adds it to the rate-limited warning, and bumps the connection's `failures`. Returns how long the
    /// connection should wait before answering and reading more: nothing for the first
    /// `auth-failures-before-delay` failures, then `auth-failure-delay-ms` doubling per failure up to
    /// `auth-failure-delay-max-ms`. The caller waits without holding locks or blocking a thread (async sleep).
    pub fn note_auth_failure(
        &self,
        handle: &ClientHandle,
        object: &str,
        username: &str,
        context: crate::acl::log::Context,
        failures: &mut u32,
    ) -> Option<std::time::Duration> {
        *failures = failures.saturating_add(1);
        let (max_len, free, first_ms, max_ms) = {
            let config = self.config.read();
            (
                config.acllog_max_len,
                config.auth_failures_before_delay,
                config.auth_failure_delay_ms,
                config.auth_failure_delay_max_ms,
            )
        };
        self.acl_log.record(
            crate::acl::log::Reason::Auth,
            context,
            object,
            username,
            crate::clients::describe_client(handle),
            max_len,
        );
        self.acl_log.warn_rate_limited(&handle.peer_addr);
        crate::acl::log::auth_failure_delay(*failures, free, first_ms, max_ms)
    }

    /// Whether protected mode holds now: on, and a new connection would need no password.
    pub fn protected_mode_in_force(&self) -> bool {
        crate::net::protected::in_force(
            self.protected_mode_on.load(Ordering::Relaxed),
            self.default_user_needs_no_password.load(Ordering::Relaxed),
        )
    }

    /// Whether a client from `peer` (None: the Unix socket) may connect; counts a refusal.
    pub fn admits(&self, peer: Option<std::net::IpAddr>) -> bool {
        let admitted = crate::net::protected::admits(peer, self.protected_mode_in_force());
        if !admitted {
            self.stats
                .protected_mode_rejections
                .fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Registers a new connection; None when maxclients is reached.
    pub fn register_client(
        &self,
        kind: ClientKind,
        peer_addr: String,
        local_addr: String,
    ) -> Option<Arc<ClientHandle>> {
        self.stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        let maxclients = self.config.read().maxclients;
        let mut clients = self.clients.lock();
        if clients.len() >= maxclients {
            self.stats
                .connections_rejected
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let id = self.next_client_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(ClientHandle::new(id, kind, peer_addr, local_addr));
        clients.insert(handle.id, handle.clone());
        Some(handle)
    }

    pub fn unregister_client(&self, id: u64) {
        let handle = self.clients.lock().remove(&id);
        self.pubsub.unsubscribe_all(id);
        self.tracking.unregister(id);
        self.monitors.remove(id);
        self.fscache.connection_closed(id);
        // After unsubscribing: no PUBLISH adds to its queue any more.
        if let Some(handle) = handle {
            self.clients_memory.release(&handle);
        }
    }

    /// Applies a CONFIG SET to the parts that cache settings (store limits, users) and wakes the elastic
    /// controller, so a new bound or mode takes effect at once.
    pub fn config_changed(&self) {
        let config = self.config.read().clone();
        self.tracking.set_bounds(
            config.tracking_table_max_keys,
            config.tracking_table_max_bytes as usize,
        );
        self.store
            .set_maxmemory_bytes(config.maxmemory_bytes as usize);
        if config.memory_mode == crate::elastic::settings::MemoryMode::Fixed {
            // At once, not at the controller's next step: fixed mode has no pool limit.
            self.store.set_pool_limit_bytes(0);
        }
        self.store.set_policy(
            EvictionPolicy::from_name(&config.maxmemory_policy).expect("validated policy"),
        );
        {
            let mut acl = self.acl.write();
            acl.set_default_password(&config.requirepass);
            self.default_user_needs_no_password
                .store(!acl.default_user_requires_auth(), Ordering::Relaxed);
            self.memcache_gate
                .close_now_if_gated(&self.clients, &acl, config.memcache_auth);
        }
        self.protected_mode_on
            .store(config.protected_mode, Ordering::Relaxed);
        // requirepass and memcache-auth decide whether the memcached listener may be open.
        self.memcache_gate.wake();
        self.acl_log.trim(config.acllog_max_len);
        self.clients_memory.configure(
            config.client_output_buffer_limit,
            config.maxmemory_clients,
            config.maxmemory_bytes,
        );
        self.txns.configure(config.txn_settings());
        self.slowlog
            .configure(config.slowlog_log_slower_than_us, config.slowlog_max_len);
        let notify_flags = crate::notify::parse_classes(&config.notify_keyspace_events)
            .expect("validated notify-keyspace-events");
        if notify_flags != self.notify.flags() {
            self.set_notify_flags(notify_flags);
        }
        self.latency.configure(
            config.latency_monitor_threshold_ms,
            config.latency_tracking,
            config.latency_percentiles(),
        );
        self.config_generation.fetch_add(1, Ordering::Relaxed);
        self.elastic.wake.config_changed();
    }
}

#[cfg(test)]
impl Server {
    /// A small server for unit tests: two shards, one thread, everything else default.
    pub fn for_tests() -> Server {
        Server::new(Config {
            shards: 2,
            threads: 1,
            ..Config::default()
        })
    }
}
