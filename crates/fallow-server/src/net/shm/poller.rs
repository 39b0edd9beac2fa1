//! The channel poller: one thread that runs the connections of every shared-memory channel.
//!
//! A request on a channel must be answered in about a microsecond, and handing it from a thread that
//! notices it to a runtime worker costs a kernel wake-up (what a Unix socket costs). So the thread that
//! watches the rings also runs the connections: it is a small executor. Each channel's connection future
//! (the same RESP or memcached loop sockets use) is polled here with a waker of our own; timers, `Notify`,
//! pub/sub queues and blocking-command wake-ups work because the poller enters the future's tokio runtime
//! while polling it.
//!
//! The loop: wake futures whose rings moved, poll the woken ones, and when nothing happened spin for
//! `shm-spin-us` before sleeping. To sleep it marks itself sleeping in every channel, checks once more,
//! and waits in `epoll` on the channels' server doorbells and its own (rung by wakers from other threads).
//! A connection runs on the poller thread for as long as a command takes, as on a runtime worker.
use super::stream::Channel;
use crate::stats::SHM_POLLER;
use fallow_shm::layout::Side;
use fallow_shm::wait::Doorbell;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

pub(crate) type ConnectionFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long the poller sleeps at most before looking at its channels again (a missed doorbell, which
/// the protocol rules out, would cost this much, not a hang).
const SLEEP_MS_MAX: i32 = 100;
/// Most epoll events taken per wait.
const EVENTS_PER_WAIT: usize = 64;
/// How often the thread's CPU time is published to INFO.
const CPU_REPORT_INTERVAL: Duration = Duration::from_millis(100);
/// Idle turns between two reads of the clock (for the spin budget).
const IDLE_TURNS_PER_CLOCK_READ: u32 = 16;
/// The tight part of an idle spin; after it the poller yields its core at each clock read, so that on
/// a machine with more busy threads than cores the client it waits for (often on the same core: a pure
/// spin there held each reply ~60 µs) can run.
const PURE_SPIN: Duration = Duration::from_micros(3);
/// Token of the poller's own doorbell in epoll.
const OWN_BELL_TOKEN: u64 = u64::MAX;

struct Shared {
    incoming: Mutex<Vec<Arc<Task>>>,
    /// Set after a push to `incoming` / `ready`: the spinning poller checks these, not the locks.
    has_incoming: AtomicBool,
    has_ready: AtomicBool,
    ready: Mutex<VecDeque<Arc<Task>>>,
    sleeping: AtomicBool,
    bell: Doorbell,
    spin_ns: AtomicU64,
}

/// A channel's connection, as the poller runs it.
struct Task {
    future: Mutex<Option<ConnectionFuture>>,
    /// In the ready queue already (a second wake adds nothing).
    queued: AtomicBool,
    channel: Arc<Channel>,
    runtime: tokio::runtime::Handle,
    shared: Arc<Shared>,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.ready.lock().push_back(self.clone());
        self.shared.has_ready.store(true, Ordering::Release);
        self.shared.ring_if_sleeping();
    }
}

impl Shared {
    /// After queueing work from another thread: rings the poller's doorbell if it sleeps.
    fn ring_if_sleeping(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.bell.ring();
        }
    }
}

static POLLER: OnceLock<Arc<Shared>> = OnceLock::new();

/// Hands a channel's connection to the poller (started on first use). `spin_us`: the server's
/// `shm-spin-us`, the poller's budget from now on.
pub(crate) fn submit(
    channel: Arc<Channel>,
    future: ConnectionFuture,
    spin_us: u64,
) -> std::io::Result<()> {
    let shared = match POLLER.get() {
        Some(shared) => shared.clone(),
        None => start()?,
    };
    shared
        .spin_ns
        .store(spin_us.saturating_mul(1000), Ordering::Relaxed);
    let task = Arc::new(Task {
        future: Mutex::new(Some(future)),
        queued: AtomicBool::new(true),
        channel,
        runtime: tokio::runtime::Handle::current(),
        shared: shared.clone(),
    });
    shared.incoming.lock().push(task.clone());
    shared.has_incoming.store(true, Ordering::Release);
    shared.ready.lock().push_back(task);
    shared.has_ready.store(true, Ordering::Release);
    shared.ring_if_sleeping();
    Ok(())
}

fn start() -> std::io::Result<Arc<Shared>> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = STARTING.lock();
    if let Some(shared) = POLLER.get() {
        return Ok(shared.clone());
    }
    let shared = Arc::new(Shared {
        incoming: Mutex::new(Vec::new()),
        has_incoming: AtomicBool::new(false),
        has_ready: AtomicBool::new(false),
        ready: Mutex::new(VecDeque::new()),
        sleeping: AtomicBool::new(false),
        bell: Doorbell::new()?,
        spin_ns: AtomicU64::new(0),
    });
    let epoll = Epoll::new()?;
    epoll.add(shared.bell.fd(), OWN_BELL_TOKEN)?;
    let for_thread = shared.clone();
    std::thread::Builder::new()
        .name("fallow-shm-poller".into())
        .spawn(move || Poller::new(for_thread, epoll).run())?;
    let _ = POLLER.set(shared.clone());
    Ok(shared)
}

struct Poller {
    shared: Arc<Shared>,
    epoll: Epoll,
    tasks: Vec<Arc<Task>>,
    last_work: Instant,
    cpu_reported: Instant,
}

impl Poller {
    fn new(shared: Arc<Shared>, epoll: Epoll) -> Poller {
        Poller {
            shared,
            epoll,
            tasks: Vec::new(),
            last_work: Instant::now(),
            cpu_reported: Instant::now(),
        }
    }

    fn run(mut self) {
        let mut spinning_since: Option<Instant> = None;
        let mut idle_turns: u32 = 0;
        loop {
            if self.turn() {
                if let Some(since) = spinning_since.take() {
                    count_idle_spin(since);
                }
                idle_turns = 0;
                self.last_work = Instant::now();
                continue;
            }
            // The clock is read every few idle turns: a turn is tens of nanoseconds, a clock read 20.
            idle_turns = idle_turns.wrapping_add(1);
            if !idle_turns.is_multiple_of(IDLE_TURNS_PER_CLOCK_READ) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            let spin = Duration::from_nanos(self.shared.spin_ns.load(Ordering::Relaxed));
            let idle = now.duration_since(self.last_work);
            if idle < spin {
                spinning_since.get_or_insert(now);
                if idle >= PURE_SPIN {
                    std::thread::yield_now();
                }
                continue;
            }
            if let Some(since) = spinning_since.take() {
                count_idle_spin(since);
            }
            self.report_cpu();
            self.sleep();
            self.last_work = Instant::now();
        }
    }

    /// One round: adopt new channels, wake what moved, poll what is ready. True when it did anything.
    fn turn(&mut self) -> bool {
        let mut worked = self.adopt();
        for task in &self.tasks {
            worked |= task.channel.wake_if_moved();
        }
        if !self.shared.has_ready.swap(false, Ordering::AcqRel) {
            return worked;
        }
        loop {
            let Some(task) = self.shared.ready.lock().pop_front() else {
                break;
            };
            worked = true;
            if poll(&task) {
                self.remove(&task);
            }
        }
        if self.last_work.duration_since(self.cpu_reported) >= CPU_REPORT_INTERVAL {
            self.report_cpu();
        }
        worked
    }

    /// Publishes the thread's CPU time (before each sleep, and at least every `CPU_REPORT_INTERVAL`
    /// while busy: `poll` calls it too).
    fn report_cpu(&mut self) {
        self.cpu_reported = Instant::now();
        SHM_POLLER.cpu_us.store(thread_cpu_us(), Ordering::Relaxed);
    }

    fn adopt(&mut self) -> bool {
        if !self.shared.has_incoming.swap(false, Ordering::AcqRel) {
            return false;
        }
        let incoming = std::mem::take(&mut *self.shared.incoming.lock());
        let adopted = !incoming.is_empty();
        for task in incoming {
            let token = Arc::as_ptr(&task.channel) as u64;
            if let Err(error) = self.epoll.add(task.channel.server_bell_fd(), token) {
                tracing::warn!(%error, "shared-memory channel: cannot watch its doorbell; the poller finds its requests by polling");
            }
            self.tasks.push(task);
        }
        adopted
    }

    fn remove(&mut self, finished: &Arc<Task>) {
        self.epoll.delete(finished.channel.server_bell_fd());
        self.tasks.retain(|task| !Arc::ptr_eq(task, finished));
    }

    /// Marks every channel's server side sleeping, checks once more, and waits on the doorbells.
    fn sleep(&mut self) {
        self.shared.sleeping.store(true, Ordering::SeqCst);
        for task in &self.tasks {
            task.channel.mapping.mark_sleeping(Side::Server);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        let pending =
            !self.shared.ready.lock().is_empty() || !self.shared.incoming.lock().is_empty();
        let moved = self.tasks.iter().any(|task| task.channel.wake_if_moved());
        if !pending && !moved {
            SHM_POLLER.sleeps.fetch_add(1, Ordering::Relaxed);
            let (shared, tasks) = (&self.shared, &self.tasks);
            self.epoll.wait(SLEEP_MS_MAX, |token| {
                if token == OWN_BELL_TOKEN {
                    shared.bell.drain();
                } else if let Some(task) = tasks
                    .iter()
                    .find(|task| Arc::as_ptr(&task.channel) as u64 == token)
                {
                    task.channel.drain_server_bell();
                }
            });
        }
        self.shared.sleeping.store(false, Ordering::SeqCst);
        for task in &self.tasks {
            task.channel.mapping.clear_sleeping(Side::Server);
        }
    }
}

/// Polls a task's connection once; true when it has finished (or panicked: the connection is dropped,
/// its guard cleans up, and the poller goes on serving the others).
fn poll(task: &Arc<Task>) -> bool {
    task.queued.store(false, Ordering::Release);
    let waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&waker);
    let _runtime = task.runtime.enter();
    let mut slot = task.future.lock();
    let Some(future) = slot.as_mut() else {
        return true;
    };
    SHM_POLLER.polls.fetch_add(1, Ordering::Relaxed);
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        future.as_mut().poll(&mut cx)
    }));
    match polled {
        Ok(Poll::Pending) => false,
        Ok(Poll::Ready(())) => {
            *slot = None;
            true
        }
        Err(_) => {
            tracing::error!("a shared-memory connection panicked; it is closed");
            *slot = None;
            true
        }
    }
}

fn count_idle_spin(since: Instant) {
    SHM_POLLER
        .idle_spin_us
        .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// This thread's CPU time in microseconds.
fn thread_cpu_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000
}

/// An epoll instance watching doorbells for readability.
struct Epoll {
    fd: i32,
}

impl Epoll {
    fn new() -> std::io::Result<Epoll> {
        // SAFETY: no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Epoll { fd })
    }

    fn add(&self, fd: i32, token: u64) -> std::io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a valid event for a descriptor we hold.
        if unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (before it is closed: the client's copy would keep the registration alive).
    fn delete(&self, fd: i32) {
        // SAFETY: EPOLL_CTL_DEL ignores the event argument.
        unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    fn wait(&self, timeout_ms: i32, mut each: impl FnMut(u64)) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        // SAFETY: `events` has room for EVENTS_PER_WAIT entries.
        let count = unsafe {
            libc::epoll_wait(
                self.fd,
                events.as_mut_ptr(),
                EVENTS_PER_WAIT as i32,
                timeout_ms,
            )
        };
        for event in events.iter().take(count.max(0) as usize) {
            each(event.u64);
        }
    }
}
