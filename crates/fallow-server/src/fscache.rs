//! The file caches' counters as the server shows them (`FSCACHE`, INFO `fscache`, Prometheus): each
//! mounted `fallow fs` reports its counters every second over its connection (`FSCACHE REPORT`); the
//! server keeps the last report of each mount and shows it. A mount's report is dropped when the
//! connection that last reported it closes, or after `REPORT_TTL` without a report, so a killed fs
//! disappears from INFO.
//!
//! Everything is bounded: at most `MOUNTS_MAX` mounts of at most `FIELDS_MAX` fields, names and values
//! of bounded length (about 4.5 MB at worst, 600 KB with the usual path lengths).
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Most mounts reporting at once; a report from one more is refused.
pub const MOUNTS_MAX: usize = 64;
/// Most fields in one report.
pub const FIELDS_MAX: usize = 64;
/// Longest mount path (Linux's PATH_MAX).
pub const MOUNT_PATH_BYTES_MAX: usize = 4096;
/// Longest field name (`[a-z0-9_]`).
pub const FIELD_NAME_BYTES_MAX: usize = 48;
/// Longest value: an i64 has 20 characters, a decimal a few more.
pub const VALUE_BYTES_MAX: usize = 32;
/// A mount whose fs has not reported for this long is dropped (the fs reports every second).
pub const REPORT_TTL: Duration = Duration::from_secs(30);
/// Field names the server itself puts beside a mount's fields (GET's age) or uses for its own
/// Prometheus metrics (`fallow_fscache_mounts`, `fallow_fscache_events_total`).
const RESERVED_FIELDS: [&str; 3] = ["age_ms", "mounts", "events"];

/// A reported value: the text as sent (so decimals keep their digits) and what kind of number it is.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Integer(i64),
    Decimal(String),
}

impl Value {
    pub fn as_f64(&self) -> f64 {
        match self {
            Value::Integer(value) => *value as f64,
            Value::Decimal(text) => text.parse().expect("a validated decimal parses"),
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Integer(value) => write!(f, "{value}"),
            Value::Decimal(text) => f.write_str(text),
        }
    }
}

/// The last report of one mount.
#[derive(Clone, Debug)]
pub struct Report {
    pub fields: Vec<(String, Value)>,
    pub at: Instant,
    /// The connection that sent it: its close drops the mount.
    pub client_id: u64,
}

/// Counted events (INFO fscache, Prometheus `fallow_fscache_events_total{event}`).
#[derive(Default, Debug)]
pub struct FsCacheStats {
    /// Reports accepted.
    pub reports: AtomicU64,
    /// Reports refused (bad fields or values, limits).
    pub reports_refused: AtomicU64,
    /// Mounts that reported for the first time (or again after being dropped).
    pub mounts_added: AtomicU64,
    /// Mounts dropped because the connection that last reported them closed.
    pub mounts_dropped_disconnect: AtomicU64,
    /// Mounts dropped after `REPORT_TTL` without a report.
    pub mounts_expired: AtomicU64,
}

impl FsCacheStats {
    /// (name, value) of every counter, in INFO's order.
    pub fn fields(&self) -> [(&'static str, u64); 5] {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        [
            ("reports", load(&self.reports)),
            ("reports_refused", load(&self.reports_refused)),
            ("mounts_added", load(&self.mounts_added)),
            (
                "mounts_dropped_disconnect",
                load(&self.mounts_dropped_disconnect),
            ),
            ("mounts_expired", load(&self.mounts_expired)),
        ]
    }
}

/// The mounts' last reports.
#[derive(Default)]
pub struct FsCaches {
    mounts: Mutex<BTreeMap<Vec<u8>, Report>>,
    /// Mirrors `mounts.len()`, so a closing connection skips the lock while no fs reports (always,
    /// on servers without a file cache).
    mount_count: AtomicUsize,
    pub stats: FsCacheStats,
}

/// Checks a report's arguments (field, value, field, value...) and returns its fields; Err is the
/// reply's message (without `ERR `).
pub fn parse_fields(pairs: &[&[u8]]) -> Result<Vec<(String, Value)>, String> {
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err("FSCACHE REPORT needs <field> <value> pairs".into());
    }
    if pairs.len() / 2 > FIELDS_MAX {
        return Err(format!("FSCACHE REPORT: at most {FIELDS_MAX} fields"));
    }
    let mut fields: Vec<(String, Value)> = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        let name = parse_name(pair[0])?;
        if fields.iter().any(|(known, _)| *known == name) {
            return Err(format!("FSCACHE REPORT: field '{name}' given twice"));
        }
        let value = parse_value(pair[1]).ok_or_else(|| {
            format!(
                "FSCACHE REPORT: field '{name}': value is not an integer or a decimal, got '{}'",
                printable(pair[1])
            )
        })?;
        fields.push((name, value));
    }
    Ok(fields)
}

fn parse_name(name: &[u8]) -> Result<String, String> {
    let valid = (1..=FIELD_NAME_BYTES_MAX).contains(&name.len())
        && name
            .iter()
            .all(|byte| matches!(byte, b'a'..=b'z' | b'0'..=b'9' | b'_'));
    if !valid {
        return Err(format!(
            "FSCACHE REPORT: field names are 1..{FIELD_NAME_BYTES_MAX} characters of [a-z0-9_], got '{}'",
            printable(name)
        ));
    }
    let name = String::from_utf8(name.to_vec()).expect("checked ASCII");
    if RESERVED_FIELDS.contains(&name.as_str()) {
        return Err(format!(
            "FSCACHE REPORT: field name '{name}' is reserved (the server adds it)"
        ));
    }
    Ok(name)
}

/// An integer that fits an i64, or a plain decimal (`-?[0-9]+\.[0-9]+`); no exponents, NaN or
/// infinities (Prometheus and INFO readers take these as they are).
fn parse_value(text: &[u8]) -> Option<Value> {
    if text.is_empty() || text.len() > VALUE_BYTES_MAX {
        return None;
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let all_digits = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    let text = std::str::from_utf8(text).ok()?;
    match digits.iter().position(|&byte| byte == b'.') {
        None if all_digits(digits) => text.parse().ok().map(Value::Integer),
        Some(dot) if all_digits(&digits[..dot]) && all_digits(&digits[dot + 1..]) => {
            Some(Value::Decimal(text.to_string()))
        }
        _ => None,
    }
}

/// A mount path or bad input as INFO shows it: printable ASCII stays, every other byte and the
/// characters INFO's lines use as separators (`\ , = :` and space) become `\xHH`, so a line stays one
/// line and splits back into its fields.
pub fn printable(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &byte in bytes {
        let plain = byte.is_ascii_graphic() && !matches!(byte, b'\\' | b',' | b'=' | b':');
        match plain {
            true => text.push(byte as char),
            false => text.push_str(&format!("\\x{byte:02x}")),
        }
    }
    text
}

/// Checks a mount path; Err is the reply's message.
pub fn check_mount(mount: &[u8]) -> Result<(), String> {
    match (1..=MOUNT_PATH_BYTES_MAX).contains(&mount.len()) {
        true => Ok(()),
        false => Err(format!(
            "FSCACHE: a mount path is 1..{MOUNT_PATH_BYTES_MAX} bytes"
        )),
    }
}

impl FsCaches {
    /// Replaces `mount`'s last report by `fields` from connection `client_id`; Err (the reply's
    /// message) when a new mount would be one more than `MOUNTS_MAX`.
    pub fn report(
        &self,
        mount: &[u8],
        fields: Vec<(String, Value)>,
        client_id: u64,
        now: Instant,
    ) -> Result<(), String> {
        assert!(
            check_mount(mount).is_ok() && fields.len() <= FIELDS_MAX,
            "the caller checks the report"
        );
        let mut mounts = self.mounts.lock();
        self.expire(&mut mounts, now);
        let known = mounts.contains_key(mount);
        if !known && mounts.len() >= MOUNTS_MAX {
            self.stats.reports_refused.fetch_add(1, Ordering::Relaxed);
            return Err(format!(
                "FSCACHE REPORT: at most {MOUNTS_MAX} mounts report at once"
            ));
        }
        let report = Report {
            fields,
            at: now,
            client_id,
        };
        mounts.insert(mount.to_vec(), report);
        if !known {
            self.stats.mounts_added.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.reports.fetch_add(1, Ordering::Relaxed);
        self.mount_count.store(mounts.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Counts a report refused before it reached `report` (bad arguments).
    pub fn note_refused(&self) {
        self.stats.reports_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Every mount with its last report, by path, after dropping those too old.
    pub fn snapshot(&self, now: Instant) -> Vec<(Vec<u8>, Report)> {
        let mut mounts = self.mounts.lock();
        self.expire(&mut mounts, now);
        mounts
            .iter()
            .map(|(mount, report)| (mount.clone(), report.clone()))
            .collect()
    }

    /// One mount's last report.
    pub fn get(&self, mount: &[u8], now: Instant) -> Option<Report> {
        let mut mounts = self.mounts.lock();
        self.expire(&mut mounts, now);
        mounts.get(mount).cloned()
    }

    /// Connection `client_id` closed: the mounts it last reported go.
    pub fn connection_closed(&self, client_id: u64) {
        if self.mount_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut mounts = self.mounts.lock();
        let before = mounts.len();
        mounts.retain(|_, report| report.client_id != client_id);
        let dropped = before - mounts.len();
        self.stats
            .mounts_dropped_disconnect
            .fetch_add(dropped as u64, Ordering::Relaxed);
        self.mount_count.store(mounts.len(), Ordering::Relaxed);
    }

    /// Drops the mounts not reported for `REPORT_TTL`.
    fn expire(&self, mounts: &mut BTreeMap<Vec<u8>, Report>, now: Instant) {
        let before = mounts.len();
        mounts.retain(|_, report| now.saturating_duration_since(report.at) < REPORT_TTL);
        let expired = before - mounts.len();
        self.stats
            .mounts_expired
            .fetch_add(expired as u64, Ordering::Relaxed);
        self.mount_count.store(mounts.len(), Ordering::Relaxed);
    }

    /// INFO's `fscache` section: the mount count, the event counters, then one line per mount
    /// `fscache_<n>:mount=<path>,<field>=<value>,...,age_ms=<ms>`.
    pub fn info_section(&self, text: &mut String) {
        use std::fmt::Write;
        let now = Instant::now();
        let mounts = self.snapshot(now);
        text.push_str("# Fscache\r\n");
        let _ = write!(text, "fscache_mounts:{}\r\n", mounts.len());
        for (name, value) in self.stats.fields() {
            let _ = write!(text, "fscache_{name}:{value}\r\n");
        }
        for (index, (mount, report)) in mounts.iter().enumerate() {
            let _ = write!(text, "fscache_{index}:mount={}", printable(mount));
            for (field, value) in &report.fields {
                let _ = write!(text, ",{field}={value}");
            }
            let _ = write!(text, ",age_ms={}\r\n", age_ms(report, now));
        }
    }
}

/// Milliseconds since the report came.
pub fn age_ms(report: &Report, now: Instant) -> u64 {
    now.saturating_duration_since(report.at).as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<&'static [u8]> {
        pairs
            .iter()
            .flat_map(|(name, value)| [name.as_bytes().to_vec(), value.as_bytes().to_vec()])
            .map(|bytes| &*Vec::leak(bytes))
            .collect()
    }

    #[test]
    fn integers_and_decimals_are_values_and_nothing_else() {
        let parsed = parse_fields(&fields(&[
            ("reads", "12"),
            ("prefetch_accuracy", "0.875"),
            ("delta", "-3"),
            ("io_queue_bytes", "0"),
        ]))
        .unwrap();
        assert_eq!(parsed[0], ("reads".into(), Value::Integer(12)));
        assert_eq!(parsed[1].1, Value::Decimal("0.875".into()));
        assert_eq!(parsed[1].1.as_f64(), 0.875);
        assert_eq!(parsed[2].1, Value::Integer(-3));
        for bad in [
            "",
            "x",
            "1e5",
            "nan",
            "inf",
            "1.",
            ".5",
            "-",
            "--1",
            "1.2.3",
            " 1",
            "0x10",
            "99999999999999999999",
            "1.000000000000000000000000000000001",
        ] {
            assert!(
                parse_fields(&fields(&[("reads", bad)])).is_err(),
                "value '{bad}' should be refused"
            );
        }
    }

    #[test]
    fn field_names_are_checked() {
        for bad in [
            "",
            "Reads",
            "read-bytes",
            "a b",
            "age_ms",
            "mounts",
            "events",
        ] {
            assert!(
                parse_fields(&fields(&[(bad, "1")])).is_err(),
                "name '{bad}' should be refused"
            );
        }
        let long = "x".repeat(FIELD_NAME_BYTES_MAX);
        assert!(parse_fields(&fields(&[(long.as_str(), "1")])).is_ok());
        let longer = "x".repeat(FIELD_NAME_BYTES_MAX + 1);
        assert!(parse_fields(&fields(&[(longer.as_str(), "1")])).is_err());
        let error = parse_fields(&fields(&[("reads", "1"), ("reads", "2")])).unwrap_err();
        assert!(error.contains("twice"), "{error}");
        assert!(
            parse_fields(&[b"reads".as_slice()]).is_err(),
            "a field without a value"
        );
        assert!(parse_fields(&[]).is_err(), "a report of nothing");
    }

    #[test]
    fn a_report_holds_at_most_fields_max_fields() {
        let names: Vec<String> = (0..=FIELDS_MAX).map(|index| format!("f{index}")).collect();
        let pairs: Vec<(&str, &str)> = names.iter().map(|name| (name.as_str(), "1")).collect();
        assert!(parse_fields(&fields(&pairs[..FIELDS_MAX])).is_ok());
        let error = parse_fields(&fields(&pairs)).unwrap_err();
        assert!(error.contains(&FIELDS_MAX.to_string()), "{error}");
    }

    #[test]
    fn mount_paths_are_bounded() {
        assert!(check_mount(b"/mnt/a").is_ok());
        assert!(check_mount(b"").is_err());
        assert!(check_mount(&vec![b'a'; MOUNT_PATH_BYTES_MAX]).is_ok());
        assert!(check_mount(&vec![b'a'; MOUNT_PATH_BYTES_MAX + 1]).is_err());
    }

    fn one_field(value: i64) -> Vec<(String, Value)> {
        vec![("reads".into(), Value::Integer(value))]
    }

    #[test]
    fn a_report_replaces_the_last_and_a_65th_mount_is_refused() {
        let caches = FsCaches::default();
        let now = Instant::now();
        for index in 0..MOUNTS_MAX {
            let mount = format!("/mnt/{index}");
            caches
                .report(mount.as_bytes(), one_field(1), 7, now)
                .unwrap();
        }
        caches.report(b"/mnt/0", one_field(2), 8, now).unwrap();
        assert_eq!(caches.get(b"/mnt/0", now).unwrap().fields, one_field(2));
        assert_eq!(caches.snapshot(now).len(), MOUNTS_MAX);
        let error = caches
            .report(b"/mnt/extra", one_field(1), 7, now)
            .unwrap_err();
        assert!(error.contains("64"), "{error}");
        let stats = caches.stats.fields();
        assert_eq!(stats[0], ("reports", MOUNTS_MAX as u64 + 1));
        assert_eq!(stats[1], ("reports_refused", 1));
        assert_eq!(stats[2], ("mounts_added", MOUNTS_MAX as u64));
    }

    #[test]
    fn a_closed_connection_drops_the_mounts_it_last_reported() {
        let caches = FsCaches::default();
        let now = Instant::now();
        caches.report(b"/a", one_field(1), 1, now).unwrap();
        caches.report(b"/b", one_field(1), 1, now).unwrap();
        // /b was reported last by connection 2 (the fs reconnected): it stays when 1 closes.
        caches.report(b"/b", one_field(2), 2, now).unwrap();
        caches.connection_closed(1);
        let left: Vec<Vec<u8>> = caches
            .snapshot(now)
            .into_iter()
            .map(|(mount, _)| mount)
            .collect();
        assert_eq!(left, vec![b"/b".to_vec()]);
        caches.connection_closed(2);
        assert!(caches.snapshot(now).is_empty());
        assert_eq!(
            caches
                .stats
                .mounts_dropped_disconnect
                .load(Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn a_mount_without_a_report_for_the_ttl_is_dropped() {
        let caches = FsCaches::default();
        let start = Instant::now();
        caches.report(b"/old", one_field(1), 1, start).unwrap();
        let later = start + REPORT_TTL / 2;
        caches.report(b"/new", one_field(1), 1, later).unwrap();
        assert_eq!(caches.snapshot(later).len(), 2);
        let expired_at = start + REPORT_TTL;
        let left: Vec<Vec<u8>> = caches
            .snapshot(expired_at)
            .into_iter()
            .map(|(mount, _)| mount)
            .collect();
        assert_eq!(left, vec![b"/new".to_vec()]);
        assert!(caches.get(b"/old", expired_at).is_none());
        assert_eq!(caches.stats.mounts_expired.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn info_lines_stay_one_line_and_split_back() {
        let caches = FsCaches::default();
        let fields = vec![
            ("reads".to_string(), Value::Integer(5)),
            (
                "prefetch_accuracy".to_string(),
                Value::Decimal("0.5".into()),
            ),
        ];
        caches
            .report(b"/mnt/a b,c=d\n\xff", fields, 1, Instant::now())
            .unwrap();
        let mut text = String::new();
        caches.info_section(&mut text);
        let line = text
            .split("\r\n")
            .find(|line| line.starts_with("fscache_0:"))
            .expect("one line per mount");
        assert!(
            line.starts_with(r"fscache_0:mount=/mnt/a\x20b\x2cc\x3dd\x0a\xff,reads=5,prefetch_accuracy=0.5,age_ms="),
            "{line}"
        );
        assert!(text.contains("fscache_mounts:1\r\n"), "{text}");
        assert!(text.contains("fscache_reports:1\r\n"), "{text}");
    }
}
