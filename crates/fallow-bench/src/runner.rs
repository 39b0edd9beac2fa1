//! The load generator's engine: client threads, each driving its connections with one mio event loop,
//! and a monitor on the calling thread that starts them together, prints progress and gathers results.
//!
//! Closed loop: every connection keeps `pipeline` requests outstanding; each reply batch is answered by
//! one write holding the refill. Open loop: every connection has a schedule of intended send times
//! (rate / connections apart, staggered between connections) and latency counts from the intended time,
//! so a server that stalls is charged for the requests it delayed (no coordinated omission).
use std::collections::VecDeque;
use std::io::{self, IsTerminal, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};

use crate::clock::{now_ns, Timer};
use crate::net::{connect, Stream};
use crate::options::{Distribution, HumanDuration, Protocol, Ratio, RunOptions, PIPELINE_MAX};
use crate::protocol::{Encoder, Family, ReadBuffer, ReplyKind};
use crate::report::{LatencySummary, RunResults, TimelinePoint};
use crate::workload::{connection_seed, share, KeyChooser, Op, SizeChooser, Workload};

/// Most request bytes queued on one connection before it waits for the socket to drain.
const WRITE_BATCH_BYTES_MAX: usize = 1 << 20;
/// Longest a worker sleeps without checking the clock (end of run, stop flag, snapshots).
const POLL_TIMEOUT_MAX: Duration = Duration::from_millis(100);
/// How often workers publish their histogram and the monitor prints progress.
const TICK_NS: u64 = 1_000_000_000;
/// Latencies above this (one hour) are recorded as this.
const LATENCY_NS_MAX: u64 = 3_600 * 1_000_000_000;
/// Pipeline depth of the prefill: deep, because it only has to be fast.
const PREFILL_PIPELINE: usize = 64;
const TIMER_TOKEN: Token = Token(usize::MAX - 1);

/// Runs the workload `options` describes and returns what it measured. Prints progress and a summary on
/// stderr unless `options.quiet`; writes nothing else (the CLI writes JSON and plots).
pub fn run(options: &RunOptions) -> anyhow::Result<RunResults> {
    options.validate()?;
    if options.prefill {
        prefill(options)?;
    }
    execute(&Plan::new(options)?)
}

/// SETs every key once: a sequential, closed-loop, SET-only run with one request per key.
fn prefill(options: &RunOptions) -> anyhow::Result<()> {
    let mut fill = options.clone();
    fill.ratio = Ratio { sets: 1, gets: 0 };
    fill.distribution = Distribution::Sequential;
    fill.requests = Some(options.keys);
    fill.duration = None;
    fill.warmup = HumanDuration(Duration::ZERO);
    fill.rate = 0.0;
    fill.pipeline = options.pipeline.clamp(PREFILL_PIPELINE, PIPELINE_MAX);
    fill.prefill = false;
    fill.quiet = true;
    let results = execute(&Plan::new(&fill)?).context("prefill")?;
    if results.errors > 0 {
        bail!(
            "prefill: {} errors ({})",
            results.errors,
            results.drop_reason.as_deref().unwrap_or("error replies")
        );
    }
    if !options.quiet {
        eprintln!(
            "prefill: {} keys in {:.2} s",
            results.sets, results.duration_s
        );
    }
    Ok(())
}

/// Everything about a run that does not change while it runs.
struct Plan<'a> {
    options: &'a RunOptions,
    family: Family,
    encoder: Encoder,
    per_thread: Vec<usize>,
    total_connections: usize,
    warmup_ns: u64,
    duration_ns: Option<u64>,
    /// Open loop: nanoseconds between one connection's intended sends.
    interval_ns: Option<f64>,
}

impl<'a> Plan<'a> {
    fn new(options: &'a RunOptions) -> anyhow::Result<Plan<'a>> {
        options.validate()?;
        let per_thread = options.connections_per_thread();
        let total_connections = per_thread.iter().sum();
        Ok(Plan {
            options,
            family: Family::from(options.protocol),
            encoder: Encoder::new(
                options.protocol,
                &options.key_prefix,
                options.key_bytes,
                options.value_size.max(),
            ),
            per_thread,
            total_connections,
            warmup_ns: options.warmup.0.as_nanos() as u64,
            duration_ns: options.duration_limit().map(|d| d.as_nanos() as u64),
            interval_ns: (options.rate > 0.0)
                .then(|| total_connections as f64 * 1e9 / options.rate),
        })
    }

    /// A new connection's state; `index` counts connections over the whole run.
    fn connection(&self, stream: Stream, index: usize) -> anyhow::Result<Conn> {
        let o = self.options;
        let (start, _) = share(o.keys, index, self.total_connections);
        let keys = KeyChooser::new(o.distribution, o.keys, start)?;
        let seed = connection_seed(o.seed, index, o.distinct_client_seed);
        Ok(Conn {
            stream,
            rbuf: ReadBuffer::new(),
            wbuf: Vec::new(),
            wpos: 0,
            inflight: VecDeque::with_capacity(o.pipeline.min(1024)),
            workload: Workload::new(seed, keys, SizeChooser::new(o.value_size.clone()), o.ratio),
            quota: o
                .requests
                .map(|n| share(n, index, self.total_connections).1),
            schedule: self.interval_ns.map(|interval_ns| Schedule {
                // Staggered so that connections do not all send at the same instant.
                offset_ns: interval_ns * index as f64 / self.total_connections as f64,
                interval_ns,
                scheduled: 0,
            }),
            state: ConnState::Active,
        })
    }
}

/// Per-thread counters the monitor reads while the run goes on; padded so threads do not share a line.
#[repr(align(128))]
#[derive(Default)]
struct LiveCounters {
    completed: AtomicU64,
    measured: AtomicU64,
    errors: AtomicU64,
}

/// Opens once for all workers: with the start time, or with `None` when the run is called off.
#[derive(Default)]
struct Gate {
    state: Mutex<Option<Option<u64>>>,
    opened: Condvar,
}

impl Gate {
    fn open(&self, start_ns: Option<u64>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(start_ns);
        self.opened.notify_all();
    }

    fn wait(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(start) = *state {
                return start;
            }
            state = self.opened.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

struct Shared {
    counters: Vec<LiveCounters>,
    stop: AtomicBool,
    gate: Gate,
}

enum Message {
    Ready(Result<(), String>),
    Snapshot(usize, Histogram<u64>),
    Done,
}

/// Tells the monitor that a worker ended, however it ended (a panic included).
struct DoneGuard<'a> {
    tx: mpsc::Sender<Message>,
    shared: &'a Shared,
    ok: bool,
}

impl Drop for DoneGuard<'_> {
    fn drop(&mut self) {
        if !self.ok {
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        let _ = self.tx.send(Message::Done);
    }
}

/// What one thread measured.
struct ThreadStats {
    histogram: Histogram<u64>,
    completed: u64,
    requests: u64,
    gets: u64,
    sets: u64,
    hits: u64,
    misses: u64,
    errors: u64,
    bytes_sent: u64,
    bytes_received: u64,
    dropped: u64,
    drop_reason: Option<String>,
    last_reply_ns: u64,
    stopped_ns: u64,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("constant histogram bounds are valid")
}

impl ThreadStats {
    fn new() -> ThreadStats {
        ThreadStats {
            histogram: new_histogram(),
            completed: 0,
            requests: 0,
            gets: 0,
            sets: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            bytes_sent: 0,
            bytes_received: 0,
            dropped: 0,
            drop_reason: None,
            last_reply_ns: 0,
            stopped_ns: 0,
        }
    }

    fn add(&mut self, other: &ThreadStats) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        self.completed += other.completed;
        self.requests += other.requests;
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.errors += other.errors;
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.dropped += other.dropped;
        if self.drop_reason.is_none() {
            self.drop_reason.clone_from(&other.drop_reason);
        }
        self.last_reply_ns = self.last_reply_ns.max(other.last_reply_ns);
        self.stopped_ns = self.stopped_ns.max(other.stopped_ns);
    }
}

/// The times that decide whether a reply is measured, as absolute clock readings.
#[derive(Clone, Copy)]
struct Window {
    warmup_end_ns: u64,
    /// When sending stops and replies stop counting; `u64::MAX` for a request-count run.
    end_ns: u64,
    /// A request-count run measures the requests sent after the warm-up (they are the ones counted
    /// against the total); a timed run measures the replies that arrive between warm-up and end, so an
    /// overloaded open loop, whose sends lag their schedule, still reports what it completed.
    by_send: bool,
}

impl Window {
    /// Whether a request sent (or meant to be sent) at `intended_ns` counts against a request total.
    fn counts_send(&self, intended_ns: u64) -> bool {
        self.by_send && intended_ns >= self.warmup_end_ns
    }

    /// Whether the reply at `now_ns` to a request intended at `intended_ns` is measured.
    fn measures(&self, intended_ns: u64, now_ns: u64) -> bool {
        if self.by_send {
            intended_ns >= self.warmup_end_ns
        } else {
            now_ns >= self.warmup_end_ns && now_ns < self.end_ns
        }
    }
}

#[derive(Clone, Copy)]
struct InFlight {
    intended_ns: u64,
    op: Op,
}

/// An open-loop connection's send times: `start + offset + k * interval` for the k-th request.
struct Schedule {
    offset_ns: f64,
    interval_ns: f64,
    scheduled: u64,
}

impl Schedule {
    fn due_ns(&self, start_ns: u64) -> u64 {
        start_ns + (self.offset_ns + self.scheduled as f64 * self.interval_ns) as u64
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Active,
    /// Sent its share of a request-count run and has every reply.
    Finished,
    Dropped,
}

struct Conn {
    stream: Stream,
    rbuf: ReadBuffer,
    wbuf: Vec<u8>,
    wpos: usize,
    inflight: VecDeque<InFlight>,
    workload: Workload,
    /// Measured requests still to send in a request-count run.
    quota: Option<u64>,
    schedule: Option<Schedule>,
    state: ConnState,
}

/// What a connection needs to know from its worker while it reads and writes.
struct Ctx<'p> {
    family: Family,
    encoder: &'p Encoder,
    pipeline: usize,
    window: Window,
    start_ns: u64,
}

impl Conn {
    /// Queues requests: up to the pipeline depth (closed loop) or those now due (open loop).
    fn fill(&mut self, ctx: &Ctx, now_ns: u64) {
        while self.inflight.len() < ctx.pipeline && self.wbuf.len() < WRITE_BATCH_BYTES_MAX {
            let intended_ns = match &self.schedule {
                None => now_ns,
                Some(s) => s.due_ns(ctx.start_ns),
            };
            if intended_ns > now_ns || intended_ns >= ctx.window.end_ns {
                break;
            }
            if ctx.window.counts_send(intended_ns) {
                match &mut self.quota {
                    Some(0) => break,
                    Some(left) => *left -= 1,
                    None => {}
                }
            }
            let request = self.workload.next_request();
            ctx.encoder.encode(&request, &mut self.wbuf);
            self.inflight.push_back(InFlight {
                intended_ns,
                op: request.op,
            });
            if let Some(s) = &mut self.schedule {
                s.scheduled += 1;
            }
        }
    }

    /// Writes what is queued until done or the socket is full.
    fn flush(&mut self, stats: &mut ThreadStats, ctx: &Ctx, now_ns: u64) -> Result<(), String> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err("the socket accepts no more bytes".into()),
                Ok(n) => {
                    self.wpos += n;
                    if now_ns >= ctx.window.warmup_end_ns {
                        stats.bytes_sent += n as u64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Reads what the socket holds (one read unless it filled the buffer) and accounts the replies.
    fn read(&mut self, stats: &mut ThreadStats, ctx: &Ctx, now_ns: u64) -> Result<(), String> {
        loop {
            let spare = self.rbuf.spare()?;
            let spare_len = spare.len();
            match self.stream.read(spare) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    self.rbuf.filled(n);
                    if now_ns >= ctx.window.warmup_end_ns {
                        stats.bytes_received += n as u64;
                    }
                    self.take_replies(stats, ctx, now_ns)?;
                    // A short read emptied the socket; edge-triggered epoll reports new data.
                    if n < spare_len {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    fn take_replies(
        &mut self,
        stats: &mut ThreadStats,
        ctx: &Ctx,
        now_ns: u64,
    ) -> Result<(), String> {
        while let Some(kind) = self.rbuf.next_reply(ctx.family)? {
            if kind == ReplyKind::Push {
                continue;
            }
            let request = self
                .inflight
                .pop_front()
                .ok_or("a reply arrived with no request outstanding")?;
            account(stats, ctx.window, request, kind, now_ns);
        }
        Ok(())
    }

    fn is_finished(&self) -> bool {
        self.quota == Some(0) && self.inflight.is_empty() && self.wbuf.is_empty()
    }

    /// Whether the connection can send now or later (open loop): it has room and requests left.
    fn wants_to_send(&self, pipeline: usize) -> bool {
        self.state == ConnState::Active
            && self.inflight.len() < pipeline
            && self.quota != Some(0)
            && self.wbuf.len() < WRITE_BATCH_BYTES_MAX
    }
}

/// Counts one reply.
fn account(
    stats: &mut ThreadStats,
    window: Window,
    request: InFlight,
    kind: ReplyKind,
    now_ns: u64,
) {
    stats.completed += 1;
    stats.last_reply_ns = now_ns;
    if !window.measures(request.intended_ns, now_ns) {
        return;
    }
    stats.requests += 1;
    let latency_ns = now_ns
        .saturating_sub(request.intended_ns)
        .clamp(1, LATENCY_NS_MAX);
    stats.histogram.saturating_record(latency_ns);
    match request.op {
        Op::Get => stats.gets += 1,
        Op::Set => stats.sets += 1,
    }
    match (request.op, kind) {
        (Op::Get, ReplyKind::Value) => stats.hits += 1,
        (Op::Get, ReplyKind::Nil) => stats.misses += 1,
        (_, ReplyKind::Error) => stats.errors += 1,
        _ => {}
    }
}

/// One client thread.
struct Worker<'a> {
    plan: &'a Plan<'a>,
    live: &'a LiveCounters,
    stop: &'a AtomicBool,
    thread: usize,
    poll: Poll,
    conns: Vec<Conn>,
    timer: Option<Timer>,
    start_ns: u64,
    window: Window,
    stats: ThreadStats,
    active: usize,
    tx: mpsc::Sender<Message>,
    next_snapshot_ns: u64,
}

impl<'a> Worker<'a> {
    fn ctx(&self) -> Ctx<'a> {
        Ctx {
            family: self.plan.family,
            encoder: &self.plan.encoder,
            pipeline: self.plan.options.pipeline,
            window: self.window,
            start_ns: self.start_ns,
        }
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let now = now_ns();
        for i in 0..self.conns.len() {
            self.service(i, false, now);
        }
        loop {
            let now = now_ns();
            if self.active == 0 || now >= self.window.end_ns || self.stop.load(Ordering::Relaxed) {
                self.stats.stopped_ns = now.min(self.window.end_ns);
                return Ok(());
            }
            let timeout = self.pace(now)?;
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e).context("polling connections");
                }
            }
            for event in events.iter() {
                match event.token() {
                    TIMER_TOKEN => {
                        if let Some(timer) = &mut self.timer {
                            timer.clear();
                        }
                    }
                    Token(i) => {
                        let readable = event.is_readable() || event.is_read_closed();
                        self.service(i, readable, now_ns());
                    }
                }
            }
            self.publish(now_ns());
        }
    }

    /// Open loop: sends what is due, arms the timer for the next send and returns how long to sleep.
    /// Closed loop: just the sleep cap (until the end of the run, at most [`POLL_TIMEOUT_MAX`]).
    fn pace(&mut self, now: u64) -> anyhow::Result<Duration> {
        let cap_ns = (self.window.end_ns - now).min(POLL_TIMEOUT_MAX.as_nanos() as u64);
        if self.timer.is_none() {
            return Ok(Duration::from_nanos(cap_ns));
        }
        let pipeline = self.plan.options.pipeline;
        let mut next_due = u64::MAX;
        for i in 0..self.conns.len() {
            let mut due = self.due_ns(i, pipeline);
            if due <= now {
                self.service(i, false, now);
                due = self.due_ns(i, pipeline);
            }
            next_due = next_due.min(due);
        }
        if next_due <= now {
            // A connection is still behind (its write batch is full): poll without sleeping.
            return Ok(Duration::ZERO);
        }
        if next_due < now + cap_ns {
            if let Some(timer) = &mut self.timer {
                timer.arm(next_due).context("arming the send timer")?;
            }
        }
        Ok(Duration::from_nanos(cap_ns))
    }

    /// When connection `i` sends next in open loop; `u64::MAX` while it cannot send (pipeline full,
    /// share sent, dropped): a reply makes room and sends what is due then.
    fn due_ns(&self, i: usize, pipeline: usize) -> u64 {
        let conn = &self.conns[i];
        match &conn.schedule {
            Some(s) if conn.wants_to_send(pipeline) => s.due_ns(self.start_ns),
            _ => u64::MAX,
        }
    }

    /// Reads (when `readable`), refills and writes connection `i`; drops it on any error.
    fn service(&mut self, i: usize, readable: bool, now: u64) {
        let ctx = self.ctx();
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        if conn.state != ConnState::Active {
            return;
        }
        let stats = &mut self.stats;
        let result = (|| {
            if readable {
                conn.read(stats, &ctx, now)?;
            }
            conn.fill(&ctx, now);
            conn.flush(stats, &ctx, now)
        })();
        match result {
            Err(reason) => self.drop_connection(i, reason),
            Ok(()) if conn.is_finished() => {
                conn.state = ConnState::Finished;
                self.active -= 1;
            }
            Ok(()) => {}
        }
    }

    fn drop_connection(&mut self, i: usize, reason: String) {
        let conn = &mut self.conns[i];
        let _ = self.poll.registry().deregister(&mut conn.stream);
        conn.state = ConnState::Dropped;
        conn.inflight.clear();
        self.active -= 1;
        self.stats.dropped += 1;
        self.stats.errors += 1;
        if self.stats.drop_reason.is_none() {
            self.stats.drop_reason = Some(reason);
        }
    }

    /// Publishes the counters for the monitor, and once a tick a copy of the histogram (a little before
    /// the monitor's tick, so its progress line has it).
    fn publish(&mut self, now: u64) {
        self.publish_counters();
        if now >= self.next_snapshot_ns {
            let late_ticks = (now - self.next_snapshot_ns) / TICK_NS;
            self.next_snapshot_ns += (late_ticks + 1) * TICK_NS;
            let _ = self
                .tx
                .send(Message::Snapshot(self.thread, self.stats.histogram.clone()));
        }
    }

    fn publish_counters(&self) {
        self.live
            .completed
            .store(self.stats.completed, Ordering::Relaxed);
        self.live
            .measured
            .store(self.stats.requests, Ordering::Relaxed);
        self.live.errors.store(self.stats.errors, Ordering::Relaxed);
    }
}

/// Opens and registers the connections of `thread`, whose first connection has run-wide index `first`.
fn open_connections(
    plan: &Plan,
    poll: &Poll,
    thread: usize,
    first: usize,
) -> anyhow::Result<Vec<Conn>> {
    let resp3 = plan.options.protocol == Protocol::Resp3;
    let mut conns = Vec::with_capacity(plan.per_thread[thread]);
    for k in 0..plan.per_thread[thread] {
        let stream = connect(&plan.options.server, resp3)?;
        let mut conn = plan.connection(stream, first + k)?;
        poll.registry().register(
            &mut conn.stream,
            Token(k),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        conns.push(conn);
    }
    Ok(conns)
}

/// A worker thread's whole life: connect, wait for the start, run, hand back its figures.
fn worker_main(
    plan: &Plan,
    shared: &Shared,
    thread: usize,
    first: usize,
    tx: mpsc::Sender<Message>,
) -> anyhow::Result<ThreadStats> {
    let mut guard = DoneGuard {
        tx: tx.clone(),
        shared,
        ok: false,
    };
    let setup = (|| -> anyhow::Result<_> {
        let poll = Poll::new()?;
        let conns = open_connections(plan, &poll, thread, first)?;
        let timer = match plan.interval_ns {
            Some(_) => {
                let timer = Timer::new()?;
                let fd = timer.raw_fd();
                poll.registry().register(
                    &mut mio::unix::SourceFd(&fd),
                    TIMER_TOKEN,
                    Interest::READABLE,
                )?;
                Some(timer)
            }
            None => None,
        };
        Ok((poll, conns, timer))
    })();
    let _ = tx.send(Message::Ready(
        setup.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")),
    ));
    let (poll, conns, timer) = setup?;
    let Some(start_ns) = shared.gate.wait() else {
        guard.ok = true;
        return Ok(ThreadStats::new());
    };
    let warmup_end_ns = start_ns + plan.warmup_ns;
    let mut worker = Worker {
        plan,
        live: &shared.counters[thread],
        stop: &shared.stop,
        thread,
        poll,
        active: conns.len(),
        conns,
        timer,
        start_ns,
        window: Window {
            warmup_end_ns,
            end_ns: plan.duration_ns.map_or(u64::MAX, |d| warmup_end_ns + d),
            by_send: plan.duration_ns.is_none(),
        },
        stats: ThreadStats::new(),
        tx,
        next_snapshot_ns: start_ns + TICK_NS - TICK_NS / 10,
    };
    worker.run()?;
    worker.publish_counters();
    guard.ok = true;
    Ok(worker.stats)
}

/// Runs a validated plan: workers on scoped threads, the monitor here.
fn execute(plan: &Plan) -> anyhow::Result<RunResults> {
    let threads = plan.per_thread.len();
    let shared = Shared {
        counters: (0..threads).map(|_| LiveCounters::default()).collect(),
        stop: AtomicBool::new(false),
        gate: Gate::default(),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(threads);
        let mut first = 0;
        for thread in 0..threads {
            let (tx, shared) = (tx.clone(), &shared);
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{thread}"))
                .spawn_scoped(scope, move || worker_main(plan, shared, thread, first, tx));
            let handle = match spawned {
                Ok(handle) => handle,
                Err(e) => {
                    // Threads already started wait at the gate; release them before failing.
                    shared.gate.open(None);
                    return Err(e).context("starting a client thread");
                }
            };
            handles.push(handle);
            first += plan.per_thread[thread];
        }
        drop(tx);
        let monitored = Monitor::new(plan, &shared, rx).watch();
        let mut total = ThreadStats::new();
        let mut first_error = None;
        for handle in handles {
            match handle.join() {
                Ok(Ok(stats)) => total.add(&stats),
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(_) => {
                    first_error = first_error.or(Some(anyhow::anyhow!("a client thread panicked")))
                }
            }
        }
        let (start_ns, timeline) = monitored?;
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(results(plan, start_ns, total, timeline))
    })
}

fn results(
    plan: &Plan,
    start_ns: u64,
    total: ThreadStats,
    timeline: Vec<TimelinePoint>,
) -> RunResults {
    let warmup_end_ns = start_ns + plan.warmup_ns;
    let end_ns = match plan.duration_ns {
        Some(d) => total.stopped_ns.min(warmup_end_ns + d),
        None => total.last_reply_ns,
    };
    let duration_s = end_ns.saturating_sub(warmup_end_ns) as f64 / 1e9;
    let answered = total.hits + total.misses;
    RunResults {
        requests: total.requests,
        duration_s,
        ops_per_sec: if duration_s > 0.0 {
            total.requests as f64 / duration_s
        } else {
            0.0
        },
        gets: total.gets,
        sets: total.sets,
        hits: total.hits,
        misses: total.misses,
        hit_ratio: if answered > 0 {
            total.hits as f64 / answered as f64
        } else {
            0.0
        },
        errors: total.errors,
        bytes_sent: total.bytes_sent,
        bytes_received: total.bytes_received,
        connections_dropped: total.dropped,
        drop_reason: total.drop_reason,
        latency_us: LatencySummary::from_histogram(&total.histogram),
        timeline,
        histogram: total.histogram,
    }
}

/// The calling thread's part: start the workers together, sample throughput each second, print progress.
struct Monitor<'a> {
    plan: &'a Plan<'a>,
    shared: &'a Shared,
    rx: mpsc::Receiver<Message>,
    snapshots: Vec<Option<Histogram<u64>>>,
    done: usize,
    progress: Option<Progress>,
}

struct Progress {
    tty: bool,
    last_completed: u64,
    last_ns: u64,
}

impl<'a> Monitor<'a> {
    fn new(plan: &'a Plan<'a>, shared: &'a Shared, rx: mpsc::Receiver<Message>) -> Monitor<'a> {
        Monitor {
            plan,
            shared,
            rx,
            snapshots: vec![None; plan.per_thread.len()],
            done: 0,
            progress: (!plan.options.quiet).then(|| Progress {
                tty: io::stderr().is_terminal(),
                last_completed: 0,
                last_ns: 0,
            }),
        }
    }

    /// Returns the start time and the timeline once every worker has ended.
    fn watch(mut self) -> anyhow::Result<(u64, Vec<TimelinePoint>)> {
        let start_ns = self.start()?;
        let warmup_end_ns = start_ns + self.plan.warmup_ns;
        let end_ns = self
            .plan
            .duration_ns
            .map_or(u64::MAX, |d| warmup_end_ns + d);
        if let Some(p) = &mut self.progress {
            p.last_ns = start_ns;
        }
        let mut timeline = Vec::new();
        let (mut last_tick_ns, mut last_measured) = (warmup_end_ns, 0u64);
        let mut tick_ns = start_ns + TICK_NS;
        let threads = self.plan.per_thread.len();
        while self.done < threads {
            let wait = tick_ns.saturating_sub(now_ns());
            match self.rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(message) => self.receive(message),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let now = now_ns();
            if now < tick_ns {
                continue;
            }
            tick_ns += TICK_NS;
            let at = now.min(end_ns);
            if at > last_tick_ns {
                let measured = self.sum(|c| &c.measured);
                timeline.push(point(
                    warmup_end_ns,
                    last_tick_ns,
                    at,
                    measured - last_measured,
                ));
                (last_tick_ns, last_measured) = (at, measured);
            }
            self.print_progress(now, warmup_end_ns);
        }
        let at = now_ns().min(end_ns);
        let measured = self.sum(|c| &c.measured);
        if at > last_tick_ns && measured > last_measured {
            timeline.push(point(
                warmup_end_ns,
                last_tick_ns,
                at,
                measured - last_measured,
            ));
        }
        if self.progress.as_ref().is_some_and(|p| p.tty) {
            eprintln!();
        }
        Ok((start_ns, timeline))
    }

    /// Waits until every worker has connected, then opens the gate.
    fn start(&mut self) -> anyhow::Result<u64> {
        let mut ready = 0;
        while ready < self.plan.per_thread.len() {
            match self.rx.recv() {
                Ok(Message::Ready(Ok(()))) => ready += 1,
                Ok(Message::Ready(Err(e))) => {
                    self.shared.gate.open(None);
                    bail!(e);
                }
                Ok(Message::Done) => {
                    self.shared.gate.open(None);
                    bail!("a client thread ended before it connected");
                }
                Ok(Message::Snapshot(..)) => {}
                Err(_) => {
                    self.shared.gate.open(None);
                    bail!("a client thread ended before it connected");
                }
            }
        }
        let start_ns = now_ns();
        self.shared.gate.open(Some(start_ns));
        Ok(start_ns)
    }

    fn receive(&mut self, message: Message) {
        match message {
            Message::Snapshot(thread, histogram) => self.snapshots[thread] = Some(histogram),
            Message::Done => self.done += 1,
            Message::Ready(_) => {}
        }
    }

    fn sum(&self, field: impl Fn(&LiveCounters) -> &AtomicU64) -> u64 {
        self.shared
            .counters
            .iter()
            .map(|c| field(c).load(Ordering::Relaxed))
            .sum()
    }

    fn print_progress(&mut self, now: u64, warmup_end_ns: u64) {
        let completed = self.sum(|c| &c.completed);
        let errors = self.sum(|c| &c.errors);
        let mut merged = new_histogram();
        for histogram in self.snapshots.iter().flatten() {
            let _ = merged.add(histogram);
        }
        let Some(p) = &mut self.progress else {
            return;
        };
        let elapsed_ns = now.saturating_sub(p.last_ns).max(1);
        let ops = (completed - p.last_completed) as f64 * 1e9 / elapsed_ns as f64;
        (p.last_completed, p.last_ns) = (completed, now);
        let phase = if now < warmup_end_ns { "warmup" } else { "run" };
        let p99 = if merged.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", merged.value_at_quantile(0.99) as f64 / 1000.0)
        };
        let line = format!(
            "{phase:>6} {:>7.1}s {:>12.0} ops/s  p99 {p99} us  errors {errors}",
            now.saturating_sub(warmup_end_ns.min(now)) as f64 / 1e9,
            ops
        );
        if p.tty {
            eprint!("\r\x1b[K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

/// A timeline point for `completed` requests between `from_ns` and `to_ns`.
fn point(warmup_end_ns: u64, from_ns: u64, to_ns: u64, completed: u64) -> TimelinePoint {
    let seconds = (to_ns - from_ns) as f64 / 1e9;
    TimelinePoint {
        t_s: (to_ns - warmup_end_ns) as f64 / 1e9,
        ops_per_sec: completed as f64 / seconds,
    }
}
