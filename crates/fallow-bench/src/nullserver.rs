//! The null server: a minimal epoll server that answers every request with a fixed reply. Its rate under
//! the same connections and pipeline depth as a key-value benchmark is the ceiling for any
//! request/response server on this machine.
use fallow_model::calibrate::NullProbeSpec;

/// Starts a null server, drives it with the load generator as `spec` says, and returns requests/s.
pub fn probe(_spec: &NullProbeSpec) -> anyhow::Result<f64> {
    anyhow::bail!("not yet implemented")
}
