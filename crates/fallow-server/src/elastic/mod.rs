//! Elastic memory: the pool follows the host's free memory. This module owns the state the controller
//! shares with the rest of the server (`Elastic`: wake-ups, last sample, counters) and starts the
//! controller and PSI threads. The parts: settings (what is configured), source/trace (where host figures
//! come from), psi (pressure trigger), wake (early wake-ups), target (the arithmetic), controller (the
//! thread), store (the controller's hold on fallow-store), report (INFO elastic / ELASTIC STATUS fields).
pub mod controller;
pub mod psi;
pub mod report;
pub mod settings;
pub mod source;
pub mod start;
pub mod store;
pub mod target;
pub mod trace;
pub mod wake;

use controller::{Change, StepReport};
use parking_lot::Mutex;
use source::HostMemory;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use wake::Wake;

/// What the controller last saw and did.
#[derive(Clone, Debug, Default)]
pub struct ElasticStatus {
    /// `proc`, `cgroup2` or `trace`; empty before the first sample.
    pub host_source: &'static str,
    pub host: HostMemory,
    /// The pool target in elastic mode; None in fixed mode and before the first step.
    pub target_bytes: Option<u64>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub reserve_bytes: u64,
    pub shrinks: u64,
    pub grows: u64,
    pub wakeups_pressure: u64,
    /// Where the PSI trigger is armed, or why it is not.
    pub psi_trigger: String,
}

/// Shared between the controller thread and the server (one per `Server`).
#[derive(Default)]
pub struct Elastic {
    pub wake: Arc<Wake>,
    status: Mutex<ElasticStatus>,
    psi_stop: Arc<AtomicBool>,
    controller_thread: Mutex<Option<JoinHandle<()>>>,
}

impl Elastic {
    pub fn status(&self) -> ElasticStatus {
        self.status.lock().clone()
    }

    pub(crate) fn count_pressure_wakeup(&self) {
        self.status.lock().wakeups_pressure += 1;
    }

    /// Stores a step's sample and decision (None in fixed mode).
    pub(crate) fn record_sample(
        &self,
        kind: &'static str,
        host: HostMemory,
        report: Option<StepReport>,
    ) {
        let mut status = self.status.lock();
        status.host_source = kind;
        status.host = host;
        let Some(report) = report else {
            status.target_bytes = None;
            (status.min_bytes, status.max_bytes, status.reserve_bytes) = (0, 0, 0);
            return;
        };
        status.target_bytes = Some(report.target_bytes);
        status.min_bytes = report.min_bytes;
        status.max_bytes = report.max_bytes;
        status.reserve_bytes = report.reserve_bytes;
        match report.change {
            Change::Shrink => status.shrinks += 1,
            Change::Grow => status.grows += 1,
            Change::Same => {}
        }
    }

    /// Stops the controller (waits for its current step) and the PSI thread.
    pub fn stop(&self) {
        self.psi_stop.store(true, Ordering::Relaxed);
        self.wake.stop();
        if let Some(thread) = self.controller_thread.lock().take() {
            let _ = thread.join();
        }
    }
}
