//! The settings CONFIG SET may change, as a table: each has a kind (its range, unit or values) that
//! parses and checks a value with Redis 7's error texts, and an `apply` that stores it. A new runtime
//! setting is one more row here; the table test tries bad values of every row.
use super::Config;
use crate::clients::memory::{ClientsMemoryLimit, OutputBufferLimits};
use crate::elastic::settings::{MemoryMode, Reserve, POLL_INTERVAL_MS_MAX};

/// What values a setting takes.
pub enum Kind {
    /// An integer in min..=max ("argument must be between MIN and MAX inclusive").
    Int { min: i64, max: i64 },
    /// A memory size (`10mb`, `1gb`, bytes) in min..=max bytes.
    Bytes { min: u64, max: u64 },
    /// One of these names, case-insensitive.
    Enum(&'static [&'static str]),
    /// `yes` or `no`.
    Bool,
    /// Free text that `check` accepts; Err is the message after "CONFIG SET failed ... - ".
    Text(fn(&str) -> Result<(), String>),
    /// Any text at all (a password): nothing to refuse.
    AnyText,
    /// Free text that `check` accepts and rewrites the way Redis shows it (`50.0` as `50`); Err as
    /// for `Text`.
    Normalized(fn(&str) -> Result<String, String>),
}

/// A value that passed its kind's check.
#[derive(Debug)]
pub enum Value<'a> {
    Int(i64),
    Bytes(u64),
    Flag(bool),
    Text(&'a str),
    /// A `Normalized` kind's value as Redis shows it.
    Shown(String),
}

impl Value<'_> {
    /// The number of an Int or Bytes value (a table row pairing `apply` with another kind is a bug the
    /// table test finds).
    pub fn number(&self) -> u64 {
        match *self {
            Value::Int(value) => value as u64,
            Value::Bytes(value) => value,
            ref other => unreachable!("not a number: {other:?}"),
        }
    }

    /// The number of an Int value, sign kept.
    pub fn signed(&self) -> i64 {
        match *self {
            Value::Int(value) => value,
            ref other => unreachable!("not a signed number: {other:?}"),
        }
    }

    pub fn flag(&self) -> bool {
        match *self {
            Value::Flag(value) => value,
            ref other => unreachable!("not yes/no: {other:?}"),
        }
    }

    /// Enum values come as the table names them (lower case); text as given.
    pub fn text(&self) -> String {
        match self {
            Value::Text(text) => text.to_string(),
            Value::Shown(text) => text.clone(),
            other => unreachable!("not text: {other:?}"),
        }
    }

    /// The value as CONFIG GET shows it (Redis's forms: yes/no, numbers in bytes).
    pub fn shown(&self) -> String {
        match self {
            Value::Int(value) => value.to_string(),
            Value::Bytes(value) => value.to_string(),
            Value::Flag(value) => crate::units::yes_no(*value).to_string(),
            Value::Text(text) => text.to_string(),
            Value::Shown(text) => text.clone(),
        }
    }
}

/// One runtime setting.
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    /// Stores a checked value (and whatever follows from it, e.g. maxmemory > 0 selects fixed mode).
    pub apply: fn(&mut Config, &Value),
}

/// Redis's largest memory values are signed 64-bit.
const BYTES_MAX: u64 = i64::MAX as u64;
const MB: u64 = 1 << 20;
pub const MAXMEMORY_POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];

const fn param(name: &'static str, kind: Kind, apply: fn(&mut Config, &Value)) -> Param {
    Param { name, kind, apply }
}

/// Every setting CONFIG SET may change.
pub static PARAMS: &[Param] = &[
    param(
        "maxmemory",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| {
            config.maxmemory_bytes = value.number();
            if config.maxmemory_bytes > 0 {
                config.memory_mode = MemoryMode::Fixed;
            }
        },
    ),
    param(
        "memory-mode",
        Kind::Enum(&["elastic", "fixed"]),
        |config, value| {
            config.memory_mode = MemoryMode::from_name(&value.text()).expect("checked");
            if config.memory_mode == MemoryMode::Elastic {
                config.maxmemory_bytes = 0;
            }
        },
    ),
    param(
        "elastic-reserve",
        Kind::Text(check_reserve),
        |config, value| config.elastic_reserve = Reserve::parse(&value.text()).expect("checked"),
    ),
    param(
        "elastic-min",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| config.elastic_min_bytes = value.number(),
    ),
    param(
        "elastic-max",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| config.elastic_max_bytes = value.number(),
    ),
    param(
        "elastic-grow-bytes-per-sec",
        Kind::Bytes {
            min: 1,
            max: BYTES_MAX,
        },
        |config, value| config.elastic_grow_bytes_per_sec = value.number(),
    ),
    param(
        "elastic-poll-interval-ms",
        Kind::Int {
            min: 1,
            max: POLL_INTERVAL_MS_MAX as i64,
        },
        |config, value| config.elastic_poll_interval_ms = value.number(),
    ),
    param(
        "tier2-clean-ahead-bytes-per-sec",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| config.tier2_clean_ahead_bytes_per_sec = value.number(),
    ),
    param(
        "reclaim-fast-threshold",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| config.reclaim_fast_threshold_bytes = value.number(),
    ),
    param(
        "maxmemory-policy",
        Kind::Enum(MAXMEMORY_POLICIES),
        |config, value| config.maxmemory_policy = value.text(),
    ),
    param("requirepass", Kind::AnyText, |config, value| {
        config.requirepass = value.text()
    }),
    // Redis's range; 0 would lock every client out until a restart.
    param(
        "maxclients",
        Kind::Int {
            min: 1,
            max: u32::MAX as i64,
        },
        |config, value| config.maxclients = value.number() as usize,
    ),
    param(
        "timeout",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        |config, value| config.timeout_s = value.number(),
    ),
    // Redis refuses less than 1mb for both: smaller limits break ordinary commands.
    param(
        "proto-max-bulk-len",
        Kind::Bytes {
            min: MB,
            max: BYTES_MAX,
        },
        |config, value| config.proto_max_bulk_len_bytes = value.number(),
    ),
    param(
        "client-query-buffer-limit",
        Kind::Bytes {
            min: MB,
            max: BYTES_MAX,
        },
        |config, value| config.client_query_buffer_limit_bytes = value.number(),
    ),
    // Redis's range (a memory value).
    param(
        "hll-sparse-max-bytes",
        Kind::Bytes {
            min: 0,
            max: BYTES_MAX,
        },
        |config, value| config.hll_sparse_max_bytes = value.number(),
    ),
    // memcached -I takes 1k..1g.
    param(
        "memcache-item-size-max",
        Kind::Bytes {
            min: 1024,
            max: 1 << 30,
        },
        |config, value| config.memcache_item_size_max_bytes = value.number(),
    ),
    // Redis's range; like Redis, fallow runs at most HZ_MAX and at least 1 round a second, and shows that.
    param(
        "hz",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        |config, value| config.hz = clamp_hz(value.number()),
    ),
    param(
        "pubsub-queue-messages-max",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        |config, value| config.pubsub_queue_messages_max = value.number() as usize,
    ),
    param(
        "tracking-table-max-keys",
        // Redis's range; `tracking-table-max-bytes` bounds the table whatever this says.
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        |config, value| config.tracking_table_max_keys = value.number() as usize,
    ),
    param(
        "tracking-table-max-bytes",
        Kind::Bytes {
            min: 1 << 20,
            max: BYTES_MAX,
        },
        |config, value| config.tracking_table_max_bytes = value.number(),
    ),
    param(
        "client-output-buffer-limit",
        Kind::Text(check_output_buffer_limit),
        |config, value| {
            let limits = &mut config.client_output_buffer_limit;
            *limits = limits.with(&value.text()).expect("checked");
        },
    ),
    param(
        "maxmemory-clients",
        Kind::Text(check_maxmemory_clients),
        |config, value| {
            config.maxmemory_clients = ClientsMemoryLimit::parse(&value.text()).expect("checked")
        },
    ),
    param(
        "memcache-tenant",
        Kind::Text(check_tenant_name),
        |config, value| config.memcache_tenant = value.text(),
    ),
    param("protected-mode", Kind::Bool, |config, value| {
        config.protected_mode = value.flag()
    }),
    param("memcache-auth", Kind::Bool, |config, value| {
        config.memcache_auth = value.flag()
    }),
    param("shm-channels", Kind::Bool, |config, value| {
        config.shm_channels = value.flag()
    }),
    param(
        "shm-ring-bytes",
        Kind::Text(check_ring_bytes),
        |config, value| config.shm_ring_bytes = parse_ring_bytes(&value.text()),
    ),
    param(
        "shm-ring-bytes-max",
        Kind::Text(check_ring_bytes),
        |config, value| config.shm_ring_bytes_max = parse_ring_bytes(&value.text()),
    ),
    param(
        "shm-spin-us",
        Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        |config, value| config.shm_spin_us = value.number(),
    ),
    param(
        "shm-allowed-uids",
        Kind::Text(check_uid_list),
        |config, value| config.shm_allowed_uids = value.text(),
    ),
    param(
        "txn-locks",
        Kind::Enum(&["abstract", "rw"]),
        |config, value| config.txn_locks = value.text(),
    ),
    param("txn-phasing", Kind::Bool, |config, value| {
        config.txn_phasing = value.flag()
    }),
    param(
        "txn-phase-max-ms",
        Kind::Int {
            min: 0,
            max: 60_000,
        },
        |config, value| config.txn_phase_max_ms = value.number(),
    ),
    param(
        "txn-lock-wait-ms",
        Kind::Int {
            min: 0,
            max: 3_600_000,
        },
        |config, value| config.txn_lock_wait_ms = value.number(),
    ),
    param(
        "busy-reply-threshold",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        |config, value| config.busy_reply_threshold_ms = value.number(),
    ),
    param(
        "slowlog-log-slower-than",
        Kind::Int {
            min: -1,
            max: i64::MAX,
        },
        |config, value| config.slowlog_log_slower_than_us = value.signed(),
    ),
    param(
        "slowlog-max-len",
        Kind::Int {
            min: 0,
            max: crate::slowlog::SLOWLOG_MAX_LEN_LIMIT as i64,
        },
        |config, value| config.slowlog_max_len = value.number() as usize,
    ),
    param(
        "lua-time-limit",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        |config, value| config.busy_reply_threshold_ms = value.number(),
    ),
    param("lua-strict-keys", Kind::Bool, |config, value| {
        config.lua_strict_keys = value.flag()
    }),
    param(
        "latency-monitor-threshold",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        |config, value| config.latency_monitor_threshold_ms = value.number(),
    ),
    param("latency-tracking", Kind::Bool, |config, value| {
        config.latency_tracking = value.flag()
    }),
    param(
        "latency-tracking-info-percentiles",
        Kind::Normalized(check_percentiles),
        |config, value| config.latency_tracking_info_percentiles = value.text(),
    ),
    param(
        "acllog-max-len",
        Kind::Int {
            min: 0,
            max: crate::acl::log::LOG_LEN_LIMIT as i64,
        },
        |config, value| config.acllog_max_len = value.number() as usize,
    ),
    param(
        "auth-failures-before-delay",
        Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        |config, value| config.auth_failures_before_delay = value.number() as u32,
    ),
    param(
        "auth-failure-delay-ms",
        Kind::Int {
            min: 0,
            max: 60_000,
        },
        |config, value| config.auth_failure_delay_ms = value.number(),
    ),
    param(
        "auth-failure-delay-max-ms",
        Kind::Int {
            min: 0,
            max: 60_000,
        },
        |config, value| config.auth_failure_delay_max_ms = value.number(),
    ),
    param(
        "notify-keyspace-events",
        Kind::Text(check_notify_classes),
        |config, value| {
            let flags = crate::notify::parse_classes(&value.text()).expect("checked");
            config.notify_keyspace_events = crate::notify::classes_text(flags);
        },
    ),
    // Asked for by Redis tools; fallow keeps no snapshots and no append-only file, so only "off" is true.
    param("save", Kind::Text(check_save), |_, _| {}),
    param("appendonly", Kind::Text(check_appendonly), |_, _| {}),
];

/// Most background rounds per second (Redis's CONFIG_MAX_HZ).
pub const HZ_MAX: u64 = 500;

/// `hz` as Redis keeps it: 1..=HZ_MAX whatever was asked.
pub fn clamp_hz(asked: u64) -> u64 {
    asked.clamp(1, HZ_MAX)
}

pub fn find(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|param| param.name == name)
}

impl Kind {
    /// Checks a CONFIG SET value; Err is Redis's message for it.
    pub fn parse<'a>(&self, text: &'a str) -> Result<Value<'a>, String> {
        match *self {
            Kind::Int { min, max } => {
                let value: i64 = text
                    .parse()
                    .ok()
                    .filter(|_| !text.starts_with('+'))
                    .ok_or("argument couldn't be parsed into an integer")?;
                if !(min..=max).contains(&value) {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                Ok(Value::Int(value))
            }
            Kind::Bytes { min, max } => {
                let value = parse_memory_value(text).ok_or("argument must be a memory value")?;
                if !(min..=max).contains(&value) {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                Ok(Value::Bytes(value))
            }
            Kind::Enum(names) => names
                .iter()
                .find(|name| name.eq_ignore_ascii_case(text))
                .map(|name| Value::Text(name))
                .ok_or_else(|| {
                    format!(
                        "argument(s) must be one of the following: {}",
                        names.join(", ")
                    )
                }),
            Kind::Bool => match text.to_ascii_lowercase().as_str() {
                "yes" => Ok(Value::Flag(true)),
                "no" => Ok(Value::Flag(false)),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Text(check) => check(text).map(|()| Value::Text(text)),
            Kind::AnyText => Ok(Value::Text(text)),
            Kind::Normalized(check) => check(text).map(Value::Shown),
        }
    }
}

/// Redis's memtoull: digits then an optional unit (b, k, kb, m, mb, g, gb, any case); no sign, no
/// spaces, no fraction. As in Redis, no digits read as 0 (`""` is 0) and too many digits saturate (the
/// range check then refuses them). None when it is not such a value.
pub fn parse_memory_value(text: &str) -> Option<u64> {
    /// Redis copies the digits into a 128-byte buffer and refuses longer ones.
    const DIGITS_MAX: usize = 127;
    let digits_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, unit) = text.split_at(digits_len);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    if digits.len() > DIGITS_MAX {
        return None;
    }
    let number = match digits {
        "" => 0,
        _ => digits.parse::<u64>().unwrap_or(u64::MAX),
    };
    Some(number.saturating_mul(multiplier))
}

fn check_reserve(text: &str) -> Result<(), String> {
    Reserve::parse(text).map(|_| ())
}

fn check_output_buffer_limit(text: &str) -> Result<(), String> {
    OutputBufferLimits::default().with(text).map(|_| ())
}

fn check_maxmemory_clients(text: &str) -> Result<(), String> {
    ClientsMemoryLimit::parse(text).map(|_| ())
}

fn check_tenant_name(text: &str) -> Result<(), String> {
    if crate::tenants::valid_name(text) {
        Ok(())
    } else {
        Err("argument must be a tenant name".into())
    }
}

fn check_notify_classes(text: &str) -> Result<(), String> {
    crate::notify::parse_classes(text).map(|_| ())
}

fn check_save(text: &str) -> Result<(), String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let valid =
        words.len().is_multiple_of(2) && words.iter().all(|word| word.parse::<u64>().is_ok());
    match (valid, words.is_empty()) {
        (true, true) => Ok(()),
        (true, false) => {
            Err("fallow keeps no snapshots; only \"\" (save nothing) is accepted".into())
        }
        (false, _) => Err("Invalid save parameters".into()),
    }
}

fn check_appendonly(text: &str) -> Result<(), String> {
    match text.to_ascii_lowercase().as_str() {
        "no" => Ok(()),
        "yes" => Err("fallow keeps no append-only file; only 'no' is accepted".into()),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

/// `latency-tracking-info-percentiles`: numbers in 0..=100 separated by spaces, shown as Redis prints
/// them (`50.0` as `50`).
pub(super) fn check_percentiles(text: &str) -> Result<String, String> {
    let mut shown = Vec::new();
    for word in text.split(' ').filter(|word| !word.is_empty()) {
        let percentile: f64 = word
            .parse()
            .ok()
            .filter(|value: &f64| value.is_finite())
            .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&percentile) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .into(),
            );
        }
        shown.push(percentile.to_string());
    }
    Ok(shown.join(" "))
}

/// A ring size: a power of two in the channel layout's range (`4kb`..`64mb`, or bytes).
fn check_ring_bytes(text: &str) -> Result<(), String> {
    let bytes = crate::units::parse_bytes(text)?;
    let (min, max) = (
        fallow_shm::layout::RING_BYTES_MIN,
        fallow_shm::layout::RING_BYTES_MAX,
    );
    if !(bytes as usize).is_power_of_two() || !(min..=max).contains(&(bytes as usize)) {
        return Err(format!(
            "a ring is a power of two from {min} to {max} bytes"
        ));
    }
    Ok(())
}

fn parse_ring_bytes(text: &str) -> u64 {
    crate::units::parse_bytes(text).expect("checked")
}

/// Comma-separated numeric uids, or empty.
fn check_uid_list(text: &str) -> Result<(), String> {
    crate::units::parse_uid_list(text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings whose every text is valid (nothing to refuse): each must be listed here on purpose.
    const ANY_TEXT: &[&str] = &["requirepass"];

    /// Values a Text setting must refuse: each Text setting needs its own (a new one without fails).
    fn bad_texts(name: &str) -> &'static [&'static str] {
        match name {
            "elastic-reserve" => &["", "abc", "100%", "-1%", "1.5.5", "10xb"],
            "memcache-tenant" => &["", "a:b", "a b", "a,b", "a=b"],
            "save" => &["abc", "1", "3600 x", "3600 1"],
            "appendonly" => &["", "yes", "maybe"],
            "notify-keyspace-events" => &["Q", "KEa", "K E", "1"],
            "client-output-buffer-limit" => &[
                "",
                "normal",
                "normal 1mb 1mb",
                "bogus 0 0 0",
                "normal x 0 0",
                "normal 0 0 -1",
                "normal 1xb 0 0",
            ],
            "maxmemory-clients" => &["", "abc", "0%", "101%", "-1", "10xb", "1.5%"],
            "latency-tracking-info-percentiles" => &["abc", "50 101", "-1", "50 x"],
            "shm-ring-bytes" | "shm-ring-bytes-max" => {
                &["", "abc", "5000", "2kb", "128mb", "-4096", "1xb"]
            }
            "shm-allowed-uids" => &["abc", "1,x", "-1", "1.5", "4294967296"],
            _ => &[],
        }
    }

    /// Values a setting must refuse: out of range, wrong unit, not a number, empty, negative.
    fn bad_values(param: &Param) -> Vec<String> {
        let generic = ["", " ", "abc", "1.5", "--1", "0x10"];
        let mut bad: Vec<String> = generic.iter().map(|value| value.to_string()).collect();
        match param.kind {
            Kind::Int { min, max } => {
                bad.extend(["+1", "1k", "1 ", "99999999999999999999"].map(String::from));
                bad.extend(min.checked_sub(1).map(|below| below.to_string()));
                bad.extend(max.checked_add(1).map(|above| above.to_string()));
            }
            Kind::Bytes { min, max } => {
                // Redis reads "" as 0 and saturates too many digits: the range decides those.
                bad.retain(|value| !value.is_empty() || min > 0);
                let units = [
                    "-1", "10xb", "1tb", "1 mb", " 1mb", "1mb ", "1.5mb", "-1mb", "+1",
                ];
                bad.extend(units.map(String::from));
                if max < u64::MAX {
                    bad.push("99999999999999999999".into());
                }
                bad.extend(min.checked_sub(1).map(|below| below.to_string()));
                bad.extend(max.checked_add(1).map(|above| above.to_string()));
            }
            Kind::Enum(_) | Kind::Bool => bad.extend(["bogus", "yes no", "-1"].map(String::from)),
            Kind::Text(_) | Kind::Normalized(_) => {
                bad = bad_texts(param.name)
                    .iter()
                    .map(|value| value.to_string())
                    .collect()
            }
            Kind::AnyText => bad.clear(),
        }
        bad
    }

    /// A value each kind accepts: for numbers, next to the default (so it also passes cross-checks).
    fn good_value(param: &Param) -> String {
        let default: i128 = value_of(&base(), param.name).parse().unwrap_or(0);
        let next = |min: i128, max: i128| {
            if default < max {
                default + 1
            } else {
                (default - 1).max(min)
            }
        };
        match param.kind {
            Kind::Int { min, max } => next(min.into(), max.into()).to_string(),
            Kind::Bytes { min, max } => next(min.into(), max.into()).to_string(),
            Kind::Enum(names) => names[names.len() - 1].to_ascii_uppercase(),
            Kind::Bool => "no".into(),
            Kind::Text(_) | Kind::AnyText | Kind::Normalized(_) => match param.name {
                "elastic-reserve" => "5%".into(),
                "save" => "".into(),
                "appendonly" => "no".into(),
                "notify-keyspace-events" => "KEA".into(),
                "client-output-buffer-limit" => "pubsub 64mb 16mb 60".into(),
                "maxmemory-clients" => "5%".into(),
                "latency-tracking-info-percentiles" => "50 99.99".into(),
                "shm-ring-bytes" | "shm-ring-bytes-max" => "1mb".into(),
                "shm-allowed-uids" => "1000, 1001".into(),
                _ => "tenant1".into(),
            },
        }
    }

    /// Defaults as `Config::load` resolves them (shards and threads chosen).
    fn base() -> Config {
        Config {
            shards: 2,
            threads: 1,
            ..Config::default()
        }
    }

    fn value_of(config: &Config, name: &str) -> String {
        config
            .entries()
            .into_iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
            .unwrap_or_else(|| panic!("{name} is settable but CONFIG GET does not list it"))
    }

    #[test]
    fn every_settable_parameter_refuses_bad_values_and_takes_a_good_one() {
        for param in PARAMS {
            let bad = bad_values(param);
            if ANY_TEXT.contains(&param.name) {
                assert!(matches!(param.kind, Kind::AnyText), "{}", param.name);
            } else {
                assert!(
                    !bad.is_empty(),
                    "{}: declare a range, unit or check that refuses something (Text: add to bad_texts)",
                    param.name
                );
            }
            for value in &bad {
                let mut config = base();
                let before = config.clone();
                let refused = config.set(param.name, value);
                assert!(refused.is_err(), "{} accepted {value:?}", param.name);
                assert_eq!(config, before, "{} changed on {value:?}", param.name);
            }
            let good = good_value(param);
            let mut config = base();
            config
                .set(param.name, &good)
                .unwrap_or_else(|error| panic!("{} refused {good:?}: {error}", param.name));
            value_of(&config, param.name);
            config.validate().unwrap_or_else(|error| {
                panic!("{} = {good:?} fails validation: {error}", param.name)
            });
        }
    }

    #[test]
    fn messages_are_redis_texts() {
        let mut config = Config::default();
        let refuse =
            |config: &mut Config, name: &str, value: &str| config.set(name, value).unwrap_err();
        assert_eq!(
            refuse(&mut config, "maxclients", "0"),
            "argument must be between 1 and 4294967295 inclusive"
        );
        assert_eq!(
            refuse(&mut config, "maxclients", "abc"),
            "argument couldn't be parsed into an integer"
        );
        assert_eq!(
            refuse(&mut config, "proto-max-bulk-len", "0"),
            "argument must be between 1048576 and 9223372036854775807 inclusive"
        );
        assert_eq!(
            refuse(&mut config, "maxmemory", "10xb"),
            "argument must be a memory value"
        );
        assert_eq!(
            refuse(&mut config, "maxmemory-policy", "foo"),
            "argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction"
        );
        assert_eq!(
            refuse(&mut config, "txn-phasing", "maybe"),
            "argument must be 'yes' or 'no'"
        );
        assert_eq!(
            refuse(&mut config, "port", "1"),
            "can't set immutable config"
        );
        assert!(refuse(&mut config, "nosuch", "1").starts_with("Unknown option"));
        config.set("MAXMEMORY", "10K").unwrap();
        assert_eq!(config.maxmemory_bytes, 10_000);
        config.set("maxmemory-policy", "ALLKEYS-LRU").unwrap();
        assert_eq!(config.maxmemory_policy, "allkeys-lru");
        config.set("hz", "1000").unwrap();
        assert_eq!(config.hz, HZ_MAX, "kept in range, as Redis keeps it");
        config.set("hz", "0").unwrap();
        assert_eq!(config.hz, 1);
    }

    #[test]
    fn start_values_obey_the_same_ranges() {
        let config = Config {
            maxclients: 0,
            ..base()
        };
        assert!(config.validate().unwrap_err().contains("maxclients"));
        let config = Config {
            auth_failure_delay_ms: 3000,
            ..base()
        };
        assert!(config.validate().is_err(), "first delay above the cap");
    }
}
