//! The Prometheus endpoint: `GET /metrics` on `metrics-port` answers the OpenMetrics text exposition
//! (encoded by `prometheus-client`) of the pool, the host, reclaims, tenants and the keyspace; any other
//! path is 404. One request per connection: the request head is bounded, a slow or idle client is closed.
use crate::elastic::report::{self, Figures};
use crate::server::Server;
use fallow_store::{PathStats, TenantSnapshot};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head read; longer requests get 431.
const REQUEST_BYTES_MAX: usize = 8192;
/// A client must send its request head within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;
type GaugeU64 = Gauge<u64, AtomicU64>;
type GaugeF64 = Gauge<f64, AtomicU64>;
type CounterF64 = Counter<f64, AtomicU64>;
/// Reads one figure of a tenant.
type TenantFigure<T> = fn(&TenantSnapshot) -> T;

/// What a scrape is answered while the server is out of file descriptors.
const UNAVAILABLE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 31\r\nConnection: close\r\n\r\nout of file descriptors; retry\n";

/// Accepts scrapes until the task is aborted.
pub async fn serve(server: Arc<Server>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                crate::net::accept::failed(&server, error, listener.as_raw_fd(), UNAVAILABLE).await;
                continue;
            }
        };
        let server = server.clone();
        tokio::spawn(async move {
            let answering = answer(&server, stream, peer.ip());
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answering).await;
        });
    }
}

async fn answer(server: &Server, mut stream: TcpStream, peer: IpAddr) -> std::io::Result<()> {
    let response = match read_head(&mut stream).await? {
        // Protected mode covers the endpoint too: it has no password of its own.
        Some(_) if !server.admits(Some(peer)) => {
            plain(403, "Forbidden", crate::net::protected::HTTP_DENIED_BODY)
        }
        Some(head) => respond(server, &head),
        None => plain(
            431,
            "Request Header Fields Too Large",
            "request too large\n",
        ),
    };
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// Reads up to the blank line ending the request head; None when it exceeds the bound.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        if head.len() > REQUEST_BYTES_MAX {
            return Ok(None);
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..read]);
    }
    Ok(Some(head))
}

/// The whole HTTP response for a request head.
pub fn respond(server: &Server, head: &[u8]) -> Vec<u8> {
    let line = head.split(|&byte| byte == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&byte| byte == b' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next());
    let Some(target) = target else {
        return plain(400, "Bad Request", "bad request\n");
    };
    let path = target
        .split(|&byte| byte == b'?')
        .next()
        .unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => {
            let body = render(server);
            http(200, "OK", CONTENT_TYPE, body.as_bytes())
        }
        (b"GET", _) => plain(404, "Not Found", "not found: try /metrics\n"),
        _ => plain(405, "Method Not Allowed", "only GET\n"),
    }
}

fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    http(status, reason, "text/plain; charset=utf-8", body.as_bytes())
}

fn http(status: u16, reason: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

/// A registry filled with this moment's values.
#[derive(Default)]
struct Exposition {
    registry: Registry,
}

impl Exposition {
    fn gauge(&mut self, name: &str, help: &str, value: u64) {
        let gauge = GaugeU64::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    fn gauge_f64(&mut self, name: &str, help: &str, value: f64) {
        let gauge = GaugeF64::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    /// A counter; the encoder appends `_total` to `name`.
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let counter = Counter::<u64>::default();
        counter.inc_by(value);
        self.registry.register(name, help, counter);
    }

    /// One metric with a label: `rows` are (label value, how to set that row's metric).
    fn family<M, F>(&mut self, name: &str, help: &str, label: &'static str, rows: Vec<(String, F)>)
    where
        M: Metric + Default + Clone,
        Family<Labels, M>: Metric,
        F: Fn(&M),
    {
        let family = Family::<Labels, M>::default();
        for (value, set) in rows {
            set(&family.get_or_create(&vec![(label, value)]));
        }
        self.registry.register(name, help, family);
    }
}

/// The exposition text.
pub fn render(server: &Server) -> String {
    let figures = report::figures(server);
    let mut exposition = Exposition::default();
    pool_metrics(&mut exposition, &figures);
    reclaim_metrics(&mut exposition, &figures);
    tenant_metrics(&mut exposition, server);
    server_metrics(&mut exposition, server);
    txn_metrics(&mut exposition, server);
    tier2_metrics(&mut exposition, server);
    fscache_metrics(&mut exposition, server);
    let mut text = String::new();
    encode(&mut text, &exposition.registry).expect("writing to a String cannot fail");
    text
}

/// INFO tier2's numeric fields as gauges `fallow_<field>` (counters since start and sizes alike).
fn tier2_metrics(exposition: &mut Exposition, server: &Server) {
    let Some(durability) = server.durability.get() else {
        return;
    };
    let hits = server.store.sum_shards(|shard| shard.stats.keyspace_hits);
    let uptime_s = server.started.elapsed().as_secs();
    for (name, value) in durability.info_fields(hits, uptime_s) {
        if let Ok(value) = value.parse::<f64>() {
            let help = format!("INFO tier2 {name}");
            exposition.gauge_f64(&format!("fallow_{name}"), &help, value);
        }
    }
}

/// Each mount's last report as gauges `fallow_fscache_<field>{mount="<path>"}`, the mount count and
/// the FSCACHE events.
fn fscache_metrics(exposition: &mut Exposition, server: &Server) {
    let caches = &server.fscache;
    let mounts = caches.snapshot(std::time::Instant::now());
    exposition.gauge_f64(
        "fallow_fscache_mounts",
        "File caches (fallow fs mounts) reporting",
        mounts.len() as f64,
    );
    let events = caches
        .stats
        .fields()
        .into_iter()
        .map(|(event, count)| {
            (event.to_string(), move |counter: &Counter| {
                counter.inc_by(count);
            })
        })
        .collect();
    exposition.family(
        "fallow_fscache_events",
        "FSCACHE reports accepted and refused, mounts added, dropped on disconnect, expired",
        "event",
        events,
    );
    // Field by field: one family per field name, a row per mount that reports it.
    let mut by_field: std::collections::BTreeMap<&str, Vec<(String, f64)>> = Default::default();
    for (mount, report) in &mounts {
        // The label's own escaping (OpenMetrics: \\ \" \n) keeps the page well formed.
        let mount = String::from_utf8_lossy(mount).into_owned();
        for (field, value) in &report.fields {
            by_field
                .entry(field.as_str())
                .or_default()
                .push((mount.clone(), value.as_f64()));
        }
    }
    for (field, rows) in by_field {
        let rows = rows
            .into_iter()
            .map(|(mount, value)| {
                (mount, move |gauge: &GaugeF64| {
                    gauge.set(value);
                })
            })
            .collect();
        let help = format!("fallow fs counter {field}, by mount");
        exposition.family(&format!("fallow_fscache_{field}"), &help, "mount", rows);
    }
}

fn pool_metrics(exposition: &mut Exposition, figures: &Figures) {
    let host = &figures.status.host;
    let gauges: [(&str, &str, u64); 7] = [
        (
            "fallow_pool_target_bytes",
            "Pool target (elastic) or maxmemory (fixed; 0 = unlimited)",
            figures.target_bytes,
        ),
        (
            "fallow_pool_resident_bytes",
            "Bytes the pool holds resident",
            figures.resident_bytes,
        ),
        (
            "fallow_pool_used_bytes",
            "Data bytes (like Redis used_memory)",
            figures.used_bytes,
        ),
        (
            "fallow_pool_floor_bytes",
            "Persistent bytes: the floor of the target",
            figures.floor_bytes,
        ),
        (
            "fallow_process_rss_bytes",
            "Resident set size of the fallow process",
            figures.rss_bytes,
        ),
        (
            "fallow_host_available_bytes",
            "Host memory available to the pool, as last sampled",
            host.available_bytes,
        ),
        (
            "fallow_host_total_bytes",
            "Host memory (or the cgroup limit)",
            host.total_bytes,
        ),
    ];
    for (name, help, value) in gauges {
        exposition.gauge(name, help, value);
    }
    exposition.gauge_f64(
        "fallow_psi_some_avg10",
        "Memory PSI some avg10 (percent)",
        host.psi_some_avg10,
    );
    exposition.gauge_f64(
        "fallow_psi_full_avg10",
        "Memory PSI full avg10 (percent)",
        host.psi_full_avg10,
    );
    let counters: [(&str, &str, u64); 3] = [
        (
            "fallow_controller_shrinks",
            "Controller steps that lowered the target",
            figures.status.shrinks,
        ),
        (
            "fallow_controller_grows",
            "Controller steps that raised the target",
            figures.status.grows,
        ),
        (
            "fallow_controller_wakeups_pressure",
            "Controller wake-ups by the PSI trigger",
            figures.status.wakeups_pressure,
        ),
    ];
    for (name, help, value) in counters {
        exposition.counter(name, help, value);
    }
}

fn reclaim_metrics(exposition: &mut Exposition, figures: &Figures) {
    let paths = [
        ("careful", figures.reclaim.careful),
        ("fast", figures.reclaim.fast),
    ];
    let counter_rows = |figure: fn(&PathStats) -> u64| {
        paths
            .iter()
            .map(move |(path, stats)| {
                let value = figure(stats);
                (path.to_string(), move |counter: &Counter| {
                    counter.inc_by(value);
                })
            })
            .collect::<Vec<_>>()
    };
    exposition.family(
        "fallow_reclaim_runs",
        "Reclaims run",
        "path",
        counter_rows(|stats| stats.runs),
    );
    exposition.family(
        "fallow_reclaim_objects",
        "Objects reclaimed",
        "path",
        counter_rows(|stats| stats.objects),
    );
    exposition.family(
        "fallow_reclaim_bytes",
        "Resident bytes reclaimed",
        "path",
        counter_rows(|stats| stats.bytes),
    );
    let seconds = paths
        .iter()
        .map(|(path, stats)| {
            let value = stats.micros as f64 / 1e6;
            (path.to_string(), move |counter: &CounterF64| {
                counter.inc_by(value);
            })
        })
        .collect();
    exposition.family(
        "fallow_reclaim_seconds",
        "Time spent reclaiming",
        "path",
        seconds,
    );
}

fn tenant_metrics(exposition: &mut Exposition, server: &Server) {
    let tenants = server.store.tenant_snapshots();
    let gauges: [(&str, &str, TenantFigure<f64>); 5] = [
        ("fallow_tenant_weight", "Tenant weight w_i", |tenant| {
            tenant.weight as f64
        }),
        (
            "fallow_tenant_tier2",
            "Tenant items may go to tier 2 (1) or are evicted instead (0)",
            |tenant| f64::from(u8::from(tenant.tier2)),
        ),
        (
            "fallow_tenant_resident_bytes",
            "Tenant resident bytes c_i",
            |tenant| tenant.resident_bytes as f64,
        ),
        (
            "fallow_tenant_share",
            "Tenant share r_i = w_i / sum w",
            |tenant| tenant.share,
        ),
        (
            "fallow_tenant_fairness",
            "Tenant fairness f_i = (c_i / P) / r_i",
            |tenant| tenant.fairness,
        ),
    ];
    for (name, help, figure) in gauges {
        let rows = tenants
            .iter()
            .map(|tenant| {
                let value = figure(tenant);
                (tenant.name.clone(), move |gauge: &GaugeF64| {
                    gauge.set(value);
                })
            })
            .collect();
        exposition.family(name, help, "tenant", rows);
    }
    let counters: [(&str, &str, TenantFigure<u64>); 4] = [
        ("fallow_tenant_hits", "Tenant keyspace hits", |tenant| {
            tenant.hits
        }),
        ("fallow_tenant_misses", "Tenant keyspace misses", |tenant| {
            tenant.misses
        }),
        (
            "fallow_tenant_evicted_keys",
            "Tenant keys evicted or reclaimed",
            |tenant| tenant.evicted_keys,
        ),
        (
            "fallow_tenant_evicted_bytes",
            "Tenant bytes evicted or reclaimed",
            |tenant| tenant.evicted_bytes,
        ),
    ];
    for (name, help, figure) in counters {
        let rows = tenants
            .iter()
            .map(|tenant| {
                let value = figure(tenant);
                (tenant.name.clone(), move |counter: &Counter| {
                    counter.inc_by(value);
                })
            })
            .collect();
        exposition.family(name, help, "tenant", rows);
    }
}

fn server_metrics(exposition: &mut Exposition, server: &Server) {
    let store = &server.store;
    let hits = store.sum_shards(|shard| shard.stats.keyspace_hits);
    let misses = store.sum_shards(|shard| shard.stats.keyspace_misses);
    exposition.counter("fallow_keyspace_hits", "Lookups that found their key", hits);
    exposition.counter(
        "fallow_keyspace_misses",
        "Lookups that did not find their key",
        misses,
    );
    let commands = server.stats.commands_processed.load(Ordering::Relaxed);
    exposition.counter("fallow_commands_processed", "Commands processed", commands);
    exposition.counter(
        "fallow_oom_rejections",
        "Writes refused at the memory limit",
        server.stats.oom_rejections.load(Ordering::Relaxed),
    );
    let clients_memory = &server.clients_memory;
    exposition.counter(
        "fallow_client_output_buffer_limit_disconnections",
        "Clients closed for passing their output buffer limits",
        clients_memory
            .output_limit_disconnections
            .load(Ordering::Relaxed),
    );
    exposition.counter(
        "fallow_evicted_clients",
        "Clients closed because all clients' buffers passed maxmemory-clients",
        clients_memory.evicted_clients.load(Ordering::Relaxed),
    );
    exposition.counter(
        "fallow_acl_access_denied_auth",
        "Failed authentications (a rise may be password guessing)",
        server.acl_log.denials.auth.load(Ordering::Relaxed),
    );
}

fn txn_metrics(exposition: &mut Exposition, server: &Server) {
    let txns = &server.txns;
    let stats = &txns.stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    exposition.counter(
        "fallow_txn_begun",
        "Transactions begun (TXN.BEGIN)",
        load(&stats.begun),
    );
    exposition.counter(
        "fallow_txn_commits",
        "Transactions committed",
        load(&stats.commits),
    );
    let aborts = stats
        .aborts()
        .into_iter()
        .map(|(cause, count)| {
            (cause.to_string(), move |counter: &Counter| {
                counter.inc_by(count);
            })
        })
        .collect();
    exposition.family(
        "fallow_txn_aborts",
        "Transactions aborted, by cause",
        "cause",
        aborts,
    );
    exposition.counter(
        "fallow_txn_lock_waits",
        "Lock requests that queued behind a conflicting mode",
        load(&stats.lock_waits),
    );
    exposition.counter(
        "fallow_txn_busy_replies",
        "Commands refused with TXNBUSY, their transaction left open (TXN.BEGIN BUSY)",
        load(&stats.busy_replies),
    );
    exposition.counter(
        "fallow_txn_deadlocks_on_upgrade",
        "Deadlock aborts of a request on a record its transaction already held in another mode",
        load(&stats.deadlocks_on_upgrade),
    );
    exposition.gauge_f64(
        "fallow_txn_lock_wait_seconds",
        "Time spent waiting for locks, in all",
        load(&stats.lock_wait_us) as f64 / 1e6,
    );
    exposition.gauge(
        "fallow_txn_locked_records",
        "Records locked by transactions now",
        txns.locked_records() as u64,
    );
    let conflicts = txns
        .conflicts()
        .into_iter()
        .map(|((requested, held), count)| {
            (format!("{requested}/{held}"), move |counter: &Counter| {
                counter.inc_by(count);
            })
        })
        .collect();
    exposition.family(
        "fallow_txn_conflicts",
        "Lock requests refused or queued, by (requested mode/held mode)",
        "pair",
        conflicts,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server::for_tests()
    }

    #[test]
    fn metrics_page_names_every_metric() {
        let server = server();
        let response =
            String::from_utf8(respond(&server, b"GET /metrics HTTP/1.1\r\n\r\n")).unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        for name in [
            "fallow_pool_target_bytes ",
            "fallow_pool_resident_bytes ",
            "fallow_pool_floor_bytes ",
            "fallow_process_rss_bytes ",
            "fallow_host_available_bytes ",
            "fallow_host_total_bytes ",
            "fallow_psi_some_avg10 ",
            "fallow_reclaim_objects_total{path=\"careful\"} ",
            "fallow_reclaim_bytes_total{path=\"fast\"} ",
            "fallow_reclaim_seconds_total{path=\"fast\"} ",
            "fallow_reclaim_runs_total{path=\"careful\"} ",
            "fallow_tenant_weight{tenant=\"default\"} ",
            "fallow_tenant_tier2{tenant=\"default\"} 1",
            "fallow_tenant_resident_bytes{tenant=\"default\"} ",
            "fallow_tenant_share{tenant=\"default\"} ",
            "fallow_tenant_fairness{tenant=\"default\"} ",
            "fallow_tenant_hits_total{tenant=\"default\"} ",
            "fallow_tenant_misses_total{tenant=\"default\"} ",
            "fallow_tenant_evicted_keys_total{tenant=\"default\"} ",
            "fallow_tenant_evicted_bytes_total{tenant=\"default\"} ",
            "fallow_keyspace_hits_total ",
            "fallow_keyspace_misses_total ",
            "fallow_commands_processed_total ",
            "fallow_oom_rejections_total ",
            "fallow_client_output_buffer_limit_disconnections_total ",
            "fallow_evicted_clients_total ",
            "fallow_acl_access_denied_auth_total ",
            "fallow_txn_commits_total ",
            "fallow_txn_aborts_total{cause=\"deadlock\"} ",
            "fallow_txn_lock_waits_total ",
            "fallow_txn_locked_records ",
        ] {
            assert!(response.contains(name), "{name} missing from\n{response}");
        }
        assert!(response.ends_with("# EOF\n"));
    }

    #[test]
    fn file_cache_reports_are_gauges_by_mount() {
        use crate::fscache::Value;
        let server = server();
        let fields = vec![
            ("reads".to_string(), Value::Integer(42)),
            (
                "prefetch_accuracy".to_string(),
                Value::Decimal("0.75".into()),
            ),
        ];
        let now = std::time::Instant::now();
        server.fscache.report(b"/mnt/a b", fields, 1, now).unwrap();
        let odd = vec![("reads".to_string(), Value::Integer(1))];
        server
            .fscache
            .report(b"/mnt/\"q\"\n\\", odd, 1, now)
            .unwrap();
        let text = render(&server);
        for line in [
            "fallow_fscache_mounts 2",
            "fallow_fscache_reads{mount=\"/mnt/a b\"} 42",
            "fallow_fscache_prefetch_accuracy{mount=\"/mnt/a b\"} 0.75",
            "fallow_fscache_reads{mount=\"/mnt/\\\"q\\\"\\n\\\\\"} 1",
            "fallow_fscache_events_total{event=\"reports\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        server.fscache.connection_closed(1);
        assert!(!render(&server).contains("fallow_fscache_reads"));
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        let server = server();
        let answer = |head: &[u8]| String::from_utf8(respond(&server, head)).unwrap();
        assert!(answer(b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(answer(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(answer(b"garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(answer(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
    }
}
