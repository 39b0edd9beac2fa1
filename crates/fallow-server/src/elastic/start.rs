//! Starting the elastic controller: picks the host-memory source (/proc or a replayed trace), arms the
//! PSI trigger, and runs the controller on its own thread over the server's store.
use super::source::{HostSource, ProcSource};
use super::{controller, psi, store, trace, Elastic};
use crate::server::Server;
use std::path::Path;
use std::sync::Arc;

/// Starts the controller thread for `server` (and the PSI watcher where the source is the real host).
pub fn start(server: &Arc<Server>) -> Result<(), String> {
    let trace_path = server.config.read().host_memory_trace.clone();
    let mut source: Box<dyn HostSource> = if trace_path.is_empty() {
        Box::new(ProcSource::new())
    } else {
        Box::new(trace::TraceSource::open(
            Path::new(&trace_path),
            server.started,
            Path::new("/proc"),
        )?)
    };
    let elastic = &server.elastic;
    elastic.status.lock().psi_trigger = arm_psi(elastic, source.as_ref());
    let thread_server = server.clone();
    let thread = std::thread::Builder::new()
        .name("fallow-elastic".into())
        .spawn(move || {
            let server = thread_server;
            let settings = || server.config.read().elastic_settings();
            let pool = store::ElasticPool(&server);
            controller::run(&server.elastic, &pool, source.as_mut(), settings);
        })
        .map_err(|error| format!("cannot start the elastic controller: {error}"))?;
    *elastic.controller_thread.lock() = Some(thread);
    Ok(())
}

/// Arms the PSI trigger; returns what INFO-less diagnostics (the log) say about it.
fn arm_psi(elastic: &Elastic, source: &dyn HostSource) -> String {
    let Some(path) = source.pressure_file() else {
        return format!("off: the {} source has no PSI", source.kind());
    };
    let wake = elastic.wake.clone();
    match psi::spawn_watcher(&path, elastic.psi_stop.clone(), move || wake.pressure()) {
        Ok(trigger) => {
            tracing::info!(path = %path.display(), %trigger, "memory pressure trigger armed");
            format!("armed on {}: {trigger}", path.display())
        }
        Err(reason) => {
            tracing::info!(%reason, "no memory pressure trigger; the elastic controller polls only");
            format!("off: {reason}")
        }
    }
}
