//! The memcached connection loop: read, execute every complete request in the buffer (text, meta or
//! binary, detected per request), write the batch of replies at once. Execution lives in `text`,
//! `meta` and `binary`; item semantics shared by the three in `items`; counters and reports in `stats`.
pub mod auth;
mod binary;
pub mod gate;
mod items;
pub mod listener;
mod meta;
mod read_ahead;
mod stats;
mod text;

pub use gate::ListenerGate;
pub use stats::McStats;

use crate::clients::ClientHandle;
use crate::command::dispatch::tier2;
use crate::connection::Tier2Fault;
use crate::net::{sleep_or_forever, wait_reply_delay};
use crate::server::Server;
use crate::tenants::TenantBinding;
use crate::txn::modes;
use crate::txn::session::{self, Claim, LockWait, PlainLocks};
use crate::txn::AbortCause;
use fallow_proto::memcache::{
    encode_binary_response, parse, BinaryStatus, McLimits, McRequest, Parsed,
};
use fallow_store::{Guards, OutOfMemory, Shard};
use fallow_txn::Access;
use stats::bump;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// What `version` reports: the memcached release whose behaviour fallow follows.
pub const VERSION: &str = "1.6.18-fallow";
/// Replies buffered before execution pauses to write them (bounds output memory for huge pipelines).
const OUTPUT_FLUSH_BYTES: usize = 1 << 20;
/// Bytes read per read call at least.
const READ_CHUNK_BYTES: usize = 16 << 10;
/// Room for a request's line, key and headers on top of its value when bounding a partial request.
const PARTIAL_REQUEST_OVERHEAD_BYTES: usize = 512 << 10;
/// Reply to a write that cannot be made room for under maxmemory.
pub(crate) const OOM_REPLY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
/// Input read while a request waits for a transaction's lock, at most (more waits for the wait to end).
const INPUT_WHILE_WAITING_BYTES_MAX: usize = 1 << 20;

/// Settings a connection caches; refreshed when CONFIG SET changes them or tenants change.
struct Limits {
    generation: u64,
    codec: McLimits,
    /// A buffered, still incomplete request larger than this closes the connection.
    partial_request_bytes_max: usize,
    /// The listener's tenant (`memcache-tenant`, else the default tenant).
    tenant: TenantBinding,
}

impl Limits {
    fn load(server: &Server) -> Limits {
        let generation = server.config_generation.load(Ordering::Relaxed);
        let config = server.config.read();
        let value_len_max = config.memcache_item_size_max_bytes as usize;
        let codec = McLimits {
            value_len_max,
            ..McLimits::default()
        };
        // Room for the longest multi-get line (2 MiB) or a storage request's line and value.
        let partial_request_bytes_max = value_len_max
            .saturating_add(PARTIAL_REQUEST_OVERHEAD_BYTES)
            .saturating_add(codec.multiget_line_bytes_max);
        Limits {
            generation,
            codec,
            partial_request_bytes_max,
            tenant: TenantBinding::resolve(
                &server.store,
                server.tenant_generation(),
                &config.memcache_tenant,
            ),
        }
    }

    fn refresh(&mut self, server: &Server) {
        if server.config_generation.load(Ordering::Relaxed) != self.generation
            || self.tenant.is_stale(server.tenant_generation())
        {
            *self = Limits::load(server);
        }
    }
}

/// What executing one request needs.
pub(crate) struct Exec<'a> {
    pub server: &'a Arc<Server>,
    pub out: &'a mut Vec<u8>,
    pub value_len_max: usize,
    /// Keyspace address of the items: database 0 of the listener's tenant.
    pub db: usize,
    /// Set by quit (and binary quit): close once the replies are written.
    pub close: bool,
    /// Transactions' locks on the items the request touches.
    pub locks: &'a mut ItemLocks,
    /// The ACL user the connection runs as.
    pub login: &'a mut auth::McSession,
}

/// A memcached connection's side of transactions' locks: like a RESP plain command, a request waits
/// while a transaction holds an item it touches in a mode that does not admit it (reads share).
#[derive(Default)]
pub(crate) struct ItemLocks {
    locks: Option<PlainLocks>,
    wait: Option<LockWait>,
    waker: Arc<Notify>,
    /// Set when the request being executed cannot run now.
    blocked: Option<Blocked>,
    /// What the waiting request answers when it is executed again: its wait ended without the lock.
    refused: Option<AbortCause>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocked {
    /// Queued for a lock: the request is executed again once granted.
    Wait,
    Refused(AbortCause),
}

impl ItemLocks {
    fn release(&mut self, server: &Server) {
        session::release_claim(&server.txns, &mut self.locks, &mut self.wait);
    }
}

impl<'a> Exec<'a> {
    /// Locks the shard of `key`, unless a transaction holds the item in a mode that does not admit
    /// `access`: then None, and the request waits or is refused (`process_input`).
    pub fn lock_item(&mut self, key: &[u8], access: Access) -> Option<Guards<'a>> {
        let guards = self.server.store.lock_keys([key]);
        // Checked with the shard locked, as for RESP commands: a transaction that locks the item later
        // reads it after this request.
        if !self.server.txns.any_locked() && self.locks.locks.is_none() {
            return Some(guards);
        }
        let requests = modes::item_request(key, access, self.db);
        let locks = &mut *self.locks;
        let waker = locks.waker.clone();
        match session::claim(
            &self.server.txns,
            &mut locks.locks,
            &mut locks.wait,
            &waker,
            requests,
        ) {
            Claim::Run => Some(guards),
            Claim::Wait => {
                locks.blocked = Some(Blocked::Wait);
                None
            }
            Claim::Refused(cause) => {
                locks.blocked = Some(Blocked::Refused(cause));
                None
            }
        }
    }

    /// Runs `f` on the locked shard of `key` and the items' database; None as for [`Exec::lock_item`].
    pub fn with_item<R>(
        &mut self,
        key: &[u8],
        access: Access,
        f: impl FnOnce(&mut Shard, usize) -> R,
    ) -> Option<R> {
        let mut guards = self.lock_item(key, access)?;
        Some(f(guards.shard(key), self.db))
    }

    /// Like [`Exec::with_item`] for writes: first evicts to get under maxmemory, Err when that fails.
    pub fn with_item_room<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut Shard, usize) -> R,
    ) -> Option<Result<R, OutOfMemory>> {
        let mut guards = self.lock_item(key, Access::ReadMutate)?;
        if self.server.store.over_maxmemory() {
            if let Err(full) = guards.make_room() {
                return Some(Err(full));
            }
        }
        Some(Ok(f(guards.shard(key), self.db)))
    }
}

/// Per-connection buffers.
struct Conn {
    input: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of a rejected oversized value still to arrive and be discarded.
    skip_bytes: usize,
    limits: Limits,
    locks: ItemLocks,
    login: auth::McSession,
    /// The stubs the next request reads (`Flow::Tier2Read`), to read ahead.
    tier2_faults: Vec<Tier2Fault>,
    /// The next request's values were read ahead: it runs without being checked again, even if one was
    /// demoted meanwhile (it then reads it on the worker).
    tier2_read_ahead_done: bool,
}

/// What the connection does after a batch.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Read,
    /// Output was flushed early; more complete requests may be buffered.
    More,
    /// A request waits for a transaction's lock (it is still in the input).
    WaitLock,
    /// The next request's values are on tier 2 (it is still in the input): read them ahead, then run it.
    Tier2Read,
    /// A script holds shards: the next request (still in the input) runs once it ends.
    ScriptWait,
    Close,
}

pub async fn serve<S>(server: Arc<Server>, mut stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if listener::gated(&server) {
        return; // accepted just before authentication closed the listener
    }
    bump(&server.memcache.total_connections);
    let mut conn = Conn {
        input: Vec::with_capacity(READ_CHUNK_BYTES),
        out: Vec::new(),
        skip_bytes: 0,
        limits: Limits::load(&server),
        locks: ItemLocks::default(),
        login: auth::McSession::new(&server, handle.clone()),
        tier2_faults: Vec::new(),
        tier2_read_ahead_done: false,
    };
    if let Err(error) = connection_loop(&server, &mut stream, &handle, &mut conn).await {
        tracing::debug!(client = handle.id, %error, "connection ended with an error");
    }
    conn.locks.release(&server);
    let _ = stream.shutdown().await;
}

async fn connection_loop<S>(
    server: &Arc<Server>,
    stream: &mut S,
    handle: &ClientHandle,
    conn: &mut Conn,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut flow = Flow::Read;
    let mut durable_wanted = 0;
    loop {
        if handle.is_killed() {
            return Ok(());
        }
        if flow == Flow::More {
            flow = process_input(server, conn);
            durable_wanted = durable_wanted.max(fallow_store::shard::take_thread_lsn());
        } else {
            conn.input.reserve(READ_CHUNK_BYTES);
            tokio::select! {
                biased;
                _ = handle.kill_signal.notified() => return Ok(()),
                read = stream.read_buf(&mut conn.input) => {
                    let read = read?;
                    if read == 0 {
                        return Ok(());
                    }
                    count_input(server, read);
                    *handle.last_active.lock() = std::time::Instant::now();
                    conn.limits.refresh(server);
                    discard_skipped(conn);
                    flow = process_input(server, conn);
                    durable_wanted = durable_wanted.max(fallow_store::shard::take_thread_lsn());
                }
            }
        }
        // Under tier2-fsync always, persistent writes are acknowledged once their records are durable.
        if let Some(durability) = server.durability.get() {
            if let Err(error) = durability
                .before_reply(std::mem::take(&mut durable_wanted))
                .await
            {
                tracing::error!(%error, "persistent writes could not be made durable; closing without acknowledging them");
                return Ok(());
            }
        }
        show_user(handle, &mut conn.login);
        if !wait_reply_delay(handle, &mut conn.login.reply_not_before).await {
            return Ok(());
        }
        write_out(server, stream, handle, &mut conn.out).await?;
        if flow == Flow::WaitLock {
            flow = wait_item_lock(server, stream, handle, conn).await;
        }
        if flow == Flow::Tier2Read {
            // The earlier requests' replies are written; the request runs once its values are read.
            let faults = std::mem::take(&mut conn.tier2_faults);
            tier2::read_ahead(server, faults).await;
            conn.tier2_read_ahead_done = true;
            flow = Flow::More;
        }
        if flow == Flow::ScriptWait {
            tokio::select! {
                _ = server.scripts.wait_for_an_end() => flow = Flow::More,
                _ = handle.kill_signal.notified() => return Ok(()),
            }
        }
        if flow == Flow::Close {
            return Ok(());
        }
    }
}

/// Whether a running script holds any shard: memcached requests then wait (off the worker) until none
/// does, as the protocol has no BUSY reply; scripts that long are rare.
fn scripts_hold_shards(server: &Server) -> bool {
    let every_shard = crate::scripting::HeldShards::All;
    server.scripts.conflict(u64::MAX, &every_shard) != crate::scripting::Conflict::None
}

/// Sleeps until the waiting request's lock is granted (then it runs again), its wait passes
/// `txn-lock-wait-ms` (then it is answered with an error), or the client goes away.
async fn wait_item_lock<S>(
    server: &Server,
    stream: &mut S,
    handle: &ClientHandle,
    conn: &mut Conn,
) -> Flow
where
    S: AsyncRead + Unpin,
{
    let wait_max = Duration::from_millis(server.config.read().txn_lock_wait_ms);
    let waker = conn.locks.waker.clone();
    handle.snapshot.lock().blocked = true;
    let flow = loop {
        let Some(wait) = conn.locks.wait.as_ref() else {
            break Flow::More;
        };
        let started = wait.started;
        if session::end_granted_wait(&server.txns, &mut conn.locks.wait) {
            break Flow::More;
        }
        let deadline = tokio::time::Instant::from_std(started + wait_max);
        let room = conn.input.len() < INPUT_WHILE_WAITING_BYTES_MAX;
        if room {
            conn.input.reserve(READ_CHUNK_BYTES);
        }
        tokio::select! {
            _ = handle.kill_signal.notified() => break Flow::Close,
            _ = waker.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                conn.locks.release(server);
                conn.locks.refused = Some(AbortCause::Timeout);
                break Flow::More;
            }
            read = stream.read_buf(&mut conn.input), if room => match read {
                Ok(0) | Err(_) => break Flow::Close,
                Ok(read) => count_input(server, read),
            },
        }
    };
    handle.snapshot.lock().blocked = false;
    flow
}

/// CLIENT LIST (and ACL DELUSER's closing of a deleted user's connections) see whom it authenticated as.
fn show_user(handle: &ClientHandle, login: &mut auth::McSession) {
    if std::mem::take(&mut login.user_changed) {
        if let Some(user) = &login.user {
            handle.snapshot.lock().user = user.clone();
        }
    }
}

fn count_input(server: &Server, bytes: usize) {
    let bytes = bytes as u64;
    server
        .stats
        .net_input_bytes
        .fetch_add(bytes, Ordering::Relaxed);
    server
        .memcache
        .bytes_read
        .fetch_add(bytes, Ordering::Relaxed);
}

/// Drops what remains of an oversized value the parser already rejected.
fn discard_skipped(conn: &mut Conn) {
    let discard = conn.skip_bytes.min(conn.input.len());
    conn.input.drain(..discard);
    conn.skip_bytes -= discard;
}

/// Writes the batch's replies. A client that does not read them holds them, counted toward
/// maxmemory-clients, and is closed when killed (CLIENT KILL, eviction) or when they stay over the normal
/// class's soft limit for its seconds (requests are not executed meanwhile, so the output cannot grow).
async fn write_out<S: AsyncWrite + Unpin>(
    server: &Server,
    stream: &mut S,
    handle: &ClientHandle,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let bytes = out.len() as u64;
    let large = bytes >= crate::clients::memory::REPORT_MIN_BYTES;
    if large {
        crate::clients::memory::report_buffers(
            &server.clients,
            &server.clients_memory,
            handle,
            bytes,
            0,
        );
    }
    let soft = server.clients_memory.limits().normal;
    let soft_wait = (large && soft.soft_bytes > 0 && bytes >= soft.soft_bytes)
        .then(|| Duration::from_secs(soft.soft_seconds) + Duration::from_millis(1));
    tokio::select! {
        biased;
        written = stream.write_all(out) => written?,
        _ = handle.kill_signal.notified() => return Err(std::io::Error::other("client killed")),
        _ = sleep_or_forever(soft_wait) => {
            let breach = crate::clients::memory::Breach::Soft;
            server.clients_memory.close_for_output(handle, breach, bytes);
            return Err(std::io::Error::other("output buffer soft limit"));
        }
    }
    if large {
        crate::clients::memory::report_buffers(
            &server.clients,
            &server.clients_memory,
            handle,
            0,
            0,
        );
    }
    server
        .stats
        .net_output_bytes
        .fetch_add(bytes, Ordering::Relaxed);
    server
        .memcache
        .bytes_written
        .fetch_add(bytes, Ordering::Relaxed);
    out.clear();
    if out.capacity() > 4 * OUTPUT_FLUSH_BYTES {
        out.shrink_to(OUTPUT_FLUSH_BYTES);
    }
    Ok(())
}

/// Executes every complete request in the input, then drops the consumed bytes. A request that waits for a
/// transaction's lock stays in the input, its partial replies dropped, and is executed again later; so
/// does one whose values are on tier 2, before it runs (`Flow::Tier2Read`: they are read ahead).
fn process_input(server: &Arc<Server>, conn: &mut Conn) -> Flow {
    let mut start = 0;
    let mut flow = Flow::Read;
    let mut exec = Exec {
        server,
        out: &mut conn.out,
        value_len_max: conn.limits.codec.value_len_max,
        db: conn.limits.tenant.address(items::DB_INDEX),
        close: false,
        locks: &mut conn.locks,
        login: &mut conn.login,
    };
    while conn.skip_bytes == 0 && start < conn.input.len() {
        let pending = &conn.input[start..];
        match parse(pending, &conn.limits.codec) {
            Parsed::Incomplete => {
                if pending.len() > conn.limits.partial_request_bytes_max {
                    static LOG: crate::log_limit::RateLimited =
                        crate::log_limit::RateLimited::new(std::time::Duration::from_secs(10));
                    if let Some(suppressed) = LOG.check() {
                        tracing::warn!(
                            "memcached request buffer limit reached, closing{}",
                            crate::log_limit::repeated(suppressed)
                        );
                    }
                    flow = Flow::Close;
                }
                break;
            }
            Parsed::Request { request, consumed } => {
                if server.scripts.any_running() && scripts_hold_shards(server) {
                    // It stays in the input and runs once no script holds shards.
                    flow = Flow::ScriptWait;
                    break;
                }
                if !conn.tier2_read_ahead_done {
                    let faults = read_ahead::faults(&exec, &request);
                    if !faults.is_empty() {
                        conn.tier2_faults = faults;
                        flow = Flow::Tier2Read;
                        break;
                    }
                }
                if !execute_claiming(&mut exec, request) {
                    // Still read ahead when it runs after the wait.
                    flow = Flow::WaitLock;
                    break;
                }
                conn.tier2_read_ahead_done = false;
                start += consumed;
                server
                    .stats
                    .commands_processed
                    .fetch_add(1, Ordering::Relaxed);
            }
            Parsed::Error { error, consumed } => {
                server.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                error.encode(exec.out);
                let Some(consumed) = consumed else {
                    flow = Flow::Close;
                    break;
                };
                // An oversized value may still be on its way: skip it as it arrives.
                conn.skip_bytes = consumed.saturating_sub(pending.len());
                start += consumed.min(pending.len());
            }
        }
        if exec.close {
            flow = Flow::Close;
            break;
        }
        if exec.out.len() > OUTPUT_FLUSH_BYTES {
            flow = Flow::More;
            break;
        }
    }
    conn.input.drain(..start);
    // Client-side caching: RESP readers of the keys these commands changed are told.
    crate::command::tracking::invalidate_unattributed(server);
    if flow == Flow::More && conn.input.is_empty() {
        flow = Flow::Read;
    }
    flow
}

/// Executes one request, or answers it with the refusal its lock wait ended in. False when it waits for
/// a transaction's lock: it wrote nothing, and is executed again once granted.
fn execute_claiming(exec: &mut Exec, request: McRequest) -> bool {
    let error_to = ErrorTo::of(&request);
    if let Some(cause) = exec.locks.refused.take() {
        error_to.refuse(exec.out, cause);
        return true;
    }
    let replies_before = exec.out.len();
    execute(exec, request);
    match exec.locks.blocked.take() {
        None => {
            exec.locks.release(exec.server);
            true
        }
        Some(Blocked::Wait) => {
            exec.out.truncate(replies_before);
            false
        }
        Some(Blocked::Refused(cause)) => {
            exec.out.truncate(replies_before);
            error_to.refuse(exec.out, cause);
            true
        }
    }
}

/// How to answer a request with an error: a binary response echoes its opcode and opaque.
enum ErrorTo {
    Text,
    Binary { opcode: u8, opaque: u32 },
}

impl ErrorTo {
    fn of(request: &McRequest) -> ErrorTo {
        match request {
            McRequest::Binary(request) => ErrorTo::Binary {
                opcode: request.opcode,
                opaque: request.opaque,
            },
            _ => ErrorTo::Text,
        }
    }

    /// A request whose lock wait failed: SERVER_ERROR (text and meta) or "temporary failure" (binary).
    fn refuse(self, out: &mut Vec<u8>, cause: AbortCause) {
        let message = format!(
            "item locked by a transaction: {} ({}), retry",
            cause.name(),
            cause.detail()
        );
        match self {
            ErrorTo::Text => {
                out.extend_from_slice(b"SERVER_ERROR ");
                out.extend_from_slice(message.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            ErrorTo::Binary { opcode, opaque } => {
                let status = BinaryStatus::TemporaryFailure as u16;
                encode_binary_response(
                    out,
                    opcode,
                    status,
                    opaque,
                    0,
                    &[],
                    &[],
                    message.as_bytes(),
                );
            }
        }
    }
}

fn execute(exec: &mut Exec, request: McRequest) {
    let Some(request) = auth::admit(exec, request) else {
        return;
    };
    match request {
        McRequest::Binary(request) => binary::execute(exec, &request),
        McRequest::MetaGet { .. }
        | McRequest::MetaSet { .. }
        | McRequest::MetaDelete { .. }
        | McRequest::MetaArith { .. }
        | McRequest::MetaNoop
        | McRequest::MetaDebug { .. } => {
            bump(&exec.server.memcache.cmd_meta);
            meta::execute(exec, request)
        }
        request => text::execute(exec, request),
    }
}
