//! Runs one cell of an experiment: `clients` threads, each one session and one [`Actor`], closed loop
//! for a warm-up and a measured period. The calling thread samples throughput once a second.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;

use super::backend::{Backend, Body, CallError, Calls, Reply, Session};

/// Latencies above this (one minute) are recorded as this.
const LATENCY_NS_MAX: u64 = 60_000_000_000;
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Runs transactions for an actor and records them.
pub trait TxnRunner {
    /// Runs `body` as one transaction of `kind`; Ok(false) when it gave up after too many aborts.
    fn run(&mut self, kind: &'static str, body: &mut Body<'_>) -> anyhow::Result<bool>;
}

/// One simulated user session: each `act` is one user action of one or more transactions.
pub trait Actor: Send {
    fn act(&mut self, txns: &mut dyn TxnRunner) -> anyhow::Result<()>;
}

/// Makes the actors of a run.
pub trait Workload: Sync {
    /// The actor of client thread `index`.
    fn actor(&self, index: usize, seed: u64) -> Box<dyn Actor + '_>;
}

/// What the client threads measured together.
#[derive(Debug)]
pub struct ThreadStats {
    /// Whole transactions including retries, nanoseconds.
    pub latency_ns: Histogram<u64>,
    pub committed: u64,
    /// Transactions that gave up after the most retries.
    pub failed: u64,
    pub retries: u64,
    pub aborts: BTreeMap<String, u64>,
    pub committed_by_kind: BTreeMap<&'static str, u64>,
}

impl ThreadStats {
    fn new() -> ThreadStats {
        ThreadStats {
            latency_ns: Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid bounds"),
            committed: 0,
            failed: 0,
            retries: 0,
            aborts: BTreeMap::new(),
            committed_by_kind: BTreeMap::new(),
        }
    }

    fn merge(&mut self, other: &ThreadStats) {
        self.latency_ns.add(&other.latency_ns).expect("same bounds");
        self.committed += other.committed;
        self.failed += other.failed;
        self.retries += other.retries;
        for (cause, n) in &other.aborts {
            *self.aborts.entry(cause.clone()).or_default() += n;
        }
        for (kind, n) in &other.committed_by_kind {
            *self.committed_by_kind.entry(kind).or_default() += n;
        }
    }
}

/// The state the monitor and the client threads share.
struct Shared {
    measuring: AtomicBool,
    stop: AtomicBool,
    /// Commits in the measured period, for the once-a-second samples.
    commits: AtomicU64,
}

struct Recorder<'a> {
    session: Box<dyn Session + 'a>,
    stats: ThreadStats,
    shared: &'a Shared,
}

/// Ends a transaction at its next call once the cell is over, so a transaction that waits and retries
/// for long cannot hold the cell past its end.
struct StopCalls<'a> {
    inner: &'a mut dyn Calls,
    stop: &'a AtomicBool,
}

impl Calls for StopCalls<'_> {
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(CallError::Stopped);
        }
        self.inner.call(args)
    }

    fn write(&mut self, args: &[&[u8]]) -> Result<(), CallError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(CallError::Stopped);
        }
        self.inner.write(args)
    }

    fn call_last(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(CallError::Stopped);
        }
        self.inner.call_last(args)
    }

    fn lock(&mut self, keys: &[&[u8]]) -> Result<(), CallError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(CallError::Stopped);
        }
        self.inner.lock(keys)
    }
}

impl TxnRunner for Recorder<'_> {
    fn run(&mut self, kind: &'static str, body: &mut Body<'_>) -> anyhow::Result<bool> {
        let start = Instant::now();
        let stop = &self.shared.stop;
        let mut guarded = |calls: &mut dyn Calls| body(&mut StopCalls { inner: calls, stop });
        let outcome = self.session.run(&mut guarded)?;
        if !self.shared.measuring.load(Ordering::Relaxed) {
            return Ok(outcome.committed);
        }
        let stats = &mut self.stats;
        stats.retries += u64::from(outcome.retries);
        for cause in outcome.abort_causes {
            *stats.aborts.entry(cause).or_default() += 1;
        }
        if !outcome.committed {
            stats.failed += 1;
            return Ok(false);
        }
        let ns = (start.elapsed().as_nanos() as u64).clamp(1, LATENCY_NS_MAX);
        stats.latency_ns.record(ns).expect("clamped");
        stats.committed += 1;
        *stats.committed_by_kind.entry(kind).or_default() += 1;
        self.shared.commits.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// The timing of a cell.
#[derive(Clone, Copy, Debug)]
pub struct CellTiming {
    pub warmup: Duration,
    pub duration: Duration,
}

/// Hooks the monitor calls at the edges of the measured period (server CPU and INFO snapshots).
pub trait Probe {
    fn start(&mut self) -> anyhow::Result<()>;
    fn stop(&mut self) -> anyhow::Result<()>;
}

/// What a cell measured.
#[derive(Debug)]
pub struct CellMeasurement {
    pub stats: ThreadStats,
    pub duration_s: f64,
    /// Commits per second, one sample per second of the measured period.
    pub timeline_txn_per_s: Vec<f64>,
}

/// Runs `clients` actors of `workload` over sessions of `backend`.
pub fn run_cell(
    workload: &dyn Workload,
    backend: &dyn Backend,
    clients: usize,
    timing: CellTiming,
    seed: u64,
    probe: &mut dyn Probe,
    progress: &dyn Fn(f64, u64),
) -> anyhow::Result<CellMeasurement> {
    let shared = Shared {
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        commits: AtomicU64::new(0),
    };
    let totals = Mutex::new(ThreadStats::new());
    let ready = Barrier::new(clients + 1);
    std::thread::scope(|scope| -> anyhow::Result<CellMeasurement> {
        let handles: Vec<_> = (0..clients)
            .map(|index| {
                let (shared, totals, ready) = (&shared, &totals, &ready);
                scope.spawn(move || {
                    client_thread(workload, backend, index, seed, shared, totals, ready)
                })
            })
            .collect();
        ready.wait();
        let monitored = monitor(&shared, timing, probe, progress);
        shared.stop.store(true, Ordering::Relaxed);
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        }
        let (duration_s, timeline_txn_per_s) = monitored?;
        Ok(CellMeasurement {
            stats: std::mem::replace(&mut *totals.lock().expect("no panics"), ThreadStats::new()),
            duration_s,
            timeline_txn_per_s,
        })
    })
}

fn client_thread(
    workload: &dyn Workload,
    backend: &dyn Backend,
    index: usize,
    seed: u64,
    shared: &Shared,
    totals: &Mutex<ThreadStats>,
    ready: &Barrier,
) -> anyhow::Result<()> {
    let session = backend.session(index);
    // Every thread reaches the barrier, even one that failed to connect, so the monitor never hangs.
    ready.wait();
    let mut recorder = Recorder {
        session: session.with_context(|| format!("client {index}"))?,
        stats: ThreadStats::new(),
        shared,
    };
    let mut actor = workload.actor(index, seed);
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(e) = actor.act(&mut recorder) {
            shared.stop.store(true, Ordering::Relaxed);
            return Err(e.context(format!("client {index}")));
        }
    }
    totals.lock().expect("no panics").merge(&recorder.stats);
    Ok(())
}

/// Warm-up, then the measured period with a sample a second; returns its length and the samples.
fn monitor(
    shared: &Shared,
    timing: CellTiming,
    probe: &mut dyn Probe,
    progress: &dyn Fn(f64, u64),
) -> anyhow::Result<(f64, Vec<f64>)> {
    sleep_unless_stopped(shared, timing.warmup);
    probe.start()?;
    let start = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    let mut timeline = Vec::new();
    let (mut last_commits, mut last_t) = (0u64, start);
    while start.elapsed() < timing.duration && !shared.stop.load(Ordering::Relaxed) {
        let remaining = timing.duration.saturating_sub(start.elapsed());
        sleep_unless_stopped(shared, remaining.min(SAMPLE_INTERVAL));
        let (now, commits) = (Instant::now(), shared.commits.load(Ordering::Relaxed));
        let interval_s = (now - last_t).as_secs_f64();
        // A last partial second under a tenth of a second is too short to be a fair sample.
        if interval_s >= 0.1 {
            timeline.push((commits - last_commits) as f64 / interval_s);
        }
        (last_commits, last_t) = (commits, now);
        progress(start.elapsed().as_secs_f64(), commits);
    }
    shared.measuring.store(false, Ordering::Relaxed);
    let duration_s = start.elapsed().as_secs_f64();
    probe.stop()?;
    Ok((duration_s, timeline))
}

fn sleep_unless_stopped(shared: &Shared, total: Duration) {
    let end = Instant::now() + total;
    while !shared.stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The lowest mean throughput over consecutive windows of `window` one-second samples (RUBiS reports 5 s
/// windows); a run shorter than one window gives its overall mean.
pub fn min_window_mean(samples: &[f64], window: usize) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    if samples.len() < window {
        return samples.iter().sum::<f64>() / samples.len() as f64;
    }
    samples
        .chunks_exact(window)
        .map(|chunk| chunk.iter().sum::<f64>() / window as f64)
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
pub mod testing {
    //! Runs actors without a server: every call is recorded and answered from a fixed table.
    use super::*;
    use crate::txn::backend::{CallError, Calls, Reply};

    /// Records each transaction's kind and commands.
    #[derive(Default)]
    pub struct Recording {
        pub txns: Vec<(&'static str, Vec<Vec<Vec<u8>>>)>,
        /// The reply to array-returning reads (ZRANGE, SMEMBERS, ...).
        pub array_reply: Vec<Vec<u8>>,
    }

    struct RecordingCalls<'a> {
        commands: Vec<Vec<Vec<u8>>>,
        array_reply: &'a [Vec<u8>],
    }

    impl Calls for RecordingCalls<'_> {
        fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
            self.commands
                .push(args.iter().map(|a| a.to_vec()).collect());
            let name = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
            Ok(match name.as_str() {
                "SCARD" | "GET" | "UID.NEXT" => Reply::Int(7),
                n if n.contains("RANGE")
                    || n == "SMEMBERS"
                    || n == "HGETALL"
                    || n == "TOPN.LIST" =>
                {
                    Reply::Array(
                        self.array_reply
                            .iter()
                            .map(|b| Reply::Bulk(b.clone()))
                            .collect(),
                    )
                }
                _ => Reply::Queued,
            })
        }

        fn lock(&mut self, keys: &[&[u8]]) -> Result<(), CallError> {
            let mut command = vec![b"TXN.LOCK".to_vec()];
            command.extend(keys.iter().map(|key| key.to_vec()));
            self.commands.push(command);
            Ok(())
        }
    }

    impl TxnRunner for Recording {
        fn run(&mut self, kind: &'static str, body: &mut Body<'_>) -> anyhow::Result<bool> {
            let mut calls = RecordingCalls {
                commands: Vec::new(),
                array_reply: &self.array_reply,
            };
            body(&mut calls).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            self.txns.push((kind, calls.commands));
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_window_takes_the_worst_full_window() {
        let samples = [10.0, 10.0, 10.0, 10.0, 10.0, 1.0, 1.0, 1.0, 1.0, 6.0, 100.0];
        assert_eq!(min_window_mean(&samples, 5), 2.0);
        assert_eq!(min_window_mean(&[4.0, 6.0], 5), 5.0);
        assert_eq!(min_window_mean(&[], 5), 0.0);
    }
}
