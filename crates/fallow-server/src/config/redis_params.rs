//! Every parameter Redis 7.0.15 knows, as data: its kind (what values it takes, checked with Redis's
//! error texts), its Redis default, its Redis flags, and what fallow does with it:
//! - `Use::Fallow`: one of fallow's own settings (`Config`, `params::PARAMS`); the row only records the
//!   Redis name and flags (an alias, PROTECTED_CONFIG).
//! - `Use::Honoured`: kept here and read by fallow (the encoding thresholds DUMP follows, the
//!   `enable-*` switches).
//! - `Use::Stored`: tunes only Redis internals; kept and reported so CONFIG GET/SET round-trip as in
//!   Redis, with Redis's validation.
//! - `Use::Only(values, why)`: stored, but fallow cannot honour any other value: those are refused
//!   with `why`, never silently accepted.
//!
//! The rows came from a running redis-server 7.0.15 (CONFIG GET *, then each name probed with CONFIG
//! SET for its type, bounds and flags); e2e test_config_redis.py checks them against it again.
use super::params::Kind;

/// Redis's IMMUTABLE_CONFIG: set only at start (file, flags); CONFIG SET refuses it.
pub const IMMUTABLE: u8 = 1;
/// Redis's PROTECTED_CONFIG: CONFIG SET refuses it unless `enable-protected-configs` allows.
pub const PROTECTED: u8 = 2;
/// Redis's HIDDEN_CONFIG: CONFIG GET lists it only when asked by its exact name.
pub const HIDDEN: u8 = 4;

/// What fallow does with a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Fallow,
    Honoured,
    Stored,
    Only(&'static [&'static str], &'static str),
}

/// One Redis parameter.
pub struct Row {
    pub name: &'static str,
    /// Redis's other name for it (`slaveof` for `replicaof`); CONFIG GET lists both.
    pub alias: Option<&'static str>,
    /// Unused for `Use::Fallow` rows (their checks are in `params::PARAMS`).
    pub kind: Kind,
    /// CONFIG GET's value on a redis-server started without a file (unused for `Use::Fallow`).
    pub default: &'static str,
    pub flags: u8,
    pub fallow: Use,
}

impl Row {
    pub fn is(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Whether fallow keeps this row's value itself (rather than in a `Config` field).
    pub fn is_kept_here(&self) -> bool {
        self.fallow != Use::Fallow
    }
}

const I32_MIN: i64 = i32::MIN as i64;
const I32_MAX: i64 = i32::MAX as i64;
const U32_MAX: i64 = u32::MAX as i64;
const I64_MAX: i64 = i64::MAX;
const I64_MAX_BYTES: u64 = i64::MAX as u64;

const fn row(
    name: &'static str,
    alias: Option<&'static str>,
    kind: Kind,
    default: &'static str,
    flags: u8,
    fallow: Use,
) -> Row {
    Row {
        name,
        alias,
        kind,
        default,
        flags,
        fallow,
    }
}

const fn own(name: &'static str, alias: Option<&'static str>, flags: u8) -> Row {
    row(name, alias, Kind::AnyText, "", flags, Use::Fallow)
}

/// Every Redis 7.0.15 parameter, sorted by name.
pub static ROWS: &[Row] = &[
    row(
        "acl-pubsub-default",
        None,
        Kind::Enum(&["allchannels", "resetchannels"]),
        "resetchannels",
        0,
        Use::Stored,
    ),
    own("aclfile", None, IMMUTABLE),
    own("acllog-max-len", None, 0),
    row(
        "active-defrag-cycle-max",
        None,
        Kind::Int { min: 1, max: 99 },
        "25",
        0,
        Use::Stored,
    ),
    row(
        "active-defrag-cycle-min",
        None,
        Kind::Int { min: 1, max: 99 },
        "1",
        0,
        Use::Stored,
    ),
    row(
        "active-defrag-ignore-bytes",
        None,
        Kind::Bytes {
            min: 1,
            max: I64_MAX_BYTES,
        },
        "104857600",
        0,
        Use::Stored,
    ),
    row(
        "active-defrag-max-scan-fields",
        None,
        Kind::Int {
            min: 1,
            max: I64_MAX,
        },
        "1000",
        0,
        Use::Stored,
    ),
    row(
        "active-defrag-threshold-lower",
        None,
        Kind::Int { min: 0, max: 1000 },
        "10",
        0,
        Use::Stored,
    ),
    row(
        "active-defrag-threshold-upper",
        None,
        Kind::Int { min: 0, max: 1000 },
        "100",
        0,
        Use::Stored,
    ),
    row(
        "active-expire-effort",
        None,
        Kind::Int { min: 1, max: 10 },
        "1",
        0,
        Use::Stored,
    ),
    row(
        "activedefrag",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Only(&["no"], "fallow does no active defragmentation"),
    ),
    row("activerehashing", None, Kind::Bool, "yes", 0, Use::Stored),
    row(
        "always-show-logo",
        None,
        Kind::Bool,
        "no",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "aof-disable-auto-gc",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "aof-load-truncated",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "aof-rewrite-incremental-fsync",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "aof-timestamp-enabled",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "aof-use-rdb-preamble",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "aof_rewrite_cpulist",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "appenddirname",
        None,
        Kind::AnyText,
        "appendonlydir",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "appendfilename",
        None,
        Kind::AnyText,
        "appendonly.aof",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "appendfsync",
        None,
        Kind::Enum(&["everysec", "always", "no"]),
        "everysec",
        0,
        Use::Stored,
    ),
    own("appendonly", None, 0),
    row(
        "auto-aof-rewrite-min-size",
        None,
        Kind::Bytes {
            min: 0,
            max: I64_MAX_BYTES,
        },
        "67108864",
        0,
        Use::Stored,
    ),
    row(
        "auto-aof-rewrite-percentage",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "100",
        0,
        Use::Stored,
    ),
    row(
        "bgsave_cpulist",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Stored,
    ),
    own("bind", None, 0),
    row("bind-source-addr", None, Kind::AnyText, "", 0, Use::Stored),
    row(
        "bio_cpulist",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Stored,
    ),
    own("busy-reply-threshold", Some("lua-time-limit"), 0),
    own("client-output-buffer-limit", None, 0),
    own("client-query-buffer-limit", None, 0),
    row(
        "cluster-allow-pubsubshard-when-down",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "cluster-allow-reads-when-down",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "cluster-allow-replica-migration",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "cluster-announce-bus-port",
        None,
        Kind::Int { min: 0, max: 65535 },
        "0",
        0,
        Use::Stored,
    ),
    row(
        "cluster-announce-hostname",
        None,
        Kind::Text(check_hostname),
        "",
        0,
        Use::Stored,
    ),
    row(
        "cluster-announce-ip",
        None,
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row(
        "cluster-announce-port",
        None,
        Kind::Int { min: 0, max: 65535 },
        "0",
        0,
        Use::Stored,
    ),
    row(
        "cluster-announce-tls-port",
        None,
        Kind::Int { min: 0, max: 65535 },
        "0",
        0,
        Use::Stored,
    ),
    row(
        "cluster-config-file",
        None,
        Kind::AnyText,
        "nodes.conf",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "cluster-enabled",
        None,
        Kind::Bool,
        "no",
        IMMUTABLE,
        Use::Only(&["no"], "fallow runs no cluster"),
    ),
    row(
        "cluster-link-sendbuf-limit",
        None,
        Kind::Bytes {
            min: 0,
            max: u64::MAX,
        },
        "0",
        0,
        Use::Stored,
    ),
    row(
        "cluster-migration-barrier",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "1",
        0,
        Use::Stored,
    ),
    row(
        "cluster-node-timeout",
        None,
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "15000",
        0,
        Use::Stored,
    ),
    row(
        "cluster-port",
        None,
        Kind::Int { min: 0, max: 65535 },
        "0",
        IMMUTABLE,
        Use::Only(&["0"], "fallow runs no cluster"),
    ),
    row(
        "cluster-preferred-endpoint-type",
        None,
        Kind::Enum(&["ip", "hostname", "unknown-endpoint"]),
        "ip",
        0,
        Use::Stored,
    ),
    row(
        "cluster-replica-no-failover",
        Some("cluster-slave-no-failover"),
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "cluster-replica-validity-factor",
        Some("cluster-slave-validity-factor"),
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "10",
        0,
        Use::Stored,
    ),
    row(
        "cluster-require-full-coverage",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row("crash-log-enabled", None, Kind::Bool, "yes", 0, Use::Stored),
    row(
        "crash-memcheck-enabled",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "daemonize",
        None,
        Kind::Bool,
        "no",
        IMMUTABLE,
        Use::Only(
            &["no"],
            "fallow stays in the foreground (run it under a supervisor)",
        ),
    ),
    own("databases", None, IMMUTABLE),
    row(
        "dbfilename",
        None,
        Kind::Text(check_dbfilename),
        "dump.rdb",
        PROTECTED,
        Use::Stored,
    ),
    own("dir", None, PROTECTED),
    row(
        "disable-thp",
        None,
        Kind::Bool,
        "yes",
        IMMUTABLE,
        Use::Stored,
    ),
    row("dynamic-hz", None, Kind::Bool, "yes", 0, Use::Stored),
    row(
        "enable-debug-command",
        None,
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        IMMUTABLE,
        Use::Honoured,
    ),
    row(
        "enable-module-command",
        None,
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        IMMUTABLE,
        Use::Honoured,
    ),
    row(
        "enable-protected-configs",
        None,
        Kind::Enum(&["no", "yes", "local"]),
        "no",
        IMMUTABLE,
        Use::Honoured,
    ),
    row(
        "hash-max-listpack-entries",
        Some("hash-max-ziplist-entries"),
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "512",
        0,
        Use::Honoured,
    ),
    row(
        "hash-max-listpack-value",
        Some("hash-max-ziplist-value"),
        Kind::Bytes {
            min: 0,
            max: I64_MAX_BYTES,
        },
        "64",
        0,
        Use::Honoured,
    ),
    own("hll-sparse-max-bytes", None, 0),
    own("hz", None, 0),
    row("ignore-warnings", None, Kind::AnyText, "", 0, Use::Stored),
    row(
        "io-threads",
        None,
        Kind::Int { min: 1, max: 128 },
        "1",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "io-threads-do-reads",
        None,
        Kind::Bool,
        "no",
        IMMUTABLE,
        Use::Only(&["no"], "fallow sets its worker threads with `threads`"),
    ),
    row(
        "jemalloc-bg-thread",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "key-load-delay",
        None,
        Kind::Int {
            min: I32_MIN,
            max: I32_MAX,
        },
        "0",
        HIDDEN,
        Use::Stored,
    ),
    own("latency-monitor-threshold", None, 0),
    own("latency-tracking", None, 0),
    own("latency-tracking-info-percentiles", None, 0),
    row(
        "lazyfree-lazy-eviction",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "lazyfree-lazy-expire",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "lazyfree-lazy-server-del",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "lazyfree-lazy-user-del",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "lazyfree-lazy-user-flush",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "lfu-decay-time",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "1",
        0,
        Use::Stored,
    ),
    row(
        "lfu-log-factor",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "10",
        0,
        Use::Stored,
    ),
    row(
        "list-compress-depth",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "0",
        0,
        Use::Honoured,
    ),
    row(
        "list-max-listpack-size",
        Some("list-max-ziplist-size"),
        Kind::Int {
            min: I32_MIN,
            max: I32_MAX,
        },
        "-2",
        0,
        Use::Honoured,
    ),
    row(
        "loading-process-events-interval-bytes",
        None,
        Kind::Int {
            min: 1024,
            max: I32_MAX,
        },
        "2097152",
        HIDDEN,
        Use::Stored,
    ),
    row(
        "logfile",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Only(&[""], "fallow logs to stderr"),
    ),
    row(
        "loglevel",
        None,
        Kind::Enum(&["debug", "verbose", "notice", "warning"]),
        "notice",
        0,
        Use::Stored,
    ),
    row("masterauth", None, Kind::AnyText, "", 0, Use::Stored),
    row("masteruser", None, Kind::AnyText, "", 0, Use::Stored),
    own("maxclients", None, 0),
    own("maxmemory", None, 0),
    own("maxmemory-clients", None, 0),
    row(
        "maxmemory-eviction-tenacity",
        None,
        Kind::Int { min: 0, max: 100 },
        "10",
        0,
        Use::Stored,
    ),
    own("maxmemory-policy", None, 0),
    row(
        "maxmemory-samples",
        None,
        Kind::Int {
            min: 1,
            max: I32_MAX,
        },
        "5",
        0,
        Use::Stored,
    ),
    row(
        "min-replicas-max-lag",
        Some("min-slaves-max-lag"),
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "10",
        0,
        Use::Stored,
    ),
    row(
        "min-replicas-to-write",
        Some("min-slaves-to-write"),
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "0",
        0,
        Use::Only(&["0"], "fallow has no replicas to wait for"),
    ),
    row(
        "no-appendfsync-on-rewrite",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    own("notify-keyspace-events", None, 0),
    row(
        "oom-score-adj",
        None,
        Kind::Enum(&["no", "yes", "relative", "absolute"]),
        "no",
        0,
        Use::Stored,
    ),
    row(
        "oom-score-adj-values",
        None,
        Kind::Normalized(check_oom_score_adj_values),
        "0 200 800",
        0,
        Use::Stored,
    ),
    row(
        "pidfile",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Only(&[""], "fallow writes no pid file"),
    ),
    own("port", None, 0),
    row(
        "proc-title-template",
        None,
        Kind::Text(check_proc_title_template),
        "{title} {listen-addr} {server-mode}",
        0,
        Use::Stored,
    ),
    row(
        "propagation-error-behavior",
        None,
        Kind::Enum(&["ignore", "panic", "panic-on-replicas"]),
        "ignore",
        0,
        Use::Stored,
    ),
    own("protected-mode", None, 0),
    own("proto-max-bulk-len", None, 0),
    row("rdb-del-sync-files", None, Kind::Bool, "no", 0, Use::Stored),
    row(
        "rdb-key-save-delay",
        None,
        Kind::Int {
            min: I32_MIN,
            max: I32_MAX,
        },
        "0",
        HIDDEN,
        Use::Stored,
    ),
    row(
        "rdb-save-incremental-fsync",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "rdbchecksum",
        None,
        Kind::Bool,
        "yes",
        IMMUTABLE,
        Use::Stored,
    ),
    row("rdbcompression", None, Kind::Bool, "yes", 0, Use::Honoured),
    row(
        "repl-backlog-size",
        None,
        Kind::Normalized(check_backlog_size),
        "1048576",
        0,
        Use::Stored,
    ),
    row(
        "repl-backlog-ttl",
        None,
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "3600",
        0,
        Use::Stored,
    ),
    row(
        "repl-disable-tcp-nodelay",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "repl-diskless-load",
        None,
        Kind::Enum(&["disabled", "on-empty-db", "swapdb"]),
        "disabled",
        0,
        Use::Stored,
    ),
    row(
        "repl-diskless-sync",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "repl-diskless-sync-delay",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "5",
        0,
        Use::Stored,
    ),
    row(
        "repl-diskless-sync-max-replicas",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "0",
        0,
        Use::Stored,
    ),
    row(
        "repl-ping-replica-period",
        Some("repl-ping-slave-period"),
        Kind::Int {
            min: 1,
            max: I32_MAX,
        },
        "10",
        0,
        Use::Stored,
    ),
    row(
        "repl-timeout",
        None,
        Kind::Int {
            min: 1,
            max: I32_MAX,
        },
        "60",
        0,
        Use::Stored,
    ),
    row(
        "replica-announce-ip",
        Some("slave-announce-ip"),
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row(
        "replica-announce-port",
        Some("slave-announce-port"),
        Kind::Int { min: 0, max: 65535 },
        "0",
        0,
        Use::Stored,
    ),
    row("replica-announced", None, Kind::Bool, "yes", 0, Use::Stored),
    row(
        "replica-ignore-disk-write-errors",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "replica-ignore-maxmemory",
        Some("slave-ignore-maxmemory"),
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "replica-lazy-flush",
        Some("slave-lazy-flush"),
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row(
        "replica-priority",
        Some("slave-priority"),
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "100",
        0,
        Use::Stored,
    ),
    row(
        "replica-read-only",
        Some("slave-read-only"),
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "replica-serve-stale-data",
        Some("slave-serve-stale-data"),
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "replicaof",
        Some("slaveof"),
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Only(&[""], "fallow has no replication (it is never a replica)"),
    ),
    own("requirepass", None, 0),
    row(
        "sanitize-dump-payload",
        None,
        Kind::Enum(&["no", "yes", "clients"]),
        "no",
        0,
        Use::Stored,
    ),
    own("save", None, 0),
    row(
        "server_cpulist",
        None,
        Kind::AnyText,
        "",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "set-max-intset-entries",
        None,
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "512",
        0,
        Use::Honoured,
    ),
    row(
        "set-proc-title",
        None,
        Kind::Bool,
        "yes",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "shutdown-on-sigint",
        None,
        Kind::Enum(&["default", "save", "nosave", "now", "force"]),
        "default",
        0,
        Use::Stored,
    ),
    row(
        "shutdown-on-sigterm",
        None,
        Kind::Enum(&["default", "save", "nosave", "now", "force"]),
        "default",
        0,
        Use::Stored,
    ),
    row(
        "shutdown-timeout",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "10",
        0,
        Use::Stored,
    ),
    own("slowlog-log-slower-than", None, 0),
    own("slowlog-max-len", None, 0),
    row(
        "socket-mark-id",
        None,
        Kind::Int {
            min: 0,
            max: U32_MAX,
        },
        "0",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "stop-writes-on-bgsave-error",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    row(
        "stream-node-max-bytes",
        None,
        Kind::Bytes {
            min: 0,
            max: I64_MAX_BYTES,
        },
        "4096",
        0,
        Use::Honoured,
    ),
    row(
        "stream-node-max-entries",
        None,
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "100",
        0,
        Use::Honoured,
    ),
    row(
        "supervised",
        None,
        Kind::Enum(&["upstart", "systemd", "auto", "no"]),
        "no",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "syslog-enabled",
        None,
        Kind::Bool,
        "no",
        IMMUTABLE,
        Use::Only(&["no"], "fallow logs to stderr"),
    ),
    row(
        "syslog-facility",
        None,
        Kind::Enum(&[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ]),
        "local0",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "syslog-ident",
        None,
        Kind::AnyText,
        "redis",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "tcp-backlog",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "511",
        IMMUTABLE,
        Use::Stored,
    ),
    row(
        "tcp-keepalive",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "300",
        0,
        Use::Stored,
    ),
    own("timeout", None, 0),
    row(
        "tls-auth-clients",
        None,
        Kind::Enum(&["no", "yes", "optional"]),
        "yes",
        0,
        Use::Stored,
    ),
    row("tls-ca-cert-dir", None, Kind::AnyText, "", 0, Use::Stored),
    row("tls-ca-cert-file", None, Kind::AnyText, "", 0, Use::Stored),
    row("tls-cert-file", None, Kind::AnyText, "", 0, Use::Stored),
    row("tls-ciphers", None, Kind::AnyText, "", 0, Use::Stored),
    row("tls-ciphersuites", None, Kind::AnyText, "", 0, Use::Stored),
    row(
        "tls-client-cert-file",
        None,
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row(
        "tls-client-key-file",
        None,
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row(
        "tls-client-key-file-pass",
        None,
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row(
        "tls-cluster",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Only(&["no"], "fallow serves no TLS"),
    ),
    row(
        "tls-dh-params-file",
        None,
        Kind::AnyText,
        "",
        0,
        Use::Stored,
    ),
    row("tls-key-file", None, Kind::AnyText, "", 0, Use::Stored),
    row("tls-key-file-pass", None, Kind::AnyText, "", 0, Use::Stored),
    row(
        "tls-port",
        None,
        Kind::Int { min: 0, max: 65535 },
        "0",
        0,
        Use::Only(&["0"], "fallow serves no TLS"),
    ),
    row(
        "tls-prefer-server-ciphers",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Stored,
    ),
    row("tls-protocols", None, Kind::AnyText, "", 0, Use::Stored),
    row(
        "tls-replication",
        None,
        Kind::Bool,
        "no",
        0,
        Use::Only(&["no"], "fallow serves no TLS"),
    ),
    row(
        "tls-session-cache-size",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "20480",
        0,
        Use::Stored,
    ),
    row(
        "tls-session-cache-timeout",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "300",
        0,
        Use::Stored,
    ),
    row(
        "tls-session-caching",
        None,
        Kind::Bool,
        "yes",
        0,
        Use::Stored,
    ),
    own("tracking-table-max-keys", None, 0),
    own("unixsocket", None, IMMUTABLE),
    own("unixsocketperm", None, IMMUTABLE),
    row(
        "use-exit-on-panic",
        None,
        Kind::Bool,
        "no",
        HIDDEN,
        Use::Stored,
    ),
    row(
        "watchdog-period",
        None,
        Kind::Int {
            min: 0,
            max: I32_MAX,
        },
        "0",
        HIDDEN,
        Use::Stored,
    ),
    row(
        "zset-max-listpack-entries",
        Some("zset-max-ziplist-entries"),
        Kind::Int {
            min: 0,
            max: I64_MAX,
        },
        "128",
        0,
        Use::Honoured,
    ),
    row(
        "zset-max-listpack-value",
        Some("zset-max-ziplist-value"),
        Kind::Bytes {
            min: 0,
            max: I64_MAX_BYTES,
        },
        "64",
        0,
        Use::Honoured,
    ),
];

/// The row named `name` (lower case), by its name or its alias.
pub fn find(name: &str) -> Option<&'static Row> {
    ROWS.iter()
        .find(|row| row.name == name || row.alias == Some(name))
}

/// `oom-score-adj-values`: three integers in -2000..=2000.
fn check_oom_score_adj_values(text: &str) -> Result<String, String> {
    let words: Vec<&str> = text.split(' ').filter(|word| !word.is_empty()).collect();
    if words.len() != 3 {
        return Err("wrong number of arguments".into());
    }
    let invalid = "Invalid oom-score-adj-values, elements must be between -2000 and 2000.";
    let values: Vec<i64> = words
        .iter()
        .map(|word| {
            word.parse::<i64>()
                .ok()
                .filter(|v| (-2000..=2000).contains(v))
        })
        .collect::<Option<_>>()
        .ok_or(invalid)?;
    Ok(values
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(" "))
}

/// `cluster-announce-hostname`: Redis's isValidAnnouncedHostname.
fn check_hostname(text: &str) -> Result<(), String> {
    const HOST_LEN_MAX: usize = 255;
    if text.len() > HOST_LEN_MAX {
        return Err("Hostnames must be less than 256 characters".into());
    }
    if !text
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'.')
    {
        return Err("Hostnames may only contain alphanumeric characters, hyphens or dots".into());
    }
    Ok(())
}

/// `proc-title-template`: Redis's template (`{name}` variables, `{{` a literal brace) must name only
/// known variables and must not come out empty for an empty title.
fn check_proc_title_template(text: &str) -> Result<(), String> {
    let invalid = || "template format is invalid or contains unknown variables".to_string();
    // What each variable gives a server without a title, cluster mode, socket or file.
    let expand = |name: &str| match name {
        "title" | "server-mode" | "unixsocket" | "config-file" => Some(""),
        "listen-addr" | "port" | "tls-port" => Some("x"),
        _ => None,
    };
    let mut expanded = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        expanded.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        if let Some(quoted) = after.strip_prefix('{') {
            expanded.push('{');
            rest = quoted;
            continue;
        }
        let close = after.find('}').ok_or_else(invalid)?;
        expanded.push_str(expand(&after[..close]).ok_or_else(invalid)?);
        rest = &after[close + 1..];
    }
    expanded.push_str(rest);
    if expanded.trim_matches(' ').is_empty() {
        return Err(invalid());
    }
    Ok(())
}

/// `repl-backlog-size`: a memory value of at least 1; Redis raises what it keeps to 16kb.
fn check_backlog_size(text: &str) -> Result<String, String> {
    const BACKLOG_MIN_BYTES: u64 = 16 << 10;
    let kind = Kind::Bytes {
        min: 1,
        max: I64_MAX_BYTES,
    };
    Ok(kind
        .parse(text)?
        .number()
        .max(BACKLOG_MIN_BYTES)
        .to_string())
}

/// `dbfilename`: a file name, not a path (Redis's check).
fn check_dbfilename(text: &str) -> Result<(), String> {
    if text.contains('/') {
        return Err("dbfilename can't be a path, just a filename".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_sorted_and_defaults_pass_their_own_checks() {
        let mut names: Vec<&str> = ROWS.iter().map(|row| row.name).collect();
        names.extend(ROWS.iter().filter_map(|row| row.alias));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a name or alias appears twice");
        assert!(ROWS.windows(2).all(|pair| pair[0].name < pair[1].name));
        for row in ROWS.iter().filter(|row| row.is_kept_here()) {
            row.kind
                .parse(row.default)
                .unwrap_or_else(|error| panic!("{}: default {:?}: {error}", row.name, row.default));
            if let Use::Only(values, why) = row.fallow {
                assert!(
                    values.contains(&row.default),
                    "{}: default refused",
                    row.name
                );
                assert!(
                    why.starts_with("fallow "),
                    "{}: say what fallow lacks",
                    row.name
                );
            }
        }
    }

    #[test]
    fn own_rows_are_fallow_settings() {
        let config = super::super::Config::default();
        let entries = config.entries();
        for row in ROWS.iter().filter(|row| !row.is_kept_here()) {
            assert!(
                entries.iter().any(|(name, _)| *name == row.name),
                "{} is marked fallow's own but Config does not list it",
                row.name
            );
        }
    }

    #[test]
    fn kept_parameters_round_trip_and_refuse_what_fallow_cannot_honour() {
        use super::super::Config;
        let mut config = Config::default();
        config.set("hash-max-ziplist-entries", "10").unwrap();
        config.set("loglevel", "WARNING").unwrap();
        config.set("maxmemory-samples", "7").unwrap();
        config.set("repl-backlog-size", "1kb").unwrap();
        let get = |config: &Config, wanted: &str| {
            let entries = config.get_entries();
            entries
                .into_iter()
                .find(|(name, ..)| *name == wanted)
                .unwrap()
                .1
        };
        assert_eq!(get(&config, "hash-max-listpack-entries"), "10");
        assert_eq!(get(&config, "hash-max-ziplist-entries"), "10");
        assert_eq!(get(&config, "loglevel"), "warning");
        assert_eq!(get(&config, "repl-backlog-size"), "16384");
        assert_eq!(config.encoding_limits().hash_max_listpack_entries, 10);
        assert_eq!(
            config.set("appendfsync", "sometimes").unwrap_err(),
            "argument(s) must be one of the following: everysec, always, no"
        );
        assert_eq!(
            config.set("tls-port", "6380").unwrap_err(),
            "fallow serves no TLS; only '0' is accepted"
        );
        assert_eq!(
            config.set("enable-debug-command", "yes").unwrap_err(),
            "can't set immutable config"
        );
        config.set("maxmemory-samples", "5").unwrap();
        assert!(
            !config.redis.contains_key("maxmemory-samples"),
            "defaults are not kept"
        );
    }

    #[test]
    fn a_file_sets_kept_and_immutable_parameters_with_the_same_checks() {
        use super::super::Config;
        let config = Config::from_toml_str(
            "enable-debug-command = \"local\"\nslave-read-only = false\nio-threads = 4\n",
        )
        .unwrap();
        assert!(config.allows("enable-debug-command", true));
        assert!(!config.allows("enable-debug-command", false));
        assert!(
            !config.allows("enable-protected-configs", true),
            "no by default"
        );
        assert_eq!(config.redis_value("replica-read-only"), "no");
        assert_eq!(config.redis_value("io-threads"), "4");
        for bad in [
            "io-threads = 0\n",
            "cluster-enabled = true\n",
            "enable-debug-command = \"maybe\"\n",
            "loglevel = [1]\n",
        ] {
            assert!(Config::from_toml_str(bad).is_err(), "{bad}");
        }
        let refused = Config::from_toml_str("cluster-enabled = true\n").unwrap_err();
        assert!(refused.contains("fallow runs no cluster"), "{refused}");
    }

    #[test]
    fn special_values_are_checked_as_redis_does() {
        use super::super::params::check_percentiles;
        assert_eq!(check_percentiles("50.0 99  99.9"), Ok("50 99 99.9".into()));
        assert_eq!(check_percentiles(""), Ok("".into()));
        assert!(check_percentiles("101")
            .unwrap_err()
            .contains("[0.0,100.0]"));
        assert!(check_percentiles("abc").unwrap_err().starts_with("Invalid"));
        assert!(check_percentiles("nan").is_err());
        assert_eq!(
            check_oom_score_adj_values("0 200 800"),
            Ok("0 200 800".into())
        );
        assert_eq!(
            check_oom_score_adj_values("1 2").unwrap_err(),
            "wrong number of arguments"
        );
        assert!(check_oom_score_adj_values("1 2 3000").is_err());
        assert!(check_dbfilename("a/b").is_err());
        assert!(check_hostname("a-b.c").is_ok());
        assert!(check_hostname("a b").is_err());
        assert!(check_hostname(&"a".repeat(256)).is_err());
        assert!(check_proc_title_template("{title} {listen-addr} {server-mode}").is_ok());
        assert!(check_proc_title_template("{{x").is_ok());
        for bad in ["", "  ", "{title}", "{nosuch}", "{port", "x{"] {
            assert!(check_proc_title_template(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_backlog_size("1"), Ok("16384".into()));
        assert_eq!(check_backlog_size("1mb"), Ok("1048576".into()));
        assert!(check_backlog_size("0").is_err());
        assert!(check_dbfilename("dump.rdb").is_ok());
    }
}
