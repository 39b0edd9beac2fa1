//! The RESP connection loop: read, parse every complete request in the buffer, execute, write the batch of
//! replies. Pipelined requests are answered with one write. Pub/sub messages, CLIENT KILL and blocking
//! commands (BLPOP...) are handled here, between batches.
use crate::clients::memory::{self as client_memory, ClassLimit};
use crate::clients::ClientHandle;
use crate::command;
use crate::connection::{BlockRequest, ConnState, TimeoutReply, Transport};
use crate::net::{sleep_or_forever, wait_reply_delay};
use crate::pubsub::PubSubMessage;
use crate::server::Server;
use fallow_proto::resp::{parse_request, Parsed, RespLimits};
use fallow_proto::ReplyWriter;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Receiver;

/// Replies buffered before the connection writes them out. While a write waits for a slow reader more
/// batches may follow; what they add is bounded by `client-output-buffer-limit` (see `flush`).
const OUTPUT_FLUSH_BYTES: usize = 1 << 20;
/// How often a subscriber whose output waits for the socket checks its limits again (its queue grows
/// behind its back).
const PUBSUB_RECHECK_MS: u64 = 200;
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
    /// The next command's values are on tier 2: read them ahead, then run it.
    Tier2Read,
    /// The next command needs shards a running script holds: it runs again once a script ends.
    ScriptWait,
    /// SHM.OPEN ran: once the replies before it are written, the connection moves onto a channel.
    HandOver,
    Close,
}

/// Why a connection loop returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    Closed,
    /// SHM.OPEN asked for a channel (`ConnState::shm_open`); the session goes on over it.
    ShmOpen,
}

/// A RESP connection's state between the transports it may move across (a Unix socket, then a
/// shared-memory channel): the connection's own state, its pub/sub queue and its buffers.
pub struct Session {
    pub conn: ConnState,
    receiver: Receiver<PubSubMessage>,
    out: ReplyWriter,
    /// Received bytes not yet executed (requests pipelined after SHM.OPEN run on the channel).
    input: Vec<u8>,
    limits: Limits,
}

impl Session {
    pub fn new(server: &Server, handle: Arc<ClientHandle>, transport: Transport) -> Session {
        let queue_max = server.config.read().pubsub_queue_messages_max.max(1);
        let (sender, receiver) = tokio::sync::mpsc::channel(queue_max);
        let authenticated = !server.acl.read().default_user_requires_auth();
        server.tracking.register(&handle, &sender);
        let mut conn = ConnState::new(handle, authenticated, sender);
        conn.transport = transport;
        let limits = Limits::load(server);
        conn.output_limits = limits.output;
        Session {
            conn,
            receiver,
            out: ReplyWriter::new(false),
            input: Vec::with_capacity(READ_CHUNK_BYTES),
            limits,
        }
    }

    /// Runs the connection over `stream` until it closes or asks to move (SHM.OPEN).
    pub async fn run<S>(&mut self, server: &Server, stream: &mut S) -> Exit
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let result = connection_loop(
            server,
            stream,
            &mut self.conn,
            &mut self.out,
            &mut self.input,
            &mut self.receiver,
            &mut self.limits,
        )
        .await;
        match result {
            Ok(exit) => exit,
            Err(error) => {
                tracing::debug!(client = self.conn.id(), %error, "connection ended with an error");
                Exit::Closed
            }
        }
    }

    /// The connection is over: its transaction is aborted and the stream shut down.
    pub async fn end<S>(mut self, server: &Server, stream: &mut S)
    where
        S: AsyncWrite + Unpin,
    {
        crate::command::dispatch::txn::disconnect(server, &mut self.conn);
        let _ = stream.shutdown().await;
    }
}

/// Settings a connection caches; refreshed when CONFIG SET changes them.
struct Limits {
    generation: u64,
    resp: RespLimits,
    query_buffer_bytes_max: usize,
    idle_timeout: Option<Duration>,
    output: client_memory::OutputBufferLimits,
}

impl Limits {
    fn load(server: &Server) -> Limits {
        let generation = server.config_generation.load(Ordering::Relaxed);
        let config = server.config.read();
        Limits {
            generation,
            resp: RespLimits {
                bulk_len_max: config.proto_max_bulk_len_bytes as usize,
                ..RespLimits::default()
            },
            query_buffer_bytes_max: config.client_query_buffer_limit_bytes as usize,
            idle_timeout: (config.timeout_s > 0).then(|| Duration::from_secs(config.timeout_s)),
            output: config.client_output_buffer_limit,
        }
    }

    /// Reloads the settings if CONFIG SET changed any, and hands the output limits to the connection
    /// (commands size their replies against them).
    fn refresh(&mut self, server: &Server, conn: &mut ConnState) {
        if server.config_generation.load(Ordering::Relaxed) != self.generation {
            *self = Limits::load(server);
            conn.output_limits = self.output;
        }
    }
}

/// Serves a RESP connection over a transport that cannot move (TCP, vsock): SHM.OPEN is refused there.
pub async fn serve<S>(
    server: Arc<Server>,
    mut stream: S,
    handle: Arc<ClientHandle>,
    transport: Transport,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut session = Session::new(&server, handle, transport);
    let exit = session.run(&server, &mut stream).await;
    debug_assert_eq!(
        exit,
        Exit::Closed,
        "SHM.OPEN is answered only on Unix sockets"
    );
    session.end(&server, &mut stream).await;
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
) -> std::io::Result<Exit>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handle = conn.handle.clone();
    // Requests pipelined behind SHM.OPEN (or behind a refused one) are waiting in the buffer.
    let mut flow = if input.is_empty() {
        Flow::Read
    } else {
        Flow::More
    };
    loop {
        if handle.is_killed() {
            return Ok(Exit::Closed);
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
                _ = handle.kill_signal.notified() => return Ok(Exit::Closed),
                Some(message) = receiver.recv() => take_messages(server, &handle, out, message, receiver),
                read = stream.read_buf(input) => {
                    let read = read?;
                    if read == 0 {
                        return Ok(Exit::Closed);
                    }
                    server.stats.net_input_bytes.fetch_add(read as u64, Ordering::Relaxed);
                    *handle.last_active.lock() = std::time::Instant::now();
                    limits.refresh(server, conn);
                    flow = process_input(server, conn, out, input, limits);
                }
                _ = sleep_or_forever(idle) => return Ok(Exit::Closed),
            }
        }
        if !wait_reply_delay(&handle, &mut conn.reply_not_before).await {
            return Ok(Exit::Closed);
        }
        flow = flush(server, stream, conn, out, input, limits, flow).await?;
        match flow {
            Flow::Close => return Ok(Exit::Closed),
            Flow::HandOver => return Ok(Exit::ShmOpen),
            Flow::Block | Flow::LockWait => {
                flow = if flow == Flow::Block {
                    wait_blocked(server, stream, conn, out, input, limits).await?
                } else {
                    wait_lock(server, stream, conn, out, input, limits).await?
                };
                if flush(server, stream, conn, out, input, limits, Flow::Block).await?
                    == Flow::Close
                {
                    return Ok(Exit::Closed);
                }
                if flow == Flow::Close {
                    return Ok(Exit::Closed);
                }
                // Requests that arrived while blocked are waiting in the buffer.
                flow = Flow::More;
            }
            Flow::ScriptWait => {
                if !wait_for_scripts(server, &handle).await {
                    return Ok(Exit::Closed);
                }
                flow = Flow::More;
            }
            Flow::Tier2Read => {
                let faults = std::mem::take(&mut conn.tier2_faults);
                command::dispatch::tier2::read_ahead(server, faults).await;
                conn.tier2_read_ahead_done = true;
                flow = Flow::More;
            }
            Flow::Read | Flow::More => {}
        }
    }
}

/// Encodes queued pub/sub messages into the output (moving their bytes from the queue's count to the
/// output's), up to about `OUTPUT_FLUSH_BYTES` at a time.
fn take_messages(
    server: &Server,
    handle: &ClientHandle,
    out: &mut ReplyWriter,
    first: PubSubMessage,
    receiver: &mut Receiver<PubSubMessage>,
) {
    let mut taken_bytes = first.queued_bytes();
    encode_message(out, &first);
    while out.buf.len() <= OUTPUT_FLUSH_BYTES {
        let Ok(message) = receiver.try_recv() else {
            break;
        };
        taken_bytes += message.queued_bytes();
        encode_message(out, &message);
    }
    handle
        .memory
        .pubsub_bytes
        .fetch_sub(taken_bytes, Ordering::Relaxed);
    server.clients_memory.shrink(taken_bytes);
}

/// What happened while the output was waiting for the socket.
enum Event {
    Wrote(usize),
    Read(usize),
    /// Complete requests are buffered and may run now.
    Execute,
    Killed,
    /// Time to check the limits again (the soft-limit time may have passed, a pub/sub queue grown).
    Recheck,
}

/// Writes the replies in `out`. While the socket takes them this is plain writing. While it does not (the
/// client reads slowly, or sends a whole pipeline before reading any reply), the connection goes on
/// reading and executing requests when `flow` allows it, as Redis does, so a client writing a long
/// pipeline is never deadlocked against its own replies. Pub/sub messages stay in their queue meanwhile
/// (their payloads shared with the other subscribers; they count toward the limits all the same). The
/// growing output is held to the client's `client-output-buffer-limit`: past the hard limit, or past the
/// soft limit for its seconds, the client is closed. Returns the flow after the requests it executed.
#[allow(clippy::too_many_arguments)]
async fn flush<S>(
    server: &Server,
    stream: &mut S,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    limits: &mut Limits,
    mut flow: Flow,
) -> std::io::Result<Flow>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let handle = conn.handle.clone();
    conn.durable_lsn_wanted = conn
        .durable_lsn_wanted
        .max(fallow_store::shard::take_thread_lsn());
    if !await_durability(server, conn).await {
        return Ok(Flow::Close);
    }
    let mut written = 0;
    if !out.buf.is_empty() {
        // Most of the time the socket takes the whole batch at once.
        written = write_now(stream, &out.buf)?;
    }
    if written < out.buf.len() {
        let mut pending = PendingOutput::new(out.buf.len(), conn.output_limit());
        let killed = handle.kill_signal.notified();
        let soft_timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(killed, soft_timer);
        while written < out.buf.len() {
            let unwritten = out.buf.len() - written;
            if pending.over_limits(server, conn, unwritten, input.len(), &mut soft_timer) {
                return Ok(Flow::Close);
            }
            let may_execute = flow == Flow::More && conn.reply_not_before.is_none();
            // Reading on while the next command waits for tier 2 keeps a client that writes a whole
            // pipeline before reading from deadlocking against its replies (the command is re-checked).
            let may_read = matches!(flow, Flow::Read | Flow::Tier2Read)
                && conn.reply_not_before.is_none()
                && input.len() <= limits.query_buffer_bytes_max;
            let event = std::future::poll_fn(|cx| {
                poll_pending_output(
                    cx,
                    stream,
                    &out.buf[written..],
                    input,
                    killed.as_mut(),
                    pending.recheck_at.map(|_| soft_timer.as_mut()),
                    may_execute,
                    may_read,
                )
            })
            .await?;
            match event {
                Event::Wrote(bytes) => written += bytes,
                Event::Killed => return Ok(Flow::Close),
                // The client finished sending; it may still read what it is owed.
                Event::Read(0) => flow = Flow::Close,
                Event::Read(bytes) => {
                    server
                        .stats
                        .net_input_bytes
                        .fetch_add(bytes as u64, Ordering::Relaxed);
                    *handle.last_active.lock() = std::time::Instant::now();
                    limits.refresh(server, conn);
                    flow = process_input(server, conn, out, input, limits);
                }
                Event::Execute => flow = process_input(server, conn, out, input, limits),
                Event::Recheck => pending.recheck_at = None,
            }
            if !await_durability(server, conn).await {
                return Ok(Flow::Close);
            }
            if written >= OUTPUT_FLUSH_BYTES && written * 2 >= out.buf.len() {
                // Drop what was written so the buffer does not keep growing at its front.
                out.buf.drain(..written);
                pending.count_written(server, written);
                written = 0;
            }
        }
        pending.count_written(server, written);
        written = 0;
    }
    finish_write(server, conn, out, input.len(), written);
    // A reply executed above may be a slowed failed authentication: nothing more runs before its time.
    if !wait_reply_delay(&handle, &mut conn.reply_not_before).await {
        return Ok(Flow::Close);
    }
    Ok(flow)
}

/// Writes what the socket takes without waiting (a poll with a no-op waker: nothing is registered that
/// the slow path would not register again).
fn write_now<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) -> std::io::Result<usize> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(stream).poll_write(&mut cx, bytes) {
        std::task::Poll::Ready(Ok(0)) => Err(std::io::ErrorKind::WriteZero.into()),
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Ok(0),
    }
}

/// Empties `out` after it was written and reports the client's buffers.
fn finish_write(
    server: &Server,
    conn: &ConnState,
    out: &mut ReplyWriter,
    input_bytes: usize,
    written: usize,
) {
    if written > 0 {
        server
            .stats
            .net_output_bytes
            .fetch_add(written as u64, Ordering::Relaxed);
    }
    out.buf.clear();
    if out.buf.capacity() > 4 * OUTPUT_FLUSH_BYTES {
        out.buf.shrink_to(OUTPUT_FLUSH_BYTES);
    }
    client_memory::report_buffers(
        &server.clients,
        &server.clients_memory,
        &conn.handle,
        0,
        input_bytes as u64,
    );
    let memory = &conn.handle.memory;
    if memory.soft_since_ms.load(Ordering::Relaxed) != 0 {
        // Written out: the soft-limit clock restarts, unless the queued messages alone keep it running.
        let queued = memory.pubsub_bytes.load(Ordering::Relaxed);
        if queued < conn.output_limit().soft_bytes {
            memory.soft_since_ms.store(0, Ordering::Relaxed);
        }
    }
}

/// A write waiting for the socket: what the output limits are checked against.
struct PendingOutput {
    /// Unwritten bytes of the batch built before the wait. When that batch alone passes the hard limit it
    /// holds a single large value (multi-value replies are sized and refused before they are built), which
    /// is never refused for its size: the hard limit then applies to what is added on top of it.
    batch_bytes: usize,
    limit: ClassLimit,
    /// When to check the limits again without another event (ms of `ClientsMemory::now_ms`).
    recheck_at: Option<u64>,
}

impl PendingOutput {
    fn new(batch_bytes: usize, limit: ClassLimit) -> PendingOutput {
        PendingOutput {
            batch_bytes,
            limit,
            recheck_at: None,
        }
    }

    fn count_written(&mut self, server: &Server, bytes: usize) {
        self.batch_bytes = self.batch_bytes.saturating_sub(bytes);
        server
            .stats
            .net_output_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Reports the buffers and checks the limits; true when the client is to be closed.
    fn over_limits(
        &mut self,
        server: &Server,
        conn: &ConnState,
        unwritten: usize,
        input_bytes: usize,
        soft_timer: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    ) -> bool {
        let handle = &conn.handle;
        client_memory::report_buffers(
            &server.clients,
            &server.clients_memory,
            handle,
            unwritten as u64,
            input_bytes as u64,
        );
        if handle.is_killed() {
            return true;
        }
        self.limit = conn.output_limit();
        let memory = &handle.memory;
        let output = unwritten as u64 + memory.pubsub_bytes.load(Ordering::Relaxed);
        let hard = self.limit.hard_bytes;
        let exempt = if hard > 0 && self.batch_bytes as u64 > hard {
            self.batch_bytes.min(unwritten) as u64
        } else {
            0
        };
        let now_ms = server.clients_memory.now_ms();
        let hard_checked = ClassLimit {
            hard_bytes: self.limit.hard_bytes.saturating_add(exempt),
            ..self.limit
        };
        if let Some(breach) =
            client_memory::check(hard_checked, output, &memory.soft_since_ms, now_ms)
        {
            server
                .clients_memory
                .close_for_output(handle, breach, output);
            return true;
        }
        // A subscriber's queue grows while its connection waits here, with nothing to wake it: look again
        // now and then, so the soft clock is seen to run out even when the publishing has stopped.
        let soft_deadline = client_memory::soft_deadline_ms(self.limit, &memory.soft_since_ms);
        let queue_recheck = (conn.subscription_count() > 0).then_some(now_ms + PUBSUB_RECHECK_MS);
        let recheck_at = match (soft_deadline, queue_recheck) {
            (Some(soft), Some(queue)) => Some(soft.min(queue)),
            (soft, queue) => soft.or(queue),
        };
        if recheck_at != self.recheck_at {
            self.recheck_at = recheck_at;
            if let Some(at) = recheck_at {
                let wait = Duration::from_millis(at.saturating_sub(now_ms));
                soft_timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + wait);
            }
        }
        false
    }
}

/// Polls what may happen while output waits for the socket, writing first.
#[allow(clippy::too_many_arguments)]
fn poll_pending_output<S>(
    cx: &mut std::task::Context<'_>,
    stream: &mut S,
    unwritten: &[u8],
    input: &mut Vec<u8>,
    killed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    soft_timer: Option<std::pin::Pin<&mut tokio::time::Sleep>>,
    may_execute: bool,
    may_read: bool,
) -> std::task::Poll<std::io::Result<Event>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use std::future::Future;
    use std::task::Poll;
    if killed.poll(cx).is_ready() {
        return Poll::Ready(Ok(Event::Killed));
    }
    match std::pin::Pin::new(&mut *stream).poll_write(cx, unwritten) {
        Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
        Poll::Ready(Ok(bytes)) => return Poll::Ready(Ok(Event::Wrote(bytes))),
        Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
        Poll::Pending => {}
    }
    if may_execute {
        return Poll::Ready(Ok(Event::Execute));
    }
    if may_read {
        let filled = input.len();
        input.resize(filled + READ_CHUNK_BYTES, 0);
        let mut buf = tokio::io::ReadBuf::new(&mut input[filled..]);
        let polled = std::pin::Pin::new(&mut *stream).poll_read(cx, &mut buf);
        let read = buf.filled().len();
        input.truncate(filled + read);
        match polled {
            Poll::Ready(Ok(())) => return Poll::Ready(Ok(Event::Read(read))),
            Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
            Poll::Pending => {}
        }
    }
    if let Some(timer) = soft_timer {
        if timer.poll(cx).is_ready() {
            return Poll::Ready(Ok(Event::Recheck));
        }
    }
    Poll::Pending
}

/// Executes every complete request in `input`, then drops the consumed bytes.
/// Runs the complete requests in `input` (see `execute_input`), noting the tier-2 lsn their persistent
/// writes reached (taken on this thread before any await can move the task).
fn process_input(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    input: &mut Vec<u8>,
    limits: &Limits,
) -> Flow {
    let flow = execute_input(server, conn, out, input, limits);
    conn.durable_lsn_wanted = conn
        .durable_lsn_wanted
        .max(fallow_store::shard::take_thread_lsn());
    flow
}

/// Under `tier2-fsync always`, waits until the persistent writes whose replies are in the output are
/// durable (group commit: one fdatasync covers every writer meanwhile). False when tier 2 failed first:
/// the connection closes without acknowledging them.
async fn await_durability(server: &Server, conn: &mut ConnState) -> bool {
    let wanted = std::mem::take(&mut conn.durable_lsn_wanted);
    let Some(durability) = server.durability.get() else {
        return true;
    };
    match durability.before_reply(wanted).await {
        Ok(()) => true,
        Err(error) => {
            tracing::error!(%error, client = conn.id(), "persistent writes could not be made durable; closing without acknowledging them");
            false
        }
    }
}

fn execute_input(
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
                    static LOG: crate::log_limit::RateLimited =
                        crate::log_limit::RateLimited::new(Duration::from_secs(10));
                    if let Some(suppressed) = LOG.check() {
                        tracing::warn!(
                            client = conn.id(),
                            "query buffer limit reached, closing{}",
                            crate::log_limit::repeated(suppressed)
                        );
                    }
                    flow = Flow::Close;
                }
                break;
            }
            Parsed::Empty { consumed } => start += consumed,
            Parsed::Error(message) => {
                server.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                let reply = format!("ERR {message}");
                server.stats.count_error(reply.as_bytes());
                out.error(&reply);
                flow = Flow::Close;
                break;
            }
            Parsed::Multibulk { consumed } => {
                args.clear();
                args.extend(ranges.iter().map(|range| &pending[range.clone()]));
                if !std::mem::take(&mut conn.tier2_read_ahead_done) {
                    let faults = command::dispatch::tier2::faults(server, conn, &args);
                    if !faults.is_empty() {
                        // The command stays in the input and runs once its values are in RAM.
                        conn.tier2_faults = faults;
                        flow = Flow::Tier2Read;
                        break;
                    }
                }
                command::dispatch::execute(server, conn, out, &args);
                if std::mem::take(&mut conn.wait_and_retry) {
                    // Not consumed: it runs again after the wait.
                    flow = Flow::ScriptWait;
                    break;
                }
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
                command::dispatch::execute(server, conn, out, &inline);
                if std::mem::take(&mut conn.wait_and_retry) {
                    flow = Flow::ScriptWait;
                    break;
                }
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
        if conn.shm_open.is_some() {
            flow = Flow::HandOver;
            break;
        }
        if conn.reply_not_before.is_some() || out.buf.len() > OUTPUT_FLUSH_BYTES {
            flow = Flow::More;
            break;
        }
    }
    input.drain(..start);
    command::tracking::after_batch(server, conn, out);
    if flow == Flow::More && input.is_empty() {
        flow = Flow::Read;
    }
    conn.flush_command_stats(server);
    conn.update_snapshot();
    flow
}

/// Waits, off the worker thread, until a script ends or a short tick passes (so a script turning busy
/// is noticed); false when the client is killed meanwhile.
async fn wait_for_scripts(server: &Server, handle: &crate::clients::ClientHandle) -> bool {
    tokio::select! {
        _ = server.scripts.wait_for_an_end() => true,
        _ = handle.kill_signal.notified() => false,
    }
}

/// The blocked command is re-run on wake-up, so keep an owned copy of it (or of the arguments it asked
/// to be re-run with).
fn remember_blocked_command(conn: &mut ConnState, args: &[&[u8]]) {
    let rewritten = conn
        .block
        .as_mut()
        .and_then(|request| request.retry_args.take());
    conn.blocked_args = rewritten.unwrap_or_else(|| args.iter().map(|arg| arg.to_vec()).collect());
}

/// A client blocked on keys, as the store's shards wake it: a `Notify` permit, so a push between the
/// command's retry and the wait is not lost. (A newtype: the orphan rule keeps fallow-server from
/// implementing fallow-store's trait for tokio's `Notify`.)
#[derive(Default)]
struct BlockedClient(tokio::sync::Notify);

impl fallow_store::Waiter for BlockedClient {
    fn wake(&self) {
        self.0.notify_one();
    }
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
    let client = Arc::new(BlockedClient::default());
    let waiter: Arc<dyn fallow_store::Waiter> = client.clone();
    let db = conn.address();
    for key in &request.keys {
        server
            .store
            .lock(server.store.shard_index(key))
            .add_waiter(db, key, waiter.clone());
    }
    conn.handle.snapshot.lock().blocked = true;
    let deadline = (request.timeout_ms > 0)
        .then(|| tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms));
    let handle = conn.handle.clone();
    conn.block_retry = true;
    handle.unblockable.store(true, Ordering::Release);
    let flow = loop {
        // Registered before retrying, so a push between the retry and the wait is not missed.
        conn.now_ms = fallow_store::now_ms();
        command::dispatch::execute(server, conn, out, &args);
        conn.flush_command_stats(server);
        if conn.block.take().is_none() {
            break Flow::More;
        }
        tokio::select! {
            _ = client.0.notified() => continue,
            _ = sleep_until_or_forever(deadline) => {
                write_timeout_reply(out, &request.timeout_reply);
                break Flow::More;
            }
            _ = handle.unblock_signal.notified() => {
                if handle.unblock_with_error.load(Ordering::Relaxed) {
                    out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
                } else {
                    write_timeout_reply(out, &request.timeout_reply);
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
    conn.block_retry = false;
    handle.unblockable.store(false, Ordering::Release);
    for key in &request.keys {
        server
            .store
            .lock(server.store.shard_index(key))
            .remove_waiter(db, key, &waiter);
    }
    conn.handle.snapshot.lock().blocked = false;
    Ok(flow)
}

/// What a blocking command answers when its timeout passes (or CLIENT UNBLOCK ends it as one).
fn write_timeout_reply(out: &mut ReplyWriter, reply: &TimeoutReply) {
    match reply {
        TimeoutReply::NullArray => out.nil_array(),
        TimeoutReply::NullBulk => out.nil(),
    }
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
        if crate::txn::session::end_granted_wait(&server.txns, &mut conn.lock_wait) {
            conn.now_ms = fallow_store::now_ms();
            command::dispatch::execute(server, conn, out, &args);
            conn.flush_command_stats(server);
            continue;
        }
        let deadline = tokio::time::Instant::from_std(started + wait_max);
        tokio::select! {
            _ = waker.notified() => continue,
            _ = tokio::time::sleep_until(deadline) => {
                crate::command::dispatch::txn::wait_timed_out(server, conn, out);
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
        PubSubMessage::ShardMessage { channel, payload } => {
            out.push_len(3);
            out.bulk(b"smessage");
            out.bulk(channel);
            out.bulk(payload);
        }
        PubSubMessage::Invalidate { .. } | PubSubMessage::TrackingRedirectBroken { .. } => {
            crate::tracking::encode(out, message)
        }
        // Escaped by `crate::monitor::quote_into`: printable ASCII only.
        PubSubMessage::Monitor(line) => out.simple(&String::from_utf8_lossy(line)),
    }
}
