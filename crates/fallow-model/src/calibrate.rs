//! Calibration of this machine: the bandwidths available to applications (Krevat §5), written to JSON.
use serde::{Deserialize, Serialize};

/// Which socket a null-server probe uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Unix,
}

/// One null-server measurement to make: the load generator drives a null server with these settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NullProbeSpec {
    pub transport: Transport,
    /// "resp" or "memcache".
    pub protocol: String,
    pub connections: usize,
    pub pipeline: usize,
    /// Threads the null server runs (its ceiling is the best over the thread counts tried).
    pub server_threads: usize,
    pub duration_ms: u64,
}

/// Measures a null server's request rate (requests per second) for a spec; provided by fallow-bench so
/// this crate stays free of the load generator.
pub type NullProbe = dyn Fn(&NullProbeSpec) -> anyhow::Result<f64>;
