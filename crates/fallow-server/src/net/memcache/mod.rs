//! The memcached connection loop: read, execute every complete request in the buffer (text, meta or
//! binary, detected per request), write the batch of replies at once. Execution lives in `text`,
//! `meta` and `binary`; item semantics shared by the three in `items`; counters and reports in `stats`.
mod binary;
mod items;
mod meta;
mod stats;
mod text;

pub use stats::McStats;

use crate::server::{ClientHandle, Server};
use crate::tenants::TenantBinding;
use fallow_proto::memcache::{parse, McLimits, McRequest, Parsed};
use stats::bump;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What `version` reports: the memcached release whose behaviour fallow follows.
pub const VERSION: &str = "1.6.18-fallow";
/// Replies buffered before execution pauses to write them (bounds output memory for huge pipelines).
const OUTPUT_FLUSH_BYTES: usize = 1 << 20;
/// Bytes read per read call at least.
const READ_CHUNK_BYTES: usize = 16 << 10;
/// Room for a request's line, key and headers on top of its value when bounding a partial request
/// (a multi-key get line may be ~260 KB).
const PARTIAL_REQUEST_OVERHEAD_BYTES: usize = 512 << 10;
/// Reply to a write that cannot be made room for under maxmemory.
pub(crate) const OOM_REPLY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

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
        let value_len_max = config.memcache_item_size_max as usize;
        Limits {
            generation,
            codec: McLimits {
                value_len_max,
                ..McLimits::default()
            },
            partial_request_bytes_max: value_len_max.saturating_add(PARTIAL_REQUEST_OVERHEAD_BYTES),
            tenant: TenantBinding::resolve(server, &config.memcache_tenant),
        }
    }

    fn refresh(&mut self, server: &Server) {
        if server.config_generation.load(Ordering::Relaxed) != self.generation
            || self.tenant.is_stale(server)
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
}

/// Per-connection buffers.
struct Conn {
    input: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of a rejected oversized value still to arrive and be discarded.
    skip_bytes: usize,
    limits: Limits,
}

/// What the connection does after a batch.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Read,
    /// Output was flushed early; more complete requests may be buffered.
    More,
    Close,
}

pub async fn serve<S>(server: Arc<Server>, mut stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    bump(&server.memcache.total_connections);
    let mut conn = Conn {
        input: Vec::with_capacity(READ_CHUNK_BYTES),
        out: Vec::new(),
        skip_bytes: 0,
        limits: Limits::load(&server),
    };
    if let Err(error) = connection_loop(&server, &mut stream, &handle, &mut conn).await {
        tracing::debug!(client = handle.id, %error, "connection ended with an error");
    }
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
    loop {
        if handle.is_killed() {
            return Ok(());
        }
        if flow == Flow::More {
            flow = process_input(server, conn);
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
                }
            }
        }
        write_out(server, stream, &mut conn.out).await?;
        if flow == Flow::Close {
            return Ok(());
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

async fn write_out<S: AsyncWrite + Unpin>(
    server: &Server,
    stream: &mut S,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    stream.write_all(out).await?;
    let bytes = out.len() as u64;
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

/// Executes every complete request in the input, then drops the consumed bytes.
fn process_input(server: &Arc<Server>, conn: &mut Conn) -> Flow {
    let mut start = 0;
    let mut flow = Flow::Read;
    let mut exec = Exec {
        server,
        out: &mut conn.out,
        value_len_max: conn.limits.codec.value_len_max,
        db: conn.limits.tenant.address(items::DB_INDEX),
        close: false,
    };
    while conn.skip_bytes == 0 && start < conn.input.len() {
        let pending = &conn.input[start..];
        match parse(pending, &conn.limits.codec) {
            Parsed::Incomplete => {
                if pending.len() > conn.limits.partial_request_bytes_max {
                    tracing::warn!("memcached request buffer limit reached, closing");
                    flow = Flow::Close;
                }
                break;
            }
            Parsed::Request { request, consumed } => {
                start += consumed;
                server
                    .stats
                    .commands_processed
                    .fetch_add(1, Ordering::Relaxed);
                execute(&mut exec, request);
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
    if flow == Flow::More && conn.input.is_empty() {
        flow = Flow::Read;
    }
    flow
}

fn execute(exec: &mut Exec, request: McRequest) {
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
