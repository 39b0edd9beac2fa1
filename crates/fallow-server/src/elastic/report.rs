//! What INFO elastic and ELASTIC STATUS show (the same fields, in the same order): mode, pool target and
//! usage, bounds, the host as last sampled, reclaim totals per path and the controller's counters.
use super::settings::MemoryMode;
use super::ElasticStatus;
use crate::server::Server;
use fallow_store::{PathStats, ReclaimStats};
use std::path::Path;

/// The figures INFO elastic, ELASTIC STATUS and /metrics are made of, taken at one moment.
#[derive(Clone, Debug)]
pub struct Figures {
    pub mode: MemoryMode,
    /// The controller's target (elastic) or maxmemory (fixed; 0 = unlimited).
    pub target_bytes: u64,
    pub resident_bytes: u64,
    pub used_bytes: u64,
    pub floor_bytes: u64,
    pub rss_bytes: u64,
    pub status: ElasticStatus,
    pub reclaim: ReclaimStats,
}

pub fn figures(server: &Server) -> Figures {
    let status = server.elastic.status();
    let store = &server.store;
    let (mode, maxmemory) = {
        let config = server.config.read();
        (config.memory_mode, config.maxmemory_bytes)
    };
    let target_bytes = match mode {
        MemoryMode::Fixed => maxmemory,
        MemoryMode::Elastic => status
            .target_bytes
            .unwrap_or(store.pool_limit_bytes() as u64),
    };
    Figures {
        mode,
        target_bytes,
        resident_bytes: store.resident_bytes() as u64,
        used_bytes: store.used_bytes() as u64,
        floor_bytes: store.persistent_bytes() as u64,
        rss_bytes: super::source::process_rss_bytes(Path::new("/proc")),
        status,
        reclaim: store.reclaim_stats(),
    }
}

/// Every INFO elastic field with its value, in order.
pub fn fields(figures: &Figures) -> Vec<(&'static str, String)> {
    let status = &figures.status;
    let host = &status.host;
    let cgroup = host.cgroup.clone().unwrap_or_default();
    let mut fields: Vec<(&'static str, String)> = vec![
        ("memory_mode", figures.mode.name().into()),
        ("pool_target_bytes", figures.target_bytes.to_string()),
        ("pool_resident_bytes", figures.resident_bytes.to_string()),
        ("pool_used_bytes", figures.used_bytes.to_string()),
        ("pool_min_bytes", status.min_bytes.to_string()),
        ("pool_max_bytes", status.max_bytes.to_string()),
        ("pool_reserve_bytes", status.reserve_bytes.to_string()),
        ("pool_floor_bytes", figures.floor_bytes.to_string()),
        ("process_rss_bytes", figures.rss_bytes.to_string()),
        ("host_source", status.host_source.into()),
        ("host_total_bytes", host.total_bytes.to_string()),
        ("host_available_bytes", host.available_bytes.to_string()),
        ("psi_some_avg10", format!("{:.2}", host.psi_some_avg10)),
        ("psi_full_avg10", format!("{:.2}", host.psi_full_avg10)),
        (
            "cgroup_memory_max_bytes",
            cgroup.max_bytes.unwrap_or(0).to_string(),
        ),
        (
            "cgroup_memory_high_bytes",
            cgroup.high_bytes.unwrap_or(0).to_string(),
        ),
        (
            "cgroup_memory_current_bytes",
            cgroup.current_bytes.to_string(),
        ),
    ];
    path_fields(&mut fields, CAREFUL_FIELDS, &figures.reclaim.careful);
    path_fields(&mut fields, FAST_FIELDS, &figures.reclaim.fast);
    let last = figures.reclaim.last;
    fields.extend([
        (
            "reclaim_last_path",
            last.map_or("none", |last| last.path.name()).into(),
        ),
        (
            "reclaim_last_bytes",
            last.map_or(0, |last| last.released_bytes).to_string(),
        ),
        (
            "reclaim_last_us",
            last.map_or(0, |last| last.duration.as_micros()).to_string(),
        ),
        ("controller_shrinks", status.shrinks.to_string()),
        ("controller_grows", status.grows.to_string()),
        (
            "controller_wakeups_pressure",
            status.wakeups_pressure.to_string(),
        ),
    ]);
    fields
}

const CAREFUL_FIELDS: [&str; 4] = [
    "reclaim_careful_runs",
    "reclaim_careful_objects",
    "reclaim_careful_bytes",
    "reclaim_careful_us",
];
const FAST_FIELDS: [&str; 4] = [
    "reclaim_fast_runs",
    "reclaim_fast_objects",
    "reclaim_fast_bytes",
    "reclaim_fast_us",
];

fn path_fields(
    fields: &mut Vec<(&'static str, String)>,
    names: [&'static str; 4],
    stats: &PathStats,
) {
    let values = [stats.runs, stats.objects, stats.bytes, stats.micros];
    fields.extend(names.into_iter().zip(values.map(|value| value.to_string())));
}

/// The `# Elastic` INFO section.
pub fn info_section(server: &Server, text: &mut String) {
    text.push_str("# Elastic\r\n");
    for (name, value) in fields(&figures(server)) {
        text.push_str(name);
        text.push(':');
        text.push_str(&value);
        text.push_str("\r\n");
    }
}
