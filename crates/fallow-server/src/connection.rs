//! Per-connection state of a RESP client: selected database, tenant, protocol version, authentication,
//! MULTI queue, watched keys, subscriptions, reply mode and a pending blocking request.
use crate::clients::ClientHandle;
use crate::pubsub::PubSubMessage;
use crate::server::Server;
use crate::tenants::TenantBinding;
use fallow_proto::ReplyWriter;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// CLIENT REPLY SKIP was just run: the next command's reply is dropped.
    SkipNext,
    Skip,
}

/// What a blocked command's client gets when its timeout passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutReply {
    NullArray,
    NullBulk,
}

/// A command that found nothing to pop and asks the connection to wait for its keys.
#[derive(Clone, Debug)]
pub struct BlockRequest {
    pub keys: Vec<Vec<u8>>,
    /// 0 = wait forever.
    pub timeout_ms: u64,
    pub timeout_reply: TimeoutReply,
    /// The arguments to re-run instead of the command as sent (XREAD's `$` becomes the id it meant when
    /// the command blocked, or each retry would wait for entries after the newest one again).
    pub retry_args: Option<Vec<Vec<u8>>>,
}

/// A key WATCHed by a connection and the CAS it had then (None = absent).
#[derive(Clone, Debug)]
pub struct Watch {
    /// Keyspace address (tenant, namespace, database).
    pub db: usize,
    pub key: Vec<u8>,
    pub cas: Option<u64>,
}

pub struct ConnState {
    pub handle: Arc<ClientHandle>,
    /// The SELECTed database, 0..databases-1, within the tenant's namespace.
    pub db: usize,
    /// The tenant the connection writes as (named like its user) and the namespace it sees.
    pub tenant: TenantBinding,
    pub authenticated: bool,
    pub user: String,
    pub name: String,
    /// Negotiated with HELLO; the reply writer carries the same flag.
    pub resp3: bool,
    /// Commands queued since MULTI (owned copies of their arguments).
    pub multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command queued in MULTI was rejected: EXEC must fail with EXECABORT.
    pub multi_error: bool,
    pub watched: Vec<Watch>,
    pub subscriptions: HashSet<Vec<u8>>,
    pub patterns: HashSet<Vec<u8>>,
    /// Shard channels (SSUBSCRIBE).
    pub shard_channels: HashSet<Vec<u8>>,
    /// Sender other connections publish into; the connection loop owns the receiver.
    pub pubsub_sender: tokio::sync::mpsc::Sender<PubSubMessage>,
    pub reply_mode: ReplyMode,
    pub block: Option<BlockRequest>,
    /// The arguments of the blocked command, re-run when its keys may be ready.
    pub blocked_args: Vec<Vec<u8>>,
    /// Set while a blocked command is re-run: it was blocked, so what vanished meanwhile is answered as
    /// Redis answers blocked clients (a blocked XREADGROUP whose stream or group is gone gets an error).
    pub block_retry: bool,
    pub close_after_reply: bool,
    pub last_command: &'static str,
    /// The clock for the commands of the current batch (one clock read per batch, as Redis caches its
    /// time per event-loop iteration).
    pub now_ms: u64,
    /// Commands run since the server-wide counter was last updated (flushed per batch, so threads do
    /// not fight over one counter per command).
    pub commands_unreported: u64,
    /// Command-table index, calls and microseconds not yet added to `Server::command_stats`.
    pending_command_stats: Option<(usize, u64, u64)>,
    /// Calls not yet added to the latency histograms.
    pending_latency: crate::latency::PendingLatency,
    /// CLIENT NO-TOUCH: the client's commands (but TOUCH) leave LRU/LFU records alone.
    pub no_touch: bool,
    /// The open interactive transaction (TXN.BEGIN).
    pub txn: Option<crate::txn::session::Session>,
    /// The last transaction's buffers, emptied, for the next TXN.BEGIN.
    pub txn_spare: crate::txn::queued::Spare,
    /// Locks a plain command or EXEC took because a transaction held one of its records.
    pub plain_locks: Option<crate::txn::session::PlainLocks>,
    /// A lock request of this connection queued in a record's phaser; the command re-runs when granted.
    pub lock_wait: Option<crate::txn::session::LockWait>,
    /// The command just run did not run: it needs shards a running script holds, or clients are paused
    /// (CLIENT PAUSE). It is to run again after a short wait.
    pub wait_and_retry: bool,
    /// Notified when a release grants this connection's queued lock request.
    pub lock_waker: Arc<tokio::sync::Notify>,
    /// `client-output-buffer-limit` as the connection last loaded it (see `output_limit`).
    pub output_limits: crate::clients::memory::OutputBufferLimits,
    /// Failed AUTH/HELLO AUTH attempts so far; past `auth-failures-before-delay` each is answered late.
    pub auth_failures: u32,
    /// Set by a slowed failed authentication: the connection loop writes the reply and reads more
    /// input only after this instant.
    pub reply_not_before: Option<tokio::time::Instant>,
    /// The newest tier-2 lsn this connection's persistent writes appended and not yet waited for: under
    /// `tier2-fsync always` their replies leave only once it is durable.
    pub durable_lsn_wanted: u64,
    /// Keys of the next command whose values are being read from tier 2 ahead of it.
    pub tier2_faults: Vec<Tier2Fault>,
    /// The next command's values were read ahead: it runs now even if one was demoted again meanwhile.
    pub tier2_read_ahead_done: bool,
    /// Client-side caching (CLIENT TRACKING) as this connection uses it.
    pub tracking: crate::tracking::ConnTracking,
    /// What carries the connection's bytes (SHM.OPEN is answered only on a Unix socket).
    pub transport: Transport,
    /// Set by SHM.OPEN: after the replies before it are written, the connection moves onto a
    /// shared-memory channel (`net::shm`).
    pub shm_open: Option<ShmOpenRequest>,
}

/// What carries a connection's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    /// The Unix socket of the RESP port: SHM.OPEN opens RESP channels unless told otherwise.
    Unix,
    /// The control socket of the memcached port: SHM.OPEN opens memcached channels unless told otherwise.
    UnixForMemcache,
    Shm,
    Vsock,
}

/// A channel SHM.OPEN asked for, checked by the command (the connection loop opens it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOpenRequest {
    pub protocol: fallow_shm::layout::Protocol,
    /// Bytes of each ring.
    pub ring_bytes: usize,
}

/// A key whose value is on tier 2 only, named by the next command.
pub struct Tier2Fault {
    pub keyspace: usize,
    pub key: Vec<u8>,
    pub slot: fallow_store::tier2::Slot,
}

impl ConnState {
    pub fn new(
        handle: Arc<ClientHandle>,
        authenticated: bool,
        pubsub_sender: tokio::sync::mpsc::Sender<PubSubMessage>,
    ) -> ConnState {
        ConnState {
            handle,
            db: 0,
            tenant: TenantBinding::DEFAULT,
            authenticated,
            user: "default".into(),
            name: String::new(),
            resp3: false,
            multi: None,
            multi_error: false,
            watched: Vec::new(),
            subscriptions: HashSet::new(),
            patterns: HashSet::new(),
            shard_channels: HashSet::new(),
            pubsub_sender,
            reply_mode: ReplyMode::On,
            block: None,
            blocked_args: Vec::new(),
            block_retry: false,
            close_after_reply: false,
            last_command: "",
            now_ms: fallow_store::now_ms(),
            commands_unreported: 0,
            pending_command_stats: None,
            pending_latency: Default::default(),
            no_touch: false,
            txn: None,
            txn_spare: Default::default(),
            plain_locks: None,
            lock_wait: None,
            wait_and_retry: false,
            lock_waker: Arc::new(tokio::sync::Notify::new()),
            output_limits: Default::default(),
            auth_failures: 0,
            reply_not_before: None,
            durable_lsn_wanted: 0,
            tier2_faults: Vec::new(),
            tier2_read_ahead_done: false,
            tracking: Default::default(),
            transport: Transport::Tcp,
            shm_open: None,
        }
    }

    pub fn id(&self) -> u64 {
        self.handle.id
    }

    /// The keyspace address of the selected database: what every shard method takes as `db`.
    pub fn address(&self) -> usize {
        self.tenant.address(self.db)
    }

    /// Re-resolves the tenant if tenants changed since it was resolved (checked once per batch).
    pub fn refresh_tenant(&mut self, server: &Server) {
        if self.tenant.is_stale(server.tenant_generation()) {
            self.rebind_tenant(server);
        }
    }

    /// Resolves the tenant from the current user (after AUTH, HELLO AUTH, RESET, TENANT SET).
    pub fn rebind_tenant(&mut self, server: &Server) {
        self.tenant = TenantBinding::resolve(&server.store, server.tenant_generation(), &self.user);
    }

    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Forgets an open MULTI and every watched key (DISCARD, EXEC, RESET).
    pub fn forget_multi(&mut self) {
        self.multi = None;
        self.multi_error = false;
        self.watched.clear();
    }

    /// Marks the open MULTI (if any) as failed.
    pub fn flag_multi_error(&mut self) {
        if self.in_multi() {
            self.multi_error = true;
        }
    }

    /// The output limits of the client's class: pubsub while it has subscriptions, else normal.
    pub fn output_limit(&self) -> crate::clients::memory::ClassLimit {
        use crate::clients::memory::ClientClass;
        let class = if self.subscription_count() > 0 {
            ClientClass::Pubsub
        } else {
            ClientClass::Normal
        };
        self.output_limits.class(class)
    }

    /// Every subscription: channels, patterns and shard channels.
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.len() + self.patterns.len() + self.shard_channels.len()
    }

    /// The count (P)SUBSCRIBE confirmations carry (Redis counts shard channels apart).
    pub fn channel_subscription_count(&self) -> usize {
        self.subscriptions.len() + self.patterns.len()
    }

    /// RESP2 clients with subscriptions may only run pub/sub commands.
    pub fn in_subscribe_context(&self) -> bool {
        self.subscription_count() > 0 && !self.is_resp3()
    }

    pub fn is_resp3(&self) -> bool {
        self.resp3
    }

    /// Drops the reply just written when CLIENT REPLY says so.
    pub fn apply_reply_mode(&mut self, out: &mut ReplyWriter, reply_start: usize) {
        match self.reply_mode {
            ReplyMode::On => {}
            ReplyMode::Off => out.buf.truncate(reply_start),
            ReplyMode::SkipNext => self.reply_mode = ReplyMode::Skip,
            ReplyMode::Skip => {
                out.buf.truncate(reply_start);
                self.reply_mode = ReplyMode::On;
            }
        }
    }

    /// Counts one executed command; runs of the same command are added up before touching shared counters.
    pub fn record_command(&mut self, server: &Server, index: usize, micros: u64) {
        self.pending_latency
            .add(&server.latency.histograms, index, micros);
        match &mut self.pending_command_stats {
            Some((pending, calls, total)) if *pending == index => {
                *calls += 1;
                *total += micros;
            }
            _ => {
                self.flush_command_stats(server);
                self.pending_command_stats = Some((index, 1, micros));
            }
        }
    }

    /// Adds this connection's pending counts to the server-wide counters (INFO reads those).
    pub fn flush_command_stats(&mut self, server: &Server) {
        self.pending_latency.flush(&server.latency.histograms);
        if let Some((index, calls, micros)) = self.pending_command_stats.take() {
            let (total_calls, total_micros) = &server.command_stats[index];
            total_calls.fetch_add(calls, Ordering::Relaxed);
            total_micros.fetch_add(micros, Ordering::Relaxed);
        }
        if self.commands_unreported > 0 {
            server
                .stats
                .commands_processed
                .fetch_add(self.commands_unreported, Ordering::Relaxed);
            self.commands_unreported = 0;
        }
    }

    /// Publishes this connection's visible state for CLIENT LIST/INFO. Runs after every batch, so it
    /// copies only what changed and allocates nothing in the common case.
    pub fn update_snapshot(&self) {
        let mut snapshot = self.handle.snapshot.lock();
        snapshot.db = self.db;
        snapshot.last_command = self.last_command;
        snapshot.subscriptions = self.subscriptions.len();
        snapshot.pattern_subscriptions = self.patterns.len();
        snapshot.in_multi = self.in_multi();
        snapshot.resp = if self.resp3 { 3 } else { 2 };
        snapshot.tracking = self
            .tracking
            .on
            .then_some((self.tracking.redirect, self.tracking.bcast));
        snapshot.no_touch = self.no_touch;
        if snapshot.name != self.name {
            snapshot.name.clone_from(&self.name);
        }
        if snapshot.user != self.user {
            snapshot.user.clone_from(&self.user);
        }
    }
}
