//! What clients' buffers may hold: Redis's `client-output-buffer-limit` per client class and Redis 7.0's
//! `maxmemory-clients` over all clients together.
//!
//! A client's output is the reply bytes built and not yet written to its socket plus the bytes of the
//! pub/sub messages queued for it. A connection reports its buffers only when they are large
//! ([`REPORT_MIN_BYTES`]), so the common small batch touches no shared counter; PUBLISH adds each
//! message's bytes to the subscriber's counter and the connection subtracts them as it takes them.
//! A client over its class's hard limit, or over the soft limit for longer than its seconds, is closed;
//! when all clients together pass `maxmemory-clients`, the one using the most is closed until under.
use super::{ClientHandle, ClientMap};
use crate::log_limit::RateLimited;
use crate::units::parse_bytes;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Buffers smaller than this are not reported (and such a client is never evicted, as in Redis, whose
/// smallest client-eviction bucket is 32 KB).
pub const REPORT_MIN_BYTES: u64 = 32 << 10;
/// A client that held more than this makes the allocator give freed memory back to the system once it
/// is gone (glibc keeps freed chunks below its mmap threshold in its arenas).
pub const TRIM_AFTER_CLIENT_BYTES: u64 = 4 << 20;
/// Closing and eviction warnings are logged at most once per this interval.
const LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// One class's limits; 0 disables a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassLimit {
    pub hard_bytes: u64,
    pub soft_bytes: u64,
    pub soft_seconds: u64,
}

/// Which limits apply to a client: pub/sub when it has subscriptions, else normal (fallow has no
/// replicas; the class exists so Redis's configuration lines are accepted and shown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientClass {
    Normal,
    Replica,
    Pubsub,
}

impl ClientClass {
    fn from_name(name: &str) -> Option<ClientClass> {
        match name.to_ascii_lowercase().as_str() {
            "normal" => Some(ClientClass::Normal),
            "replica" | "slave" => Some(ClientClass::Replica),
            "pubsub" => Some(ClientClass::Pubsub),
            _ => None,
        }
    }
}

/// `client-output-buffer-limit`: the three classes' limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputBufferLimits {
    pub normal: ClassLimit,
    pub replica: ClassLimit,
    pub pubsub: ClassLimit,
}

impl Default for OutputBufferLimits {
    /// Redis's defaults, except normal: Redis leaves it unbounded (`0 0 0`).
    fn default() -> Self {
        let replica = ClassLimit {
            hard_bytes: 256 << 20,
            soft_bytes: 64 << 20,
            soft_seconds: 60,
        };
        OutputBufferLimits {
            normal: replica,
            replica,
            pubsub: ClassLimit {
                hard_bytes: 32 << 20,
                soft_bytes: 8 << 20,
                soft_seconds: 60,
            },
        }
    }
}

const WRONG_ARGUMENT_COUNT: &str = "Wrong number of arguments in buffer limit configuration.";
const INVALID_CLASS: &str = "Invalid client class specified in buffer limit configuration.";
const BAD_NUMBER: &str =
    "Error in hard, soft or soft_seconds setting in buffer limit configuration.";

impl OutputBufferLimits {
    /// Applies `<class> <hard> <soft> <soft-seconds>` groups (one or more) to these limits, as Redis's
    /// CONFIG SET does: classes not named keep their limits. Errors carry Redis's texts.
    pub fn with(&self, text: &str) -> Result<OutputBufferLimits, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() || !words.len().is_multiple_of(4) {
            return Err(WRONG_ARGUMENT_COUNT.into());
        }
        let mut limits = *self;
        for group in words.chunks(4) {
            let class = ClientClass::from_name(group[0]).ok_or(INVALID_CLASS)?;
            let hard_bytes = parse_bytes(group[1]).map_err(|_| BAD_NUMBER)?;
            let soft_bytes = parse_bytes(group[2]).map_err(|_| BAD_NUMBER)?;
            let soft_seconds: u64 = group[3].parse().map_err(|_| BAD_NUMBER)?;
            *limits.class_mut(class) = ClassLimit {
                hard_bytes,
                soft_bytes,
                soft_seconds,
            };
        }
        Ok(limits)
    }

    pub fn class(&self, class: ClientClass) -> ClassLimit {
        match class {
            ClientClass::Normal => self.normal,
            ClientClass::Replica => self.replica,
            ClientClass::Pubsub => self.pubsub,
        }
    }

    fn class_mut(&mut self, class: ClientClass) -> &mut ClassLimit {
        match class {
            ClientClass::Normal => &mut self.normal,
            ClientClass::Replica => &mut self.replica,
            ClientClass::Pubsub => &mut self.pubsub,
        }
    }
}

/// As CONFIG GET shows it (Redis's form, which names the replica class `slave`).
impl std::fmt::Display for OutputBufferLimits {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let classes = [
            ("normal", self.normal),
            ("slave", self.replica),
            ("pubsub", self.pubsub),
        ];
        for (index, (name, limit)) in classes.iter().enumerate() {
            if index > 0 {
                formatter.write_str(" ")?;
            }
            write!(
                formatter,
                "{name} {} {} {}",
                limit.hard_bytes, limit.soft_bytes, limit.soft_seconds
            )?;
        }
        Ok(())
    }
}

impl<'de> serde::Deserialize<'de> for OutputBufferLimits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        OutputBufferLimits::default()
            .with(&text)
            .map_err(serde::de::Error::custom)
    }
}

/// `maxmemory-clients`: bytes, or a percent of maxmemory (of the host's RAM while maxmemory is 0, as in
/// memory-mode elastic); 0 = no bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClientsMemoryLimit {
    Bytes(u64),
    Percent(u64),
}

impl Default for ClientsMemoryLimit {
    /// 1 GiB: four times the normal hard limit, so a few legitimately large replies pass at once, while
    /// 10,000 clients each under their own limit cannot hold more than this together.
    fn default() -> Self {
        ClientsMemoryLimit::Bytes(1 << 30)
    }
}

impl ClientsMemoryLimit {
    /// `1gb`, `1073741824`, `5%` (1..=100), `0`.
    pub fn parse(text: &str) -> Result<ClientsMemoryLimit, String> {
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(number) => match number.parse::<u64>() {
                Ok(percent) if (1..=100).contains(&percent) => {
                    Ok(ClientsMemoryLimit::Percent(percent))
                }
                _ => Err("percentage argument must be between 1 and 100".into()),
            },
            None => parse_bytes(text)
                .map(ClientsMemoryLimit::Bytes)
                .map_err(|_| "argument must be a memory or percent value".into()),
        }
    }

    /// The bound in bytes with `maxmemory` set (0 = none) on a host with `host_bytes` of RAM.
    pub fn bytes(self, maxmemory: u64, host_bytes: u64) -> u64 {
        match self {
            ClientsMemoryLimit::Bytes(bytes) => bytes,
            ClientsMemoryLimit::Percent(percent) => {
                let base = if maxmemory > 0 { maxmemory } else { host_bytes };
                base / 100 * percent
            }
        }
    }
}

impl std::fmt::Display for ClientsMemoryLimit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientsMemoryLimit::Bytes(bytes) => write!(formatter, "{bytes}"),
            ClientsMemoryLimit::Percent(percent) => write!(formatter, "{percent}%"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for ClientsMemoryLimit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::units::deserialize_number_or_text(
            deserializer,
            |bytes| Ok(ClientsMemoryLimit::Bytes(bytes)),
            ClientsMemoryLimit::parse,
        )
    }
}

/// Why a client is closed for its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breach {
    Hard,
    Soft,
}

/// Checks `bytes` of output against `limit` at `now_ms`; `soft_since_ms` remembers when the client went
/// over the soft limit (0 = it is not over), as Redis's `obuf_soft_limit_reached_time` does.
pub fn check(
    limit: ClassLimit,
    bytes: u64,
    soft_since_ms: &AtomicU64,
    now_ms: u64,
) -> Option<Breach> {
    if limit.hard_bytes > 0 && bytes >= limit.hard_bytes {
        return Some(Breach::Hard);
    }
    if limit.soft_bytes == 0 || bytes < limit.soft_bytes {
        soft_since_ms.store(0, Ordering::Relaxed);
        return None;
    }
    let now_ms = now_ms.max(1);
    match soft_since_ms.compare_exchange(0, now_ms, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => None,
        Err(since) => {
            (now_ms.saturating_sub(since) > limit.soft_seconds * 1000).then_some(Breach::Soft)
        }
    }
}

/// When a client over its soft limit is due to be closed (None while it is not over).
pub fn soft_deadline_ms(limit: ClassLimit, soft_since_ms: &AtomicU64) -> Option<u64> {
    let since = soft_since_ms.load(Ordering::Relaxed);
    (since > 0 && limit.soft_bytes > 0).then(|| since + limit.soft_seconds * 1000 + 1)
}

/// One client's buffers as the rest of the server sees them (on its `ClientHandle`).
#[derive(Default)]
pub struct ClientMemory {
    /// Reply bytes built and not yet written (reported when at least `REPORT_MIN_BYTES`).
    pub output_bytes: AtomicU64,
    /// Bytes of pub/sub messages queued for the client and not yet taken by its connection.
    pub pubsub_bytes: AtomicU64,
    /// Request bytes read and not yet executed (reported when at least `REPORT_MIN_BYTES`).
    pub query_bytes: AtomicU64,
    /// The most this client held at once (decides whether its end is worth a malloc_trim).
    pub peak_bytes: AtomicU64,
    /// When the client went over its soft limit, in ms of `ClientsMemory::now_ms` (0 = not over).
    pub soft_since_ms: AtomicU64,
}

impl ClientMemory {
    pub fn output_total(&self) -> u64 {
        self.output_bytes.load(Ordering::Relaxed) + self.pubsub_bytes.load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.output_total() + self.query_bytes.load(Ordering::Relaxed)
    }
}

/// The server's side: settings, the sum of all clients' reported buffers, and the counters INFO shows.
pub struct ClientsMemory {
    settings: RwLock<OutputBufferLimits>,
    /// maxmemory-clients in bytes (0 = no bound), resolved at start and on CONFIG SET.
    pub limit_bytes: AtomicU64,
    /// Sum of every client's reported output, pub/sub and query bytes.
    pub total_bytes: AtomicU64,
    /// Clients closed for passing their output buffer limits (INFO client_output_buffer_limit_disconnections).
    pub output_limit_disconnections: AtomicU64,
    /// Replies refused before they were built (INFO client_output_buffer_limit_refusals).
    pub output_limit_refusals: AtomicU64,
    /// Clients closed because all clients together passed maxmemory-clients (INFO evicted_clients).
    pub evicted_clients: AtomicU64,
    /// A large client went away: the allocator should give its memory back (housekeeping does it).
    pub trim_wanted: AtomicBool,
    evicting: AtomicBool,
    started: Instant,
}

impl Default for ClientsMemory {
    fn default() -> Self {
        ClientsMemory {
            settings: RwLock::new(OutputBufferLimits::default()),
            limit_bytes: AtomicU64::new(ClientsMemoryLimit::default().bytes(0, 0)),
            total_bytes: AtomicU64::new(0),
            output_limit_disconnections: AtomicU64::new(0),
            output_limit_refusals: AtomicU64::new(0),
            evicted_clients: AtomicU64::new(0),
            trim_wanted: AtomicBool::new(false),
            evicting: AtomicBool::new(false),
            started: Instant::now(),
        }
    }
}

impl ClientsMemory {
    /// Takes the settings from the configuration (at start and after CONFIG SET).
    pub fn configure(
        &self,
        output_limits: OutputBufferLimits,
        maxmemory_clients: ClientsMemoryLimit,
        maxmemory_bytes: u64,
    ) {
        *self.settings.write() = output_limits;
        let host_bytes = if matches!(maxmemory_clients, ClientsMemoryLimit::Percent(_))
            && maxmemory_bytes == 0
        {
            host_memory_bytes()
        } else {
            0
        };
        let limit = maxmemory_clients.bytes(maxmemory_bytes, host_bytes);
        self.limit_bytes.store(limit, Ordering::Relaxed);
    }

    pub fn limits(&self) -> OutputBufferLimits {
        *self.settings.read()
    }

    /// Milliseconds since the server started, never 0 (0 means "not over the soft limit").
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Adds a client's growth to the total; true when the total is now over maxmemory-clients.
    pub fn grow(&self, bytes: u64) -> bool {
        let total = self.total_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let limit = self.limit_bytes.load(Ordering::Relaxed);
        limit > 0 && total > limit
    }

    pub fn shrink(&self, bytes: u64) {
        self.total_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Closes `client` for its output (counted once per client).
    pub fn close_for_output(&self, client: &ClientHandle, breach: Breach, bytes: u64) {
        if client.is_killed() {
            return;
        }
        self.output_limit_disconnections
            .fetch_add(1, Ordering::Relaxed);
        // Many clients may pass their limits at once: one line per interval, with the count of the rest.
        static LOG: RateLimited = RateLimited::new(LOG_INTERVAL);
        if let Some(suppressed) = LOG.check() {
            tracing::warn!(
                output_bytes = bytes,
                limit = ?breach,
                suppressed,
                "Client id={} addr={} scheduled to be closed ASAP for overcoming of output buffer limits.",
                client.id,
                client.peer_addr
            );
        }
        client.kill();
    }

    /// A client's buffers go away with it: takes them out of the total.
    pub fn release(&self, client: &ClientHandle) {
        let memory = &client.memory;
        let held = memory.output_bytes.swap(0, Ordering::Relaxed)
            + memory.pubsub_bytes.swap(0, Ordering::Relaxed)
            + memory.query_bytes.swap(0, Ordering::Relaxed);
        self.shrink(held);
        if memory.peak_bytes.load(Ordering::Relaxed) >= TRIM_AFTER_CLIENT_BYTES {
            self.trim_wanted.store(true, Ordering::Relaxed);
        }
    }
}

/// Tells the rest of the server what the client's buffers hold, when they are large enough to matter
/// (two loads of its own counters otherwise); enforces maxmemory-clients when the total passes it.
pub fn report_buffers(
    clients: &ClientMap,
    memory_total: &ClientsMemory,
    handle: &ClientHandle,
    output: u64,
    query: u64,
) {
    let keep = |bytes: u64| if bytes >= REPORT_MIN_BYTES { bytes } else { 0 };
    let (output, query) = (keep(output), keep(query));
    let memory = &handle.memory;
    let old_output = memory.output_bytes.load(Ordering::Relaxed);
    let old_query = memory.query_bytes.load(Ordering::Relaxed);
    if (old_output, old_query) == (output, query) {
        return;
    }
    memory.output_bytes.store(output, Ordering::Relaxed);
    memory.query_bytes.store(query, Ordering::Relaxed);
    let (old, new) = (old_output + old_query, output + query);
    if new <= old {
        return memory_total.shrink(old - new);
    }
    if new >= TRIM_AFTER_CLIENT_BYTES {
        memory.peak_bytes.fetch_max(new, Ordering::Relaxed);
    }
    if memory_total.grow(new - old) {
        enforce_maxmemory_clients(clients, memory_total);
    }
}

/// Closes the clients using the most memory until all clients together are under maxmemory-clients.
/// Clients already closing are not counted; one caller at a time does the work.
pub fn enforce_maxmemory_clients(clients: &ClientMap, memory: &ClientsMemory) {
    let limit = memory.limit_bytes.load(Ordering::Relaxed);
    if limit == 0 || memory.total_bytes.load(Ordering::Relaxed) <= limit {
        return;
    }
    if memory.evicting.swap(true, Ordering::Acquire) {
        return;
    }
    let mut candidates: Vec<(u64, std::sync::Arc<ClientHandle>)> = clients
        .lock()
        .values()
        .filter(|client| !client.is_killed())
        .map(|client| (client.memory.total(), client.clone()))
        .collect();
    let mut total: u64 = candidates.iter().map(|(bytes, _)| bytes).sum();
    candidates.sort_unstable_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
    for (bytes, client) in candidates {
        if total <= limit || bytes < REPORT_MIN_BYTES {
            break;
        }
        memory.evicted_clients.fetch_add(1, Ordering::Relaxed);
        static LOG: RateLimited = RateLimited::new(LOG_INTERVAL);
        if let Some(suppressed) = LOG.check() {
            tracing::warn!(
                client = client.id,
                addr = %client.peer_addr,
                bytes,
                limit,
                suppressed,
                "client evicted: all clients' buffers passed maxmemory-clients"
            );
        }
        client.kill();
        total -= bytes;
    }
    memory.evicting.store(false, Ordering::Release);
}

/// Returns freed heap memory to the system (glibc keeps freed chunks in its arenas); run on a blocking
/// thread after a large client went away, at most once per housekeeping tick.
pub fn trim_if_wanted(memory: &ClientsMemory) {
    if memory.trim_wanted.swap(false, Ordering::Relaxed) {
        tokio::task::spawn_blocking(release_free_heap);
    }
}

fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        let started = Instant::now();
        libc::malloc_trim(0);
        let micros = started.elapsed().as_micros() as u64;
        tracing::debug!(micros, "freed heap memory returned to the system");
    }
}

use crate::elastic::source::host_memory_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_like_redis() {
        let defaults = OutputBufferLimits::default();
        assert_eq!(
            defaults.to_string(),
            "normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        let changed = defaults.with("normal 1mb 512kb 10 PUBSUB 0 1mb 1").unwrap();
        assert_eq!(
            changed.normal,
            ClassLimit {
                hard_bytes: 1 << 20,
                soft_bytes: 512 << 10,
                soft_seconds: 10
            }
        );
        assert_eq!(changed.pubsub.hard_bytes, 0);
        assert_eq!(
            changed.replica, defaults.replica,
            "classes not named keep theirs"
        );
        assert_eq!(
            defaults.with("replica 1 2 3").unwrap().replica.soft_bytes,
            2
        );
        assert_eq!(
            defaults.with("normal 1 2").unwrap_err(),
            WRONG_ARGUMENT_COUNT
        );
        assert_eq!(defaults.with("").unwrap_err(), WRONG_ARGUMENT_COUNT);
        assert_eq!(defaults.with("master 1 2 3").unwrap_err(), INVALID_CLASS);
        assert_eq!(defaults.with("normal 1x 2 3").unwrap_err(), BAD_NUMBER);
        assert_eq!(defaults.with("normal 1 2 -3").unwrap_err(), BAD_NUMBER);
        let shown = changed.to_string();
        assert_eq!(
            defaults.with(&shown).unwrap(),
            changed,
            "CONFIG GET's form reads back"
        );
    }

    #[test]
    fn clients_limit_parses_bytes_and_percent() {
        assert_eq!(
            ClientsMemoryLimit::parse("1gb"),
            Ok(ClientsMemoryLimit::Bytes(1 << 30))
        );
        assert_eq!(
            ClientsMemoryLimit::parse("5%"),
            Ok(ClientsMemoryLimit::Percent(5))
        );
        assert_eq!(
            ClientsMemoryLimit::parse("0"),
            Ok(ClientsMemoryLimit::Bytes(0))
        );
        assert!(ClientsMemoryLimit::parse("0%").is_err());
        assert!(ClientsMemoryLimit::parse("101%").is_err());
        assert!(ClientsMemoryLimit::parse("lots").is_err());
        let percent = ClientsMemoryLimit::Percent(10);
        assert_eq!(percent.bytes(1000, 5000), 100, "a percent of maxmemory");
        assert_eq!(
            percent.bytes(0, 5000),
            500,
            "of the host's RAM without maxmemory"
        );
        assert_eq!(percent.to_string(), "10%");
    }

    #[test]
    fn config_file_takes_both_settings() {
        let config: crate::config::Config = toml::from_str(
            "client-output-buffer-limit = \"pubsub 64mb 16mb 30\"\nmaxmemory-clients = \"10%\"\n",
        )
        .unwrap();
        let limits = config.client_output_buffer_limit;
        assert_eq!(limits.pubsub.hard_bytes, 64 << 20);
        assert_eq!(limits.normal, OutputBufferLimits::default().normal);
        assert_eq!(config.maxmemory_clients, ClientsMemoryLimit::Percent(10));
        let bytes: crate::config::Config = toml::from_str("maxmemory-clients = 1048576\n").unwrap();
        assert_eq!(bytes.maxmemory_clients, ClientsMemoryLimit::Bytes(1 << 20));
        assert!(
            toml::from_str::<crate::config::Config>("client-output-buffer-limit = \"x\"\n")
                .is_err()
        );
    }

    #[test]
    fn hard_limit_closes_at_once() {
        let limit = ClassLimit {
            hard_bytes: 100,
            soft_bytes: 0,
            soft_seconds: 0,
        };
        let since = AtomicU64::new(0);
        assert_eq!(check(limit, 99, &since, 5), None);
        assert_eq!(check(limit, 100, &since, 5), Some(Breach::Hard));
        let unbounded = ClassLimit::default();
        assert_eq!(check(unbounded, u64::MAX, &since, 5), None);
    }

    #[test]
    fn soft_limit_closes_only_when_passed_for_its_seconds() {
        let limit = ClassLimit {
            hard_bytes: 0,
            soft_bytes: 50,
            soft_seconds: 2,
        };
        let since = AtomicU64::new(0);
        assert_eq!(check(limit, 60, &since, 1_000), None, "first time over");
        assert_eq!(soft_deadline_ms(limit, &since), Some(3_001));
        assert_eq!(
            check(limit, 60, &since, 3_000),
            None,
            "over for exactly 2 s"
        );
        assert_eq!(check(limit, 60, &since, 3_001), Some(Breach::Soft));
        assert_eq!(check(limit, 10, &since, 3_002), None, "under again");
        assert_eq!(soft_deadline_ms(limit, &since), None, "the clock restarts");
        assert_eq!(check(limit, 60, &since, 4_000), None);
        assert_eq!(check(limit, 60, &since, 5_000), None);
    }
}
