//! Configuration: embedded defaults, overlaid by a TOML file (`--config`), then by `FALLOW_*` environment
//! variables, then by command-line flags (highest precedence). Names are Redis's `CONFIG GET` names where
//! Redis has the setting. The settings that can change at run time go through `Config::set` (CONFIG SET).
use crate::elastic::settings::{ElasticSettings, MemoryMode, Reserve, POLL_INTERVAL_MS_MAX};
use crate::units::{deserialize_number_or_text, parse_bytes};
pub mod params;
pub mod redis_params;
pub mod rewrite;
use serde::Deserialize;

fn parse_memory_mode(text: &str) -> Result<MemoryMode, String> {
    MemoryMode::from_name(text).ok_or_else(|| "argument must be 'elastic' or 'fixed'".to_string())
}

fn deserialize_bytes<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserialize_number_or_text(deserializer, Ok, parse_bytes)
}

/// The server's command-line flags; each can also come from its `FALLOW_*` environment variable. The
/// `fallow` binary (crates/fallow) flattens them into its command line beside its tool subcommands.
#[derive(clap::Args, Debug, Default)]
pub struct Cli {
    /// TOML configuration file (keys are the long option names, e.g. `maxmemory = "1gb"`).
    #[arg(long, env = "FALLOW_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Address the TCP listeners bind to.
    #[arg(long, env = "FALLOW_BIND")]
    pub bind: Option<String>,
    /// RESP (Redis protocol) TCP port; 0 disables it.
    #[arg(long, env = "FALLOW_PORT")]
    pub port: Option<u16>,
    /// memcached protocol TCP port (text, meta and binary); 0 disables it.
    #[arg(long, env = "FALLOW_MEMCACHE_PORT")]
    pub memcache_port: Option<u16>,
    /// Unix socket path for RESP; an empty string disables it. Default: `$XDG_RUNTIME_DIR/fallow/
    /// fallow-<port>.sock`, `/run/fallow/fallow-<port>.sock` for root, else `${TMPDIR:-/tmp}/fallow-<uid>/
    /// fallow-<port>.sock` (`fallow socket-path --port N` prints it).
    #[arg(long, env = "FALLOW_UNIXSOCKET")]
    pub unixsocket: Option<String>,
    /// Permissions of the Unix socket, octal (700: only this user; 770: and its group; 0: the umask's).
    #[arg(long, env = "FALLOW_UNIXSOCKETPERM")]
    pub unixsocketperm: Option<String>,
    /// yes: with no password for the default user, answer only loopback and Unix-socket clients.
    /// Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_PROTECTED_MODE")]
    pub protected_mode: Option<String>,
    /// Worker threads serving connections; 0 = one per core.
    #[arg(long, env = "FALLOW_THREADS")]
    pub threads: Option<usize>,
    /// Shards (independently locked slices of the keyspace); 0 = 4 per thread, at most 64.
    #[arg(long, env = "FALLOW_SHARDS")]
    pub shards: Option<usize>,
    /// Number of databases (SELECT 0..N-1).
    #[arg(long, env = "FALLOW_DATABASES")]
    pub databases: Option<usize>,
    /// Memory limit for data, e.g. 100mb or 2gb; 0 = unlimited. N > 0 selects memory-mode fixed unless
    /// memory-mode is given. Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_MAXMEMORY")]
    pub maxmemory: Option<String>,
    /// elastic (the pool follows the host's free memory) or fixed (capped by maxmemory).
    #[arg(long, env = "FALLOW_MEMORY_MODE")]
    pub memory_mode: Option<String>,
    /// Memory left to the host in elastic mode: bytes (2gb) or a percent of host RAM (10%).
    #[arg(long, env = "FALLOW_ELASTIC_RESERVE")]
    pub elastic_reserve: Option<String>,
    /// Smallest elastic pool target, e.g. 256mb.
    #[arg(long, env = "FALLOW_ELASTIC_MIN")]
    pub elastic_min: Option<String>,
    /// Largest elastic pool target; 0 = host RAM.
    #[arg(long, env = "FALLOW_ELASTIC_MAX")]
    pub elastic_max: Option<String>,
    /// How fast the elastic target may grow, in bytes per second (e.g. 256mb); shrinking is immediate.
    #[arg(long, env = "FALLOW_ELASTIC_GROW_BYTES_PER_SEC")]
    pub elastic_grow_bytes_per_sec: Option<String>,
    /// How often the controller samples host memory without a pressure event, in ms (1..100).
    #[arg(long, env = "FALLOW_ELASTIC_POLL_INTERVAL_MS")]
    pub elastic_poll_interval_ms: Option<u64>,
    /// A reclaim larger than this drops whole segments (fast path) instead of choosing victims.
    #[arg(long, env = "FALLOW_RECLAIM_FAST_THRESHOLD")]
    pub reclaim_fast_threshold: Option<String>,
    /// Replay this file as the host's available memory instead of reading /proc (tests, experiments).
    #[arg(long, env = "FALLOW_HOST_MEMORY_TRACE")]
    pub host_memory_trace: Option<String>,
    /// Port of the Prometheus endpoint (GET /metrics); 0 disables it.
    #[arg(long, env = "FALLOW_METRICS_PORT")]
    pub metrics_port: Option<u16>,
    /// AF_VSOCK port serving RESP to clients in virtual machines on this host (any CID); 0 disables it.
    #[arg(long, env = "FALLOW_VSOCK_PORT")]
    pub vsock_port: Option<u32>,
    /// What happens at maxmemory: noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru,
    /// volatile-lfu, volatile-random, volatile-ttl. Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_MAXMEMORY_POLICY")]
    pub maxmemory_policy: Option<String>,
    /// Password of the default user (AUTH pass); empty = no password.
    #[arg(long, env = "FALLOW_REQUIREPASS")]
    pub requirepass: Option<String>,
    /// Most simultaneous client connections (RESP and memcached together).
    #[arg(long, env = "FALLOW_MAXCLIENTS")]
    pub maxclients: Option<usize>,
    /// Close RESP connections idle for this many seconds; 0 = never.
    #[arg(long, env = "FALLOW_TIMEOUT")]
    pub timeout: Option<u64>,
    /// Largest bulk string a RESP request may carry, e.g. 512mb.
    #[arg(long, env = "FALLOW_PROTO_MAX_BULK_LEN")]
    pub proto_max_bulk_len: Option<String>,
    /// Largest RESP query buffer of one client before it is disconnected, e.g. 1gb.
    #[arg(long, env = "FALLOW_CLIENT_QUERY_BUFFER_LIMIT")]
    pub client_query_buffer_limit: Option<String>,
    /// A sparse HyperLogLog turns dense past this many bytes (Redis's hll-sparse-max-bytes), e.g. 3000.
    #[arg(long, env = "FALLOW_HLL_SPARSE_MAX_BYTES")]
    pub hll_sparse_max_bytes: Option<String>,
    /// Largest memcached value (memcached -I), e.g. 1mb.
    #[arg(long, env = "FALLOW_MEMCACHE_ITEM_SIZE_MAX")]
    pub memcache_item_size_max: Option<String>,
    /// Size of the memory segments data is stored in, e.g. 1mb (4kb..16mb).
    #[arg(long, env = "FALLOW_SEGMENT_SIZE")]
    pub segment_size: Option<String>,
    /// Background housekeeping (active expiry, compaction) runs per second.
    #[arg(long, env = "FALLOW_HZ")]
    pub hz: Option<u64>,
    /// Pub/sub messages queued for one subscriber before it is disconnected as too slow.
    #[arg(long, env = "FALLOW_PUBSUB_QUEUE_MESSAGES_MAX")]
    pub pubsub_queue_messages_max: Option<usize>,
    /// Keys the client-side caching tracking table holds before its oldest are invalidated (0: no key
    /// bound; `tracking-table-max-bytes` still applies).
    #[arg(long, env = "FALLOW_TRACKING_TABLE_MAX_KEYS")]
    pub tracking_table_max_keys: Option<usize>,
    /// Bytes the client-side caching tracking table holds before its oldest keys are invalidated.
    #[arg(long, env = "FALLOW_TRACKING_TABLE_MAX_BYTES")]
    pub tracking_table_max_bytes: Option<String>,
    /// Redis's `<class> <hard> <soft> <soft-seconds>` groups (classes normal, replica, pubsub), e.g.
    /// "pubsub 32mb 8mb 60": a client whose unwritten replies and queued messages pass its hard limit, or
    /// its soft limit for the seconds given, is closed. Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_CLIENT_OUTPUT_BUFFER_LIMIT")]
    pub client_output_buffer_limit: Option<String>,
    /// Bound on all clients' buffers together (bytes, or N% of maxmemory, of host RAM while maxmemory is
    /// 0); past it the client using the most is closed. 0 = none. Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_MAXMEMORY_CLIENTS")]
    pub maxmemory_clients: Option<String>,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "FALLOW_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// A tenant, `name:weight[:ephemeral|persistent[:yes|no (shared)[:yes|no (tier2)]]]`; repeatable,
    /// added after the file's `tenants`. A RESP user's tenant is the one named like the user.
    #[arg(long = "tenant", env = "FALLOW_TENANTS", value_delimiter = ',')]
    pub tenants: Vec<String>,
    /// Tenant of the memcached listener (the default tenant while none of that name exists).
    /// Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_MEMCACHE_TENANT")]
    pub memcache_tenant: Option<String>,
    /// Entries ACL LOG keeps (denied authentications, commands, keys, channels). Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_ACLLOG_MAX_LEN")]
    pub acllog_max_len: Option<usize>,
    /// Failed authentications a connection may make before each further one is answered late.
    /// Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_AUTH_FAILURES_BEFORE_DELAY")]
    pub auth_failures_before_delay: Option<u32>,
    /// Delay of the first slowed failed authentication, in ms; it doubles with each further failure.
    /// Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_AUTH_FAILURE_DELAY_MS")]
    pub auth_failure_delay_ms: Option<u64>,
    /// Cap of the doubling failed-authentication delay, in ms. Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_AUTH_FAILURE_DELAY_MAX_MS")]
    pub auth_failure_delay_max_ms: Option<u64>,
    /// yes: memcached clients authenticate (binary SASL PLAIN, or credentials in the first text `set`) as
    /// ACL users. no: while the server needs authentication the memcached listener stays closed.
    /// Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_MEMCACHE_AUTH")]
    pub memcache_auth: Option<String>,
    /// yes: clients on the Unix socket may move their connection onto a shared-memory channel
    /// (SHM.OPEN). Changeable with CONFIG SET (open channels stay open).
    #[arg(long, env = "FALLOW_SHM_CHANNELS")]
    pub shm_channels: Option<String>,
    /// Bytes of each of a channel's two rings when the client does not ask, a power of two, e.g. 256kb.
    #[arg(long, env = "FALLOW_SHM_RING_BYTES")]
    pub shm_ring_bytes: Option<String>,
    /// The largest ring a client may ask for with SHM.OPEN RING-BYTES, e.g. 4mb.
    #[arg(long, env = "FALLOW_SHM_RING_BYTES_MAX")]
    pub shm_ring_bytes_max: Option<String>,
    /// Microseconds the server's channel poller spins after its last work before it sleeps (0 sleeps at
    /// once; more answers sooner and burns more CPU while channels are quiet).
    #[arg(long, env = "FALLOW_SHM_SPIN_US")]
    pub shm_spin_us: Option<u64>,
    /// Users (numeric uids, comma-separated) besides the server's own and root whose processes may open
    /// channels.
    #[arg(long, env = "FALLOW_SHM_ALLOWED_UIDS")]
    pub shm_allowed_uids: Option<String>,
    /// Data directory (as Redis's `dir`): lock file, saved tenants and users, the tier-2 file. One server
    /// per directory.
    #[arg(long, env = "FALLOW_DIR")]
    pub dir: Option<String>,
    /// ACL file (as Redis's `aclfile`): users as ACL LIST lines, loaded at start and by ACL LOAD, written
    /// by ACL SAVE. Not changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_ACLFILE")]
    pub aclfile: Option<String>,
    /// Tier 2's file size limit (the file grows as data is written), e.g. 20gb; 0 turns tier 2 off.
    /// Default `auto`: twice the RAM pool's maximum (maxmemory, elastic-max or host RAM), capped by half
    /// the free disk space where the file goes.
    #[arg(long, env = "FALLOW_TIER2_SIZE")]
    pub tier2_size: Option<String>,
    /// Tier 2's file, e.g. on another device; default `<dir>/tier2.dat`.
    #[arg(long, env = "FALLOW_TIER2_PATH")]
    pub tier2_path: Option<String>,
    /// When persistent tenants' writes are made durable, as Redis's appendfsync: always (a write is
    /// answered after its record is on the device; concurrent writers share an fdatasync), everysec (a
    /// crash loses at most about the last second), no.
    #[arg(long, env = "FALLOW_TIER2_FSYNC")]
    pub tier2_fsync: Option<String>,
    /// Which ephemeral values leaving RAM are written to tier 2: frequency (everything while tier 2 has
    /// room, then only values read more often than what cleaning would discard for them), hits (values
    /// read at least tier2-admit-hits times in RAM) or all; under maxmemory-policy noeviction, all.
    #[arg(long, env = "FALLOW_TIER2_ADMISSION")]
    pub tier2_admission: Option<String>,
    /// How tier-2 reads wait for the device: io-uring (submitted from the connection's thread, completions
    /// polled by the event loop; falls back to threads where the kernel refuses io_uring) or threads (a
    /// bounded pool of blocking threads).
    #[arg(long, env = "FALLOW_TIER2_READS")]
    pub tier2_reads: Option<String>,
    /// For tier2-admission hits: reads in RAM a value needs to be written to tier 2 (0: always).
    #[arg(long, env = "FALLOW_TIER2_ADMIT_HITS")]
    pub tier2_admit_hits: Option<u8>,
    /// Size of tier 2's regions (written sequentially, cleaned whole; the largest value a persistent
    /// tenant can store is a little below it), e.g. 4mb (64kb..8mb).
    #[arg(long, env = "FALLOW_TIER2_REGION_SIZE")]
    pub tier2_region_size: Option<String>,
    /// Clean-ahead: bytes per second of cold ephemeral values copied to tier 2 before RAM runs short, so
    /// a shrink keeps them as stubs instead of dropping them (0 = off). Changeable with CONFIG SET.
    #[arg(long, env = "FALLOW_TIER2_CLEAN_AHEAD_BYTES_PER_SEC")]
    pub tier2_clean_ahead_bytes_per_sec: Option<String>,
    /// CONFIG SET of protected parameters (dir, dbfilename): no, yes, or local (loopback and Unix-socket
    /// clients only). As Redis 7's; fixed at start.
    #[arg(long, env = "FALLOW_ENABLE_PROTECTED_CONFIGS")]
    pub enable_protected_configs: Option<String>,
    /// The DEBUG command: no (refused), yes, or local (loopback and Unix-socket clients only).
    #[arg(long, env = "FALLOW_ENABLE_DEBUG_COMMAND")]
    pub enable_debug_command: Option<String>,
    /// The MODULE command (fallow loads no modules): no, yes or local; kept for Redis's CONFIG GET.
    #[arg(long, env = "FALLOW_ENABLE_MODULE_COMMAND")]
    pub enable_module_command: Option<String>,
}

/// Every setting of a running fallow, after defaults, file, environment and flags were merged.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    pub bind: String,
    pub port: u16,
    pub memcache_port: u16,
    /// None: the default path for `port` (see `unix_socket_path`); "" disables the socket.
    pub unixsocket: Option<String>,
    /// Octal permission bits of the socket; 0 leaves them to the umask.
    #[serde(deserialize_with = "deserialize_octal")]
    pub unixsocketperm: u32,
    /// Answer only loopback and Unix-socket clients while the default user needs no password.
    pub protected_mode: bool,
    pub threads: usize,
    pub shards: usize,
    pub databases: usize,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "maxmemory")]
    pub maxmemory_bytes: u64,
    pub maxmemory_policy: String,
    pub memory_mode: MemoryMode,
    pub elastic_reserve: Reserve,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "elastic-min")]
    pub elastic_min_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "elastic-max")]
    pub elastic_max_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    pub elastic_grow_bytes_per_sec: u64,
    pub elastic_poll_interval_ms: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "reclaim-fast-threshold")]
    pub reclaim_fast_threshold_bytes: u64,
    pub host_memory_trace: String,
    pub metrics_port: u16,
    /// AF_VSOCK port of the RESP listener for virtual machines (net/vsock.rs); 0 = off.
    pub vsock_port: u32,
    pub requirepass: String,
    pub maxclients: usize,
    #[serde(rename = "timeout")]
    pub timeout_s: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "proto-max-bulk-len")]
    pub proto_max_bulk_len_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "client-query-buffer-limit")]
    pub client_query_buffer_limit_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    pub hll_sparse_max_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "memcache-item-size-max")]
    pub memcache_item_size_max_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "segment-size")]
    pub segment_size_bytes: u64,
    pub hz: u64,
    pub pubsub_queue_messages_max: usize,
    pub tracking_table_max_keys: usize,
    pub tracking_table_max_bytes: u64,
    pub client_output_buffer_limit: crate::clients::memory::OutputBufferLimits,
    pub maxmemory_clients: crate::clients::memory::ClientsMemoryLimit,
    pub log_level: String,
    /// Tenants defined at startup, `name:weight[:kind[:shared[:tier2]]]` each.
    pub tenants: Vec<String>,
    pub memcache_tenant: String,
    /// memcached clients authenticate as ACL users (SASL PLAIN, text `set` credentials).
    pub memcache_auth: bool,
    /// Shared-memory channels (SHM.OPEN) are offered on the Unix socket.
    pub shm_channels: bool,
    #[serde(deserialize_with = "deserialize_bytes")]
    pub shm_ring_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    pub shm_ring_bytes_max: u64,
    pub shm_spin_us: u64,
    /// Comma-separated uids allowed besides the server's and root's.
    pub shm_allowed_uids: String,
    /// Transactions' lock modes: `abstract` (each data type's, boosting) or `rw` (readers/writers).
    pub txn_locks: String,
    /// Queue lock requests in the record's phaser (yes) or fail fast (no).
    pub txn_phasing: bool,
    pub txn_phase_max_ms: u64,
    pub txn_lock_wait_ms: u64,
    /// A script running longer than this makes commands on its shards answer BUSY (Redis's
    /// `busy-reply-threshold`, alias `lua-time-limit`).
    #[serde(rename = "busy-reply-threshold", alias = "lua-time-limit")]
    pub busy_reply_threshold_ms: u64,
    /// Commands this slow (microseconds) go to the slow log; negative: none, 0: all.
    #[serde(rename = "slowlog-log-slower-than")]
    pub slowlog_log_slower_than_us: i64,
    /// Entries the slow log keeps.
    pub slowlog_max_len: usize,
    /// Scripts lock only their declared keys' shards and may not touch other keys.
    pub lua_strict_keys: bool,
    /// Events this slow (ms) go to the latency monitor (LATENCY); 0: the monitor is off.
    #[serde(rename = "latency-monitor-threshold")]
    pub latency_monitor_threshold_ms: u64,
    /// Per-command latency histograms (LATENCY HISTOGRAM, INFO latencystats).
    pub latency_tracking: bool,
    /// The percentiles INFO latencystats reports, space-separated.
    pub latency_tracking_info_percentiles: String,
    /// Entries ACL LOG keeps.
    pub acllog_max_len: usize,
    /// Keyspace notification classes (Redis's letters), kept in Redis's canonical form.
    pub notify_keyspace_events: String,
    /// Failed authentications per connection answered at once; later ones are delayed.
    pub auth_failures_before_delay: u32,
    /// First delay, doubled per further failure up to `auth_failure_delay_max_ms`.
    pub auth_failure_delay_ms: u64,
    pub auth_failure_delay_max_ms: u64,
    pub dir: String,
    /// Empty: no ACL file (ACL LOAD and SAVE refuse).
    pub aclfile: String,
    pub tier2_size: String,
    pub tier2_path: String,
    pub tier2_fsync: String,
    pub tier2_admission: String,
    pub tier2_reads: String,
    pub tier2_admit_hits: u8,
    #[serde(deserialize_with = "deserialize_bytes")]
    #[serde(rename = "tier2-region-size")]
    pub tier2_region_size_bytes: u64,
    #[serde(deserialize_with = "deserialize_bytes")]
    pub tier2_clean_ahead_bytes_per_sec: u64,
    /// The TOML file the settings were read from (INFO config_file); not a setting itself.
    #[serde(skip)]
    pub config_file: Option<String>,
    /// The Redis parameters fallow keeps itself (`redis_params::ROWS` not fallow's own), as CONFIG GET
    /// shows them; only those that differ from Redis's default are here.
    #[serde(skip)]
    pub redis: std::collections::BTreeMap<&'static str, String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".into(),
            port: 6379,
            memcache_port: 11211,
            unixsocket: None,
            unixsocketperm: 0o700,
            protected_mode: true,
            threads: 0,
            shards: 0,
            databases: 16,
            maxmemory_bytes: 0,
            maxmemory_policy: "noeviction".into(),
            memory_mode: MemoryMode::Elastic,
            elastic_reserve: Reserve::default(),
            elastic_min_bytes: 0,
            elastic_max_bytes: 0,
            elastic_grow_bytes_per_sec: 256 << 20,
            elastic_poll_interval_ms: POLL_INTERVAL_MS_MAX,
            reclaim_fast_threshold_bytes: 1 << 30,
            host_memory_trace: String::new(),
            metrics_port: 0,
            vsock_port: 0,
            requirepass: String::new(),
            maxclients: 10000,
            timeout_s: 0,
            proto_max_bulk_len_bytes: 512 << 20,
            client_query_buffer_limit_bytes: 1 << 30,
            hll_sparse_max_bytes: 3000,
            memcache_item_size_max_bytes: 1 << 20,
            segment_size_bytes: 2 << 20,
            hz: 10,
            pubsub_queue_messages_max: 100_000,
            // Redis's default; fallow adds a byte bound.
            tracking_table_max_keys: 1_000_000,
            tracking_table_max_bytes: crate::tracking::TABLE_BYTES_MAX_DEFAULT,
            client_output_buffer_limit: Default::default(),
            maxmemory_clients: Default::default(),
            log_level: "info".into(),
            tenants: Vec::new(),
            memcache_tenant: "default".into(),
            memcache_auth: false,
            shm_channels: true,
            shm_ring_bytes: 256 << 10,
            shm_ring_bytes_max: 4 << 20,
            shm_spin_us: 50,
            shm_allowed_uids: String::new(),
            txn_locks: "abstract".into(),
            txn_phasing: true,
            txn_phase_max_ms: 10,
            txn_lock_wait_ms: 500,
            busy_reply_threshold_ms: 5_000,
            slowlog_log_slower_than_us: 10_000,
            slowlog_max_len: 128,
            lua_strict_keys: false,
            latency_monitor_threshold_ms: 0,
            latency_tracking: true,
            latency_tracking_info_percentiles: "50 99 99.9".into(),
            acllog_max_len: 128,
            notify_keyspace_events: String::new(),
            auth_failures_before_delay: 10,
            auth_failure_delay_ms: 100,
            auth_failure_delay_max_ms: 2000,
            dir: "./fallow-data".into(),
            aclfile: String::new(),
            tier2_size: "auto".into(),
            tier2_path: String::new(),
            tier2_fsync: "everysec".into(),
            tier2_admission: "frequency".into(),
            tier2_reads: "io-uring".into(),
            tier2_admit_hits: 1,
            tier2_region_size_bytes: 4 << 20,
            tier2_clean_ahead_bytes_per_sec: 8 << 20,
            config_file: None,
            redis: Default::default(),
        }
    }
}

impl Config {
    /// Merges defaults, the TOML file, then environment and flags (clap has already merged those two).
    pub fn load(cli: &Cli) -> Result<Config, String> {
        let (mut config, mut mode_explicit) = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
                Config::parse_toml(&text).map_err(|error| format!("{}: {error}", path.display()))?
            }
            None => (Config::default(), false),
        };
        config.config_file = cli.config.as_ref().map(|path| path.display().to_string());
        config.apply_cli(cli)?;
        mode_explicit |= cli.memory_mode.is_some();
        config.resolve_defaults();
        config.resolve_memory_mode(mode_explicit)?;
        config.validate()?;
        config.check_trace_file()?;
        Ok(config)
    }

    /// A config file's settings over the defaults, and whether it names `memory-mode` (else `maxmemory`
    /// implies fixed).
    fn parse_toml(text: &str) -> Result<(Config, bool), String> {
        let mut table: toml::Table = text.parse().map_err(|error| format!("{error}"))?;
        let mode_explicit = table.contains_key("memory-mode");
        let redis = take_redis_params(&mut table)?;
        let mut config: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|error| format!("{error}"))?;
        for (row, value) in redis {
            config
                .set_redis(row, &value)
                .map_err(|message| format!("{} '{value}': {message}", row.name))?;
        }
        Ok((config, mode_explicit))
    }

    /// What a config file alone gives, resolved and validated as `load` does (without flags, environment or
    /// reading a trace file): the path the `config_file` fuzz target exercises.
    pub fn from_toml_str(text: &str) -> Result<Config, String> {
        let (mut config, mode_explicit) = Config::parse_toml(text)?;
        config.resolve_defaults();
        config.resolve_memory_mode(mode_explicit)?;
        config.validate()?;
        Ok(config)
    }

    fn apply_cli(&mut self, cli: &Cli) -> Result<(), String> {
        // `flag` or `flag => field` where the field's name carries its unit (`timeout => timeout_s`)
        macro_rules! plain {
            ($($flag:ident $(=> $field:ident)?),*) => { $(
                if let Some(value) = &cli.$flag { plain!(@set $flag $($field)?, value.clone()); }
            )* };
            (@set $flag:ident, $value:expr) => { self.$flag = $value };
            (@set $flag:ident $field:ident, $value:expr) => { self.$field = $value };
        }
        macro_rules! bytes {
            ($($flag:ident => $field:ident),*) => { $(
                if let Some(value) = &cli.$flag { self.$field = parse_bytes(value)?; }
            )* };
        }
        plain!(
            bind,
            port,
            memcache_port,
            threads,
            shards,
            databases,
            maxmemory_policy,
            requirepass,
            maxclients,
            timeout => timeout_s,
            hz,
            pubsub_queue_messages_max,
            tracking_table_max_keys,
            log_level,
            memcache_tenant,
            dir,
            aclfile,
            tier2_size,
            tier2_path,
            tier2_fsync,
            tier2_admission,
            tier2_reads,
            tier2_admit_hits
        );
        self.tenants.extend(cli.tenants.iter().cloned());
        bytes!(
            maxmemory => maxmemory_bytes,
            proto_max_bulk_len => proto_max_bulk_len_bytes,
            client_query_buffer_limit => client_query_buffer_limit_bytes,
            hll_sparse_max_bytes => hll_sparse_max_bytes,
            memcache_item_size_max => memcache_item_size_max_bytes,
            tracking_table_max_bytes => tracking_table_max_bytes,
            shm_ring_bytes => shm_ring_bytes,
            shm_ring_bytes_max => shm_ring_bytes_max,
            segment_size => segment_size_bytes,
            elastic_min => elastic_min_bytes,
            elastic_max => elastic_max_bytes,
            elastic_grow_bytes_per_sec => elastic_grow_bytes_per_sec,
            reclaim_fast_threshold => reclaim_fast_threshold_bytes,
            tier2_region_size => tier2_region_size_bytes,
            tier2_clean_ahead_bytes_per_sec => tier2_clean_ahead_bytes_per_sec
        );
        plain!(elastic_poll_interval_ms, host_memory_trace, metrics_port);
        plain!(shm_spin_us, shm_allowed_uids);
        plain!(vsock_port);
        plain!(
            acllog_max_len,
            auth_failures_before_delay,
            auth_failure_delay_ms,
            auth_failure_delay_max_ms
        );
        if let Some(mode) = &cli.memory_mode {
            self.memory_mode = parse_memory_mode(mode)?;
        }
        if let Some(reserve) = &cli.elastic_reserve {
            self.elastic_reserve = Reserve::parse(reserve)?;
        }
        self.apply_listener_flags(cli)?;
        if let Some(limits) = &cli.client_output_buffer_limit {
            self.client_output_buffer_limit = self
                .client_output_buffer_limit
                .with(limits)
                .map_err(|message| format!("client-output-buffer-limit: {message}"))?;
        }
        if let Some(limit) = &cli.maxmemory_clients {
            self.maxmemory_clients = crate::clients::memory::ClientsMemoryLimit::parse(limit)
                .map_err(|message| format!("maxmemory-clients: {message}"))?;
        }
        for (name, value) in [
            ("enable-protected-configs", &cli.enable_protected_configs),
            ("enable-debug-command", &cli.enable_debug_command),
            ("enable-module-command", &cli.enable_module_command),
        ] {
            if let Some(value) = value {
                let row = redis_params::find(name).expect("a Redis parameter");
                self.set_redis(row, value)
                    .map_err(|message| format!("{name} '{value}': {message}"))?;
            }
        }
        if let Some(auth) = &cli.memcache_auth {
            self.memcache_auth =
                parse_yes_no(auth).map_err(|message| format!("memcache-auth: {message}"))?;
        }
        if let Some(on) = &cli.shm_channels {
            self.shm_channels =
                parse_yes_no(on).map_err(|message| format!("shm-channels: {message}"))?;
        }
        Ok(())
    }

    fn apply_listener_flags(&mut self, cli: &Cli) -> Result<(), String> {
        if let Some(path) = &cli.unixsocket {
            self.unixsocket = Some(path.clone());
        }
        if let Some(perm) = &cli.unixsocketperm {
            self.unixsocketperm =
                parse_octal_perm(perm).map_err(|message| format!("unixsocketperm: {message}"))?;
        }
        if let Some(protected) = &cli.protected_mode {
            self.protected_mode =
                parse_yes_no(protected).map_err(|message| format!("protected-mode: {message}"))?;
        }
        Ok(())
    }

    /// The memcached port's control socket (SHM.OPEN opens memcached channels there by default): bound at
    /// the default path for the memcached port, only while the RESP socket is at its default path too.
    pub fn memcache_control_socket_path(&self) -> Option<std::path::PathBuf> {
        let wanted = self.unixsocket.is_none() && self.memcache_port != 0 && self.shm_channels;
        wanted.then(|| fallow_proto::socket_path::default_socket_path(self.memcache_port))
    }

    /// The Unix socket to bind: the configured path, or the default one for the RESP port
    /// (`fallow_proto::socket_path`, the rule tools and clients share); None when disabled.
    pub fn unix_socket_path(&self) -> Option<std::path::PathBuf> {
        match self.unixsocket.as_deref() {
            Some("") => None,
            Some(path) => Some(path.into()),
            None => Some(fallow_proto::socket_path::default_socket_path(self.port)),
        }
    }

    fn resolve_defaults(&mut self) {
        if self.threads == 0 {
            self.threads = std::thread::available_parallelism()
                .map(|cores| cores.get())
                .unwrap_or(1);
        }
        if self.shards == 0 {
            self.shards = (self.threads * 4).clamp(1, 64);
        }
        self.hz = params::clamp_hz(self.hz);
        // Policy names match in any case; CONFIG GET shows them in lower case, as CONFIG SET stores them.
        self.maxmemory_policy.make_ascii_lowercase();
        // CONFIG GET shows the classes as Redis writes them (`KEA` reads `AKE`); a bad value is left for
        // `validate` to refuse.
        if let Ok(flags) = crate::notify::parse_classes(&self.notify_keyspace_events) {
            self.notify_keyspace_events = crate::notify::classes_text(flags);
        }
    }

    /// `maxmemory N>0` without an explicit `memory-mode` means fixed; elastic mode ignores no limit silently.
    fn resolve_memory_mode(&mut self, explicit: bool) -> Result<(), String> {
        if !explicit && self.maxmemory_bytes > 0 {
            self.memory_mode = MemoryMode::Fixed;
        }
        if self.memory_mode == MemoryMode::Elastic && self.maxmemory_bytes > 0 {
            return Err(
                "maxmemory applies to memory-mode fixed; cap an elastic pool with elastic-max"
                    .into(),
            );
        }
        Ok(())
    }

    /// Checks every setting; CONFIG SET calls it after applying all its pairs.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_elastic()?;
        if !(1..=64).contains(&self.shards) {
            return Err("shards must be 1..64".into());
        }
        if !(1..=256).contains(&self.databases) {
            return Err("databases must be 1..256".into());
        }
        if !(4096..=16 << 20).contains(&self.segment_size_bytes) {
            return Err("segment-size must be 4kb..16mb".into());
        }
        self.validate_tier2()?;
        if fallow_store::EvictionPolicy::from_name(&self.maxmemory_policy).is_none() {
            return Err(format!(
                "unknown maxmemory-policy '{}'",
                self.maxmemory_policy
            ));
        }
        if self.hz == 0 || self.hz > params::HZ_MAX {
            return Err(format!("hz must be 1..{}", params::HZ_MAX));
        }
        if self.txn_locks != "abstract" && self.txn_locks != "rw" {
            return Err("txn-locks must be abstract or rw".into());
        }
        self.validate_tenants()?;
        self.validate_runtime_params()
    }

    /// The runtime settings obey the same ranges at start (file, environment, flags) as under CONFIG SET.
    fn validate_runtime_params(&self) -> Result<(), String> {
        for (name, value) in self.entries() {
            if let Some(param) = params::find(name) {
                param
                    .kind
                    .parse(&value)
                    .map_err(|message| format!("{name} '{value}': {message}"))?;
            }
        }
        log_filter(&self.log_level)?;
        if self.auth_failure_delay_ms > self.auth_failure_delay_max_ms {
            return Err("auth-failure-delay-ms must not exceed auth-failure-delay-max-ms".into());
        }
        Ok(())
    }

    /// The elastic controller's settings, as one snapshot (each step of the controller takes one).
    pub fn elastic_settings(&self) -> ElasticSettings {
        ElasticSettings {
            mode: self.memory_mode,
            reserve: self.elastic_reserve,
            min_bytes: self.elastic_min_bytes,
            max_bytes: self.elastic_max_bytes,
            grow_bytes_per_sec: self.elastic_grow_bytes_per_sec,
            poll_interval_ms: self.elastic_poll_interval_ms,
            reclaim_fast_threshold_bytes: self.reclaim_fast_threshold_bytes,
        }
    }

    /// What the transactions' lock table follows.
    /// `latency-tracking-info-percentiles` as numbers (checked when set).
    pub fn latency_percentiles(&self) -> Vec<f64> {
        self.latency_tracking_info_percentiles
            .split_whitespace()
            .filter_map(|word| word.parse().ok())
            .collect()
    }

    pub fn txn_settings(&self) -> crate::txn::TxnSettings {
        crate::txn::TxnSettings {
            abstract_locks: self.txn_locks == "abstract",
            phasing: self.txn_phasing,
            phase_max_ms: self.txn_phase_max_ms,
        }
    }

    fn validate_tenants(&self) -> Result<(), String> {
        for declaration in &self.tenants {
            let spec = crate::tenants::parse_declaration(declaration)?;
            if spec.name == "default" && !spec.shared {
                return Err("tenant 'default' lives in the common keyspace (shared)".into());
            }
        }
        if !crate::tenants::valid_name(&self.memcache_tenant) {
            return Err(format!(
                "invalid memcache-tenant '{}'",
                self.memcache_tenant
            ));
        }
        Ok(())
    }

    /// A bad `--host-memory-trace` file stops the start with the file's line, not later in the controller.
    fn check_trace_file(&self) -> Result<(), String> {
        if self.host_memory_trace.is_empty() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.host_memory_trace)
            .map_err(|error| format!("cannot read {}: {error}", self.host_memory_trace))?;
        crate::elastic::trace::Trace::parse(&text)
            .map(|_| ())
            .map_err(|error| format!("{}: {error}", self.host_memory_trace))
    }

    fn validate_elastic(&self) -> Result<(), String> {
        if self.elastic_max_bytes != 0 && self.elastic_min_bytes > self.elastic_max_bytes {
            return Err("elastic-min must not exceed elastic-max".into());
        }
        if !(1..=POLL_INTERVAL_MS_MAX).contains(&self.elastic_poll_interval_ms) {
            return Err(format!(
                "elastic-poll-interval-ms must be 1..{POLL_INTERVAL_MS_MAX}"
            ));
        }
        if self.elastic_grow_bytes_per_sec == 0 {
            return Err("elastic-grow-bytes-per-sec must be above 0".into());
        }
        Ok(())
    }

    fn validate_tier2(&self) -> Result<(), String> {
        if self.dir.is_empty() {
            return Err("dir must name a directory".into());
        }
        if self.tier2_size != "auto" {
            crate::units::parse_bytes(&self.tier2_size)
                .map_err(|error| format!("tier2-size must be auto or a size: {error}"))?;
        }
        if fallow_store::tier2::FsyncPolicy::from_name(&self.tier2_fsync).is_none() {
            return Err(format!(
                "tier2-fsync must be always, everysec or no, not '{}'",
                self.tier2_fsync
            ));
        }
        if fallow_store::admission::AdmissionRule::from_name(&self.tier2_admission).is_none() {
            return Err(format!(
                "tier2-admission must be frequency, hits or all, not '{}'",
                self.tier2_admission
            ));
        }
        if !matches!(self.tier2_reads.as_str(), "io-uring" | "threads") {
            return Err(format!(
                "tier2-reads must be io-uring or threads, not '{}'",
                self.tier2_reads
            ));
        }
        let region = self.tier2_region_size_bytes;
        if !(64 << 10..=8 << 20).contains(&region) || !region.is_multiple_of(4096) {
            return Err("tier2-region-size must be a multiple of 4kb in 64kb..8mb".into());
        }
        Ok(())
    }

    /// Every setting as CONFIG GET reports it, in a fixed order.
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        vec![
            ("bind", self.bind.clone()),
            ("port", self.port.to_string()),
            ("memcache-port", self.memcache_port.to_string()),
            (
                "unixsocket",
                self.unix_socket_path()
                    .map(|path| path.display().to_string())
                    .unwrap_or_default(),
            ),
            ("unixsocketperm", format!("{:o}", self.unixsocketperm)),
            ("protected-mode", yes_no(self.protected_mode).into()),
            ("threads", self.threads.to_string()),
            ("shards", self.shards.to_string()),
            ("databases", self.databases.to_string()),
            ("maxmemory", self.maxmemory_bytes.to_string()),
            ("maxmemory-policy", self.maxmemory_policy.clone()),
            ("memory-mode", self.memory_mode.name().into()),
            ("elastic-reserve", self.elastic_reserve.to_string()),
            ("elastic-min", self.elastic_min_bytes.to_string()),
            ("elastic-max", self.elastic_max_bytes.to_string()),
            (
                "elastic-grow-bytes-per-sec",
                self.elastic_grow_bytes_per_sec.to_string(),
            ),
            (
                "elastic-poll-interval-ms",
                self.elastic_poll_interval_ms.to_string(),
            ),
            (
                "reclaim-fast-threshold",
                self.reclaim_fast_threshold_bytes.to_string(),
            ),
            ("host-memory-trace", self.host_memory_trace.clone()),
            ("metrics-port", self.metrics_port.to_string()),
            ("vsock-port", self.vsock_port.to_string()),
            ("requirepass", self.requirepass.clone()),
            ("maxclients", self.maxclients.to_string()),
            ("timeout", self.timeout_s.to_string()),
            (
                "proto-max-bulk-len",
                self.proto_max_bulk_len_bytes.to_string(),
            ),
            (
                "client-query-buffer-limit",
                self.client_query_buffer_limit_bytes.to_string(),
            ),
            (
                "hll-sparse-max-bytes",
                self.hll_sparse_max_bytes.to_string(),
            ),
            (
                "memcache-item-size-max",
                self.memcache_item_size_max_bytes.to_string(),
            ),
            ("segment-size", self.segment_size_bytes.to_string()),
            ("hz", self.hz.to_string()),
            (
                "pubsub-queue-messages-max",
                self.pubsub_queue_messages_max.to_string(),
            ),
            (
                "tracking-table-max-keys",
                self.tracking_table_max_keys.to_string(),
            ),
            (
                "tracking-table-max-bytes",
                self.tracking_table_max_bytes.to_string(),
            ),
            (
                "client-output-buffer-limit",
                self.client_output_buffer_limit.to_string(),
            ),
            ("maxmemory-clients", self.maxmemory_clients.to_string()),
            ("log-level", self.log_level.clone()),
            ("memcache-tenant", self.memcache_tenant.clone()),
            ("memcache-auth", yes_no(self.memcache_auth).into()),
            ("shm-channels", yes_no(self.shm_channels).into()),
            ("shm-ring-bytes", self.shm_ring_bytes.to_string()),
            ("shm-ring-bytes-max", self.shm_ring_bytes_max.to_string()),
            ("shm-spin-us", self.shm_spin_us.to_string()),
            ("shm-allowed-uids", self.shm_allowed_uids.clone()),
            ("txn-locks", self.txn_locks.clone()),
            ("txn-phasing", yes_no(self.txn_phasing).into()),
            ("txn-phase-max-ms", self.txn_phase_max_ms.to_string()),
            ("txn-lock-wait-ms", self.txn_lock_wait_ms.to_string()),
            (
                "busy-reply-threshold",
                self.busy_reply_threshold_ms.to_string(),
            ),
            ("lua-time-limit", self.busy_reply_threshold_ms.to_string()),
            (
                "slowlog-log-slower-than",
                self.slowlog_log_slower_than_us.to_string(),
            ),
            ("slowlog-max-len", self.slowlog_max_len.to_string()),
            ("lua-strict-keys", yes_no(self.lua_strict_keys).into()),
            (
                "latency-monitor-threshold",
                self.latency_monitor_threshold_ms.to_string(),
            ),
            ("latency-tracking", yes_no(self.latency_tracking).into()),
            (
                "latency-tracking-info-percentiles",
                self.latency_tracking_info_percentiles.clone(),
            ),
            ("acllog-max-len", self.acllog_max_len.to_string()),
            (
                "notify-keyspace-events",
                self.notify_keyspace_events.clone(),
            ),
            (
                "auth-failures-before-delay",
                self.auth_failures_before_delay.to_string(),
            ),
            (
                "auth-failure-delay-ms",
                self.auth_failure_delay_ms.to_string(),
            ),
            (
                "auth-failure-delay-max-ms",
                self.auth_failure_delay_max_ms.to_string(),
            ),
            ("dir", self.dir.clone()),
            ("aclfile", self.aclfile.clone()),
            ("tier2-size", self.tier2_size.clone()),
            ("tier2-path", self.tier2_path.clone()),
            ("tier2-fsync", self.tier2_fsync.clone()),
            ("tier2-admission", self.tier2_admission.clone()),
            ("tier2-reads", self.tier2_reads.clone()),
            ("tier2-admit-hits", self.tier2_admit_hits.to_string()),
            (
                "tier2-region-size",
                self.tier2_region_size_bytes.to_string(),
            ),
            (
                "tier2-clean-ahead-bytes-per-sec",
                self.tier2_clean_ahead_bytes_per_sec.to_string(),
            ),
            // Settings Redis clients and tools ask for: no RDB snapshots or AOF (persistent tenants
            // are logged to tier 2 instead).
            ("save", String::new()),
            ("appendonly", "no".into()),
        ]
    }

    /// Changes one setting at run time: a row of `params::PARAMS` or a Redis parameter fallow keeps
    /// checks and stores the value. Err(message) for unknown or read-only names and bad values (Redis's
    /// texts).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.check_settable(name)?;
        let name = name.to_ascii_lowercase();
        if let Some(param) = params::find(&name) {
            let value = param.kind.parse(value)?;
            (param.apply)(self, &value);
            return Ok(());
        }
        let row = redis_params::find(&name).expect("check_settable found it");
        self.set_redis(row, value)
    }

    /// Whether CONFIG SET may change `name` at all (Redis checks every name before any value).
    pub fn check_settable(&self, name: &str) -> Result<(), String> {
        let name = name.to_ascii_lowercase();
        if params::find(&name).is_some() {
            return Ok(());
        }
        let immutable = Err("can't set immutable config".to_string());
        match redis_params::find(&name) {
            Some(row) if row.is_kept_here() && !row.is(redis_params::IMMUTABLE) => Ok(()),
            Some(_) => immutable,
            None if self.entries().iter().any(|(known, _)| *known == name) => immutable,
            None => Err("Unknown option or number of arguments for CONFIG SET".into()),
        }
    }

    /// Stores a Redis parameter fallow keeps (also the immutable ones: this is the start's path too):
    /// Redis's check, then the refusal of a value fallow cannot honour.
    pub fn set_redis(
        &mut self,
        row: &'static redis_params::Row,
        value: &str,
    ) -> Result<(), String> {
        assert!(row.is_kept_here(), "{} is a fallow setting", row.name);
        let shown = row.kind.parse(value)?.shown();
        if let redis_params::Use::Only(accepted, why) = row.fallow {
            if !accepted.contains(&shown.as_str()) {
                let quoted: Vec<String> = accepted
                    .iter()
                    .map(|value| match *value {
                        "" => "\"\"".to_string(),
                        other => format!("'{other}'"),
                    })
                    .collect();
                return Err(format!("{why}; only {} is accepted", quoted.join(", ")));
            }
        }
        if shown == row.default {
            self.redis.remove(row.name);
        } else {
            self.redis.insert(row.name, shown);
        }
        Ok(())
    }

    /// The value of a Redis parameter fallow keeps (its Redis default until set).
    pub fn redis_value(&self, name: &str) -> &str {
        let row = redis_params::find(name).expect("a Redis parameter");
        debug_assert!(row.is_kept_here(), "{name} is a fallow setting");
        self.redis
            .get(row.name)
            .map(String::as_str)
            .unwrap_or(row.default)
    }

    /// Every parameter CONFIG GET knows, as (name, value, hidden): fallow's settings, then the Redis
    /// parameters fallow keeps, each alias beside its name. Hidden ones (Redis's HIDDEN_CONFIG) are
    /// listed only for an exact name.
    pub fn get_entries(&self) -> Vec<(&'static str, String, bool)> {
        let mut entries: Vec<(&'static str, String, bool)> = self
            .entries()
            .into_iter()
            .map(|(name, value)| (name, value, false))
            .collect();
        for row in redis_params::ROWS.iter().filter(|row| row.is_kept_here()) {
            let value = self.redis_value(row.name).to_string();
            let hidden = row.is(redis_params::HIDDEN);
            if let Some(alias) = row.alias {
                entries.push((alias, value.clone(), hidden));
            }
            entries.push((row.name, value, hidden));
        }
        entries
    }

    /// Whether a client may use what an `enable-*` parameter guards (Redis's allowProtectedAction):
    /// `yes` anyone, `local` loopback and Unix-socket clients.
    pub fn allows(&self, switch: &str, local_client: bool) -> bool {
        match self.redis_value(switch) {
            "yes" => true,
            "local" => local_client,
            _ => false,
        }
    }

    /// The encoding thresholds (Redis's *-max-listpack-*, set-max-intset-entries, ...) the serialized
    /// forms follow (DUMP, MIGRATE).
    pub fn encoding_limits(&self) -> fallow_store::rdb::EncodingLimits {
        let number = |name: &str| -> i64 {
            self.redis_value(name)
                .parse()
                .expect("stored values passed their Int or Bytes check")
        };
        let size = |name: &str| usize::try_from(number(name)).unwrap_or(usize::MAX);
        fallow_store::rdb::EncodingLimits {
            hash_max_listpack_entries: size("hash-max-listpack-entries"),
            hash_max_listpack_value_bytes: size("hash-max-listpack-value"),
            zset_max_listpack_entries: size("zset-max-listpack-entries"),
            zset_max_listpack_value_bytes: size("zset-max-listpack-value"),
            set_max_intset_entries: size("set-max-intset-entries"),
            list_max_listpack_size: i32::try_from(number("list-max-listpack-size"))
                .expect("checked to i32's range"),
            list_compress_depth_nodes: size("list-compress-depth"),
            rdb_compression: self.redis_value("rdbcompression") == "yes",
            ..Default::default()
        }
    }
}

impl Config {
    /// When a stream node takes no more entries (Redis's stream-node-max-bytes/-entries).
    pub fn stream_node_limits(&self) -> fallow_store::types::stream::NodeLimits {
        let number = |name: &str| -> u64 {
            self.redis_value(name)
                .parse()
                .expect("stored values passed their Int or Bytes check")
        };
        fallow_store::types::stream::NodeLimits {
            max_bytes: number("stream-node-max-bytes"),
            max_entries: number("stream-node-max-entries"),
        }
    }
}

/// Takes the Redis parameters fallow keeps out of a config file's table (the rest are `Config`'s
/// fields), each value as text: `true`/`false` as yes/no, numbers as digits.
fn take_redis_params(
    table: &mut toml::Table,
) -> Result<Vec<(&'static redis_params::Row, String)>, String> {
    let names: Vec<String> = table
        .keys()
        .filter(|key| redis_params::find(key).is_some_and(|row| row.is_kept_here()))
        .cloned()
        .collect();
    let mut taken = Vec::with_capacity(names.len());
    for name in names {
        let row = redis_params::find(&name).expect("filtered");
        let text = match table.remove(&name).expect("listed") {
            toml::Value::String(text) => text,
            toml::Value::Integer(number) => number.to_string(),
            toml::Value::Float(number) => number.to_string(),
            toml::Value::Boolean(flag) => yes_no(flag).to_string(),
            _ => return Err(format!("{name}: must be a string, a number or true/false")),
        };
        taken.push((row, text));
    }
    Ok(taken)
}

/// The tracing filter of `log-level`. Field values match literally: as regexes they compile to a DFA that
/// a crafted value made take minutes. ASCII only: tracing-subscriber 0.3 panics on a directive whose
/// leading spaces precede a multi-byte character (it slices the untrimmed text at trimmed offsets).
pub fn log_filter(text: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    let invalid = || format!("invalid log-level '{text}'");
    if !text.is_ascii() {
        return Err(invalid());
    }
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(text)
        .map_err(|_| invalid())
}

fn yes_no(value: bool) -> &'static str {
    crate::units::yes_no(value)
}

/// Permission bits written in octal, as Redis's `unixsocketperm 700`.
fn parse_octal_perm(text: &str) -> Result<u32, String> {
    let perm = u32::from_str_radix(text.trim(), 8)
        .map_err(|_| "argument couldn't be parsed as an octal integer".to_string())?;
    if perm > 0o777 {
        return Err("argument must be between 0 and 777 inclusive".into());
    }
    Ok(perm)
}

/// `unixsocketperm` in a file: `"770"` or `770`, the digits read as octal either way.
fn deserialize_octal<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    // `unixsocketperm = 770` reads as octal, as `"770"` does.
    deserialize_number_or_text(
        deserializer,
        |number| parse_octal_perm(&number.to_string()),
        parse_octal_perm,
    )
}

fn parse_yes_no(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_redis() {
        assert_eq!(parse_bytes("100"), Ok(100));
        assert_eq!(parse_bytes("10k"), Ok(10_000));
        assert_eq!(parse_bytes("10kb"), Ok(10_240));
        assert_eq!(parse_bytes("1GB"), Ok(1 << 30));
        assert!(parse_bytes("ten").is_err());
        assert!(parse_bytes("1tb").is_err());
    }

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("fallow-config-{}", std::process::id()));
        std::fs::write(
            &dir,
            "port = 7000\nmaxmemory = \"10mb\"\nmaxmemory-policy = \"allkeys-lru\"\n",
        )
        .unwrap();
        let cli = Cli {
            config: Some(dir.clone()),
            port: Some(7001),
            ..Cli::default()
        };
        let config = Config::load(&cli).unwrap();
        std::fs::remove_file(dir).unwrap();
        assert_eq!(config.port, 7001, "flags beat the file");
        assert_eq!(config.maxmemory_bytes, 10 << 20);
        assert_eq!(config.maxmemory_policy, "allkeys-lru");
        assert!(config.shards >= 1);
    }

    #[test]
    fn tenants_from_file_then_flags() {
        let path = std::env::temp_dir().join(format!("fallow-tenants-{}", std::process::id()));
        std::fs::write(
            &path,
            "tenants = [\"web:200\", \"vault:50:persistent\"]\nmemcache-tenant = \"web\"\n",
        )
        .unwrap();
        let cli = Cli {
            config: Some(path.clone()),
            tenants: vec!["web:300:ephemeral:yes".into()],
            ..Cli::default()
        };
        let config = Config::load(&cli).unwrap();
        assert_eq!(
            config.tenants,
            ["web:200", "vault:50:persistent", "web:300:ephemeral:yes"],
            "flags come after the file, so they win per name"
        );
        assert_eq!(config.memcache_tenant, "web");
        let bad = Cli {
            config: Some(path.clone()),
            tenants: vec!["default:1:ephemeral:no".into()],
            ..Cli::default()
        };
        let refused = Config::load(&bad);
        std::fs::remove_file(path).unwrap();
        assert!(refused.is_err());
        let mut config = Config::default();
        config.set("memcache-tenant", "vault").unwrap();
        assert_eq!(config.memcache_tenant, "vault");
        assert!(config.set("memcache-tenant", "a:b").is_err());
    }

    #[test]
    fn listener_settings() {
        let config = Config::load(&Cli {
            port: Some(7000),
            ..Cli::default()
        })
        .unwrap();
        assert_eq!(
            config.unix_socket_path(),
            Some(fallow_proto::socket_path::default_socket_path(7000)),
            "no unixsocket: the shared default for the port"
        );
        assert!(config.protected_mode);
        assert_eq!(config.unixsocketperm, 0o700);
        let given = Config::load(&Cli {
            unixsocket: Some(String::new()),
            unixsocketperm: Some("770".into()),
            protected_mode: Some("no".into()),
            ..Cli::default()
        })
        .unwrap();
        assert_eq!(given.unix_socket_path(), None, "empty disables it");
        assert_eq!(given.unixsocketperm, 0o770);
        assert!(!given.protected_mode);
        for bad in ["800", "1000", "rwx", "-1"] {
            let cli = Cli {
                unixsocketperm: Some(bad.into()),
                ..Cli::default()
            };
            assert!(Config::load(&cli).is_err(), "{bad} accepted");
        }
        let file: Config =
            toml::from_str("unixsocketperm = 660\nunixsocket = \"/x.sock\"\n").unwrap();
        assert_eq!(
            file.unixsocketperm, 0o660,
            "the file's digits are octal too"
        );
        assert_eq!(file.unix_socket_path(), Some("/x.sock".into()));
        let mut config = Config::default();
        config.set("protected-mode", "no").unwrap();
        assert!(!config.protected_mode);
        assert!(config.set("protected-mode", "maybe").is_err());
        assert!(
            config.set("unixsocketperm", "777").is_err(),
            "immutable, as in Redis"
        );
        let entries = config.entries();
        assert!(entries.contains(&("protected-mode", "no".into())));
        assert!(entries.contains(&("unixsocketperm", "700".into())));
    }

    #[test]
    fn unknown_file_keys_are_rejected() {
        let parsed: Result<Config, _> = toml::from_str("prot = 1\n");
        assert!(parsed.is_err());
    }

    #[test]
    fn runtime_set() {
        let mut config = Config::default();
        config.set("maxmemory", "1mb").unwrap();
        assert_eq!(config.maxmemory_bytes, 1 << 20);
        assert!(config.set("port", "1").is_err());
        assert!(config.set("maxmemory-policy", "bogus").is_err());
    }

    #[test]
    fn maxmemory_implies_fixed_unless_mode_is_explicit() {
        let fixed = Config::load(&Cli {
            maxmemory: Some("1gb".into()),
            ..Cli::default()
        })
        .unwrap();
        assert_eq!(fixed.memory_mode, MemoryMode::Fixed);
        let elastic = Config::load(&Cli::default()).unwrap();
        assert_eq!(elastic.memory_mode, MemoryMode::Elastic);
        let conflicting = Config::load(&Cli {
            maxmemory: Some("1gb".into()),
            memory_mode: Some("elastic".into()),
            ..Cli::default()
        });
        assert!(conflicting.unwrap_err().contains("elastic-max"));
        let unlimited_fixed = Config::load(&Cli {
            memory_mode: Some("fixed".into()),
            ..Cli::default()
        })
        .unwrap();
        assert_eq!(
            (unlimited_fixed.memory_mode, unlimited_fixed.maxmemory_bytes),
            (MemoryMode::Fixed, 0)
        );
    }

    #[test]
    fn elastic_settings_from_file_and_flags() {
        let path = std::env::temp_dir().join(format!("fallow-elastic-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "memory-mode = \"elastic\"\nelastic-reserve = \"5%\"\nelastic-min = \"1gb\"\nelastic-max = 4294967296\n",
        )
        .unwrap();
        let config = Config::load(&Cli {
            config: Some(path.clone()),
            elastic_grow_bytes_per_sec: Some("64mb".into()),
            elastic_poll_interval_ms: Some(20),
            ..Cli::default()
        });
        std::fs::remove_file(path).unwrap();
        let config = config.unwrap();
        assert_eq!(config.elastic_reserve, Reserve::Percent(5.0));
        assert_eq!(
            (config.elastic_min_bytes, config.elastic_max_bytes),
            (1 << 30, 4 << 30)
        );
        assert_eq!(config.elastic_grow_bytes_per_sec, 64 << 20);
        assert_eq!(config.elastic_poll_interval_ms, 20);
        let too_slow = Cli {
            elastic_poll_interval_ms: Some(101),
            ..Cli::default()
        };
        assert!(Config::load(&too_slow).is_err());
        let inverted = Cli {
            elastic_min: Some("2gb".into()),
            elastic_max: Some("1gb".into()),
            ..Cli::default()
        };
        assert!(Config::load(&inverted).is_err());
        let missing_trace = Cli {
            host_memory_trace: Some("/nonexistent/trace".into()),
            ..Cli::default()
        };
        assert!(Config::load(&missing_trace)
            .unwrap_err()
            .contains("/nonexistent/trace"));
    }

    #[test]
    fn runtime_mode_switches() {
        let mut config = Config::default();
        config.set("maxmemory", "100mb").unwrap();
        assert_eq!(config.memory_mode, MemoryMode::Fixed);
        config.set("memory-mode", "elastic").unwrap();
        assert_eq!(
            (config.memory_mode, config.maxmemory_bytes),
            (MemoryMode::Elastic, 0)
        );
        config.set("elastic-reserve", "2gb").unwrap();
        assert_eq!(config.elastic_reserve, Reserve::Bytes(2 << 30));
        config.set("elastic-max", "1gb").unwrap();
        config.set("elastic-min", "2gb").unwrap();
        assert!(
            config.validate().is_err(),
            "min above max is caught after the pairs"
        );
        assert!(config.set("memory-mode", "auto").is_err());
        assert!(config.set("host-memory-trace", "/tmp/x").is_err());
        assert!(config.set("metrics-port", "9100").is_err());
        assert!(
            config.set("vsock-port", "6379").is_err(),
            "a listener is bound at start only"
        );
        let entries = config.entries();
        let get = |name: &str| {
            entries
                .iter()
                .find(|(key, _)| *key == name)
                .unwrap()
                .1
                .clone()
        };
        assert_eq!(get("elastic-reserve"), (2u64 << 30).to_string());
        assert_eq!(get("memory-mode"), "elastic");
    }

    #[test]
    fn vsock_port_from_the_flag_and_the_file() {
        let config = Config::default();
        assert_eq!(config.vsock_port, 0, "off unless asked for");
        assert!(config.entries().contains(&("vsock-port", "0".into())));
        let given = Config::load(&Cli {
            vsock_port: Some(6379),
            ..Cli::default()
        })
        .unwrap();
        assert_eq!(given.vsock_port, 6379);
        assert!(given.entries().contains(&("vsock-port", "6379".into())));
        let file: Config = toml::from_str("vsock-port = 4000000000\n").unwrap();
        assert_eq!(file.vsock_port, 4_000_000_000, "vsock ports are 32-bit");
        assert!(toml::from_str::<Config>("vsock-port = -1\n").is_err());
    }
}
