//! The RESP connection loop: read, parse every complete request in the buffer, execute, write the batch of
//! replies. Pipelined requests are answered with one write. Pub/sub messages, CLIENT KILL and blocking
//! commands (BLPOP...) are handled here, between batches.
use crate::command;
use crate::connection::{BlockRequest, ConnState, TimeoutReply};
use crate::pubsub::PubSubMessage;
use crate::server::{ClientHandle, Server};
use fallow_proto::resp::{parse_request, Parsed, RespLimits};
use fallow_proto::ReplyWriter;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Receiver;

/// Replies buffered before the connection stops executing and writes them out (bounds output memory
/// for huge pipelines).
const OUTPUT_FLUSH_BYTES: usize = 1 << 20;
/// Bytes read per read call at least.
const READ_CHUNK_BYTES: usize = 16 << 10;

/// What the connection does after a batch.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    /// Wait for more input.
    Read,
    /// Output was flushed early; more complete requests may be buffered.
    More,
    Block,
    /// A lock request queued behind a transaction's lock.
    LockWait,
    Close,
}

/// Settings a connection caches; refreshed when CONFIG SET changes them.
struct Limits {
    generation: u64,
    resp: RespLimits,
    query_buffer_bytes_max: usize,
    idle_timeout: Option<Duration>,
}

impl Limits {
    fn load(server: &Server) -> Limits {
        let generation = server.config_generation.load(Ordering::Relaxed);
        let config = server.config.read();
        Limits {
            generation,
            resp: RespLimits {
                bulk_len_max: config.proto_max_bulk_len as usize,
                ..RespLimits::default()
            },
            query_buffer_bytes_max: config.client_query_buffer_limit as usize,
            idle_timeout: (config.timeout > 0).then(|| Duration::from_secs(config.timeout)),
        }
    }

    fn refresh(&mut self, server: &Server) {
        if server.config_generation.load(Ordering::Relaxed) != self.generation {
            *self = Limits::load(server);
        }
    }
}

pub async fn serve<S>(server: Arc<Server>, mut stream: S, handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let queue_max = server.config.read().pubsub_queue_messages_max.max(1);
    let (sender, mut receiver) = tokio::sync::mpsc::channel(queue_max);
    let authenticated = !server.acl.read().default_user_requires_auth();
    let mut conn = ConnState::new(handle.clone(), authenticated, sender);
    let mut out = ReplyWriter::new(false);
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut limits = Limits::load(&server);
    let result = connection_loop(
        &server,
        &mut stream,
        &mut conn,
        &mut out,
        &mut input,
        &mut receiver,
        &mut limits,
    )
    .await;
    if let Err(error) = result {
        tracing::debug!(client = handle.id, %error, "connection ended with an error");
    }
    crate::txn::session::disconnect(&server, &mut conn);
    let _ = stream.shutdown().await;
}

#[allow(clippy::too_many_arguments)]
async fn connection_loop<S>(
    server: &Server,
    stream: &mut S,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    receiver: &mut Receiver<PubSubMessage>,
    limits: &mut Limits,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handle = conn.handle.clone();
    let mut flow = Flow::Read;
    loop {
        if handle.is_killed() {
            return Ok(());
        }
        if flow == Flow::More {
            flow = process_input(server, conn, out, input, limits);
        } else {
            input.reserve(READ_CHUNK_BYTES);
            let idle = limits
                .idle_timeout
                .filter(|_| conn.subscription_count() == 0);
            tokio::select! {
                biased;
                _ = handle.kill_signal.notified() => return Ok(()),
                Some(message) = receiver.recv() => {
                    encode_message(out, &message);
                    while let Ok(message) = receiver.try_recv() {
                        encode_message(out, &message);
                        if out.buf.len() > OUTPUT_FLUSH_BYTES { break; }
                    }
                }
                read = stream.read_buf(input) => {
                    let read = read?;
                    if read == 0 {
                        return Ok(());
                    }
                    server.stats.net_input_bytes.fetch_add(read as u64, Ordering::Relaxed);
                    *handle.last_active.lock() = std::time::Instant::now();
                    limits.refresh(server);
                    flow = process_input(server, conn, out, input, limits);
                }
                _ = sleep_or_forever(idle) => return Ok(()),
            }
        }
        write_out(server, stream, out).await?;
        match flow {
            Flow::Close => return Ok(()),
            Flow::Block | Flow::LockWait => {
                flow = if flow == Flow::Block {
                    wait_blocked(server, stream, conn, out, input, limits).await?
                } else {
                    wait_lock(server, stream, conn, out, input, limits).await?
                };
                write_out(server, stream, out).await?;
                if flow == Flow::Close {
                    return Ok(());
                }
                // Requests that arrived while blocked are waiting in the buffer.
                flow = Flow::More;
            }
            Flow::Read | Flow::More => {}
        }
    }
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

async fn write_out<S: AsyncWrite + Unpin>(
    server: &Server,
    stream: &mut S,
    out: &mut ReplyWriter,
) -> std::io::Result<()> {
    if out.buf.is_empty() {
        return Ok(());
    }
    stream.write_all(&out.buf).await?;
    server
        .stats
        .net_output_bytes
        .fetch_add(out.buf.len() as u64, Ordering::Relaxed);
    out.buf.clear();
    if out.buf.capacity() > 4 * OUTPUT_FLUSH_BYTES {
        out.buf.shrink_to(OUTPUT_FLUSH_BYTES);
    }
    Ok(())
}

/// Executes every complete request in `input`, then drops the consumed bytes.
fn process_input(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    limits: &Limits,
) -> Flow {
    let mut ranges = Vec::new();
    let mut args: Vec<&[u8]> = Vec::with_capacity(8);
    let mut start = 0;
    let mut flow = Flow::Read;
    conn.now_ms = fallow_store::now_ms();
    conn.refresh_tenant(server);
    while start < input.len() {
        let pending = &input[start..];
        match parse_request(pending, &limits.resp, &mut ranges) {
            Parsed::Incomplete { bytes_needed_min } => {
                if pending.len().max(bytes_needed_min) > limits.query_buffer_bytes_max {
                    tracing::warn!(client = conn.id(), "query buffer limit reached, closing");
                    flow = Flow::Close;
                }
                break;
            }
            Parsed::Empty { consumed } => start += consumed,
            Parsed::Error(message) => {
                server.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                out.error(&format!("ERR {message}"));
                flow = Flow::Close;
                break;
            }
            Parsed::Multibulk { consumed } => {
                args.clear();
                args.extend(ranges.iter().map(|range| &pending[range.clone()]));
                command::execute(server, conn, out, &args);
                if conn.block.is_some() || conn.lock_wait.is_some() {
                    remember_blocked_command(conn, &args);
                }
                start += consumed;
            }
            Parsed::Inline {
                consumed,
                args: owned,
            } => {
                let inline: Vec<&[u8]> = owned.iter().map(|arg| arg.as_slice()).collect();
                command::execute(server, conn, out, &inline);
                if conn.block.is_some() || conn.lock_wait.is_some() {
                    remember_blocked_command(conn, &inline);
                }
                start += consumed;
            }
        }
        if conn.block.is_some() {
            flow = Flow::Block;
            break;
        }
        if conn.lock_wait.is_some() {
            flow = Flow::LockWait;
            break;
        }
        if conn.close_after_reply {
            flow = Flow::Close;
            break;
        }
        if out.buf.len() > OUTPUT_FLUSH_BYTES {
            flow = Flow::More;
            break;
        }
    }
    input.drain(..start);
    if flow == Flow::More && input.is_empty() {
        flow = Flow::Read;
    }
    conn.flush_command_stats(server);
    conn.update_snapshot();
    flow
}

/// The blocked command is re-run on wake-up, so keep an owned copy of it.
fn remember_blocked_command(conn: &mut ConnState, args: &[&[u8]]) {
    conn.blocked_args = args.iter().map(|arg| arg.to_vec()).collect();
}

/// Waits until a blocked command can be served, times out, or the client goes away.
async fn wait_blocked<S>(
    server: &Server,
    stream: &mut S,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    limits: &Limits,
) -> std::io::Result<Flow>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request: BlockRequest = conn.block.take().expect("blocked");
    let args_owned = std::mem::take(&mut conn.blocked_args);
    let args: Vec<&[u8]> = args_owned.iter().map(|arg| arg.as_slice()).collect();
    let notify = Arc::new(tokio::sync::Notify::new());
    let db = conn.address();
    for key in &request.keys {
        server
            .store
            .lock(server.store.shard_index(key))
            .add_waiter(db, key, notify.clone());
    }
    conn.handle.snapshot.lock().blocked = true;
    let deadline = (request.timeout_ms > 0)
        .then(|| tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms));
    let handle = conn.handle.clone();
    let flow = loop {
        // Registered before retrying, so a push between the retry and the wait is not missed.
        conn.now_ms = fallow_store::now_ms();
        command::execute(server, conn, out, &args);
        conn.flush_command_stats(server);
        if conn.block.take().is_none() {
            break Flow::More;
        }
        tokio::select! {
            _ = notify.notified() => continue,
            _ = sleep_until_or_forever(deadline) => {
                match request.timeout_reply {
                    TimeoutReply::NullArray => out.nil_array(),
                    TimeoutReply::NullBulk => out.nil(),
                }
                break Flow::More;
            }
            _ = handle.kill_signal.notified() => break Flow::Close,
            read = stream.read_buf(input) => {
                if !keep_reading_while_waiting(server, read, input, limits) {
                    break Flow::Close;
                }
            }
        }
    };
    for key in &request.keys {
        server
            .store
            .lock(server.store.shard_index(key))
            .remove_waiter(db, key, &notify);
    }
    conn.handle.snapshot.lock().blocked = false;
    Ok(flow)
}

/// Waits until the queued lock request is granted (then re-runs the command, which may queue again for
/// its next record), the wait passes `txn-lock-wait-ms`, or the client goes away.
async fn wait_lock<S>(
    server: &Server,
    stream: &mut S,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    limits: &Limits,
) -> std::io::Result<Flow>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let args_owned = std::mem::take(&mut conn.blocked_args);
    let args: Vec<&[u8]> = args_owned.iter().map(|arg| arg.as_slice()).collect();
    let handle = conn.handle.clone();
    let waker = conn.lock_waker.clone();
    let wait_max = Duration::from_millis(server.config.read().txn_lock_wait_ms);
    conn.handle.snapshot.lock().blocked = true;
    let flow = loop {
        let Some(wait) = conn.lock_wait.as_ref() else {
            break Flow::More;
        };
        let started = wait.started;
        if crate::txn::session::end_granted_wait(server, &mut conn.lock_wait) {
            conn.now_ms = fallow_store::now_ms();
            command::execute(server, conn, out, &args);
            conn.flush_command_stats(server);
            continue;
        }
        let deadline = tokio::time::Instant::from_std(started + wait_max);
        tokio::select! {
            _ = waker.notified() => continue,
            _ = tokio::time::sleep_until(deadline) => {
                crate::txn::session::wait_timed_out(server, conn, out);
                break Flow::More;
            }
            _ = handle.kill_signal.notified() => break Flow::Close,
            read = stream.read_buf(input) => {
                if !keep_reading_while_waiting(server, read, input, limits) {
                    break Flow::Close;
                }
            }
        }
    };
    conn.handle.snapshot.lock().blocked = false;
    Ok(flow)
}

/// Input that arrives while a command waits (blocked pop, lock wait) stays buffered for later; false when
/// the client went away or passed the query buffer limit.
fn keep_reading_while_waiting(
    server: &Server,
    read: std::io::Result<usize>,
    input: &[u8],
    limits: &Limits,
) -> bool {
    match read {
        Ok(0) | Err(_) => false,
        Ok(read) => {
            server
                .stats
                .net_input_bytes
                .fetch_add(read as u64, Ordering::Relaxed);
            input.len() <= limits.query_buffer_bytes_max
        }
    }
}

async fn sleep_until_or_forever(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Encodes a pub/sub message as a push (RESP3) or array (RESP2).
pub fn encode_message(out: &mut ReplyWriter, message: &PubSubMessage) {
    match message {
        PubSubMessage::Message { channel, payload } => {
            out.push_len(3);
            out.bulk(b"message");
            out.bulk(channel);
            out.bulk(payload);
        }
        PubSubMessage::PatternMessage {
            pattern,
            channel,
            payload,
        } => {
            out.push_len(4);
            out.bulk(b"pmessage");
            out.bulk(pattern);
            out.bulk(channel);
            out.bulk(payload);
        }
    }
}
