//! The slow log, as Redis keeps it: every command that ran for `slowlog-log-slower-than` microseconds or
//! more (negative: none; 0: every command) is kept with its arguments, newest first, up to
//! `slowlog-max-len` entries. An entry keeps at most 32 arguments of at most 128 bytes each, as Redis's
//! does, so the log is bounded in bytes: at most `SLOWLOG_MAX_LEN_LIMIT` entries of about 4.5 KiB.
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// Arguments an entry keeps (the last one kept says how many more there were).
pub const ENTRY_ARGS_MAX: usize = 32;
/// Bytes of one argument an entry keeps (the rest is said in words).
pub const ENTRY_ARG_BYTES_MAX: usize = 128;
/// Highest `slowlog-max-len` accepted: the log stays under ~450 MiB however it is set.
pub const SLOWLOG_MAX_LEN_LIMIT: usize = 100_000;

/// One logged command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    pub unix_time_s: u64,
    pub duration_us: u64,
    pub args: Vec<Vec<u8>>,
    pub client_addr: String,
    pub client_name: String,
}

pub struct SlowLog {
    entries: Mutex<VecDeque<Entry>>,
    next_id: AtomicU64,
    slower_than_us: AtomicI64,
    max_len: AtomicUsize,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: Mutex::default(),
            next_id: AtomicU64::new(0),
            slower_than_us: AtomicI64::new(10_000),
            max_len: AtomicUsize::new(128),
        }
    }
}

impl SlowLog {
    /// Takes `slowlog-log-slower-than` and `slowlog-max-len` (a shorter log drops its oldest entries).
    pub fn configure(&self, slower_than_us: i64, max_len: usize) {
        self.slower_than_us.store(slower_than_us, Ordering::Relaxed);
        self.max_len.store(max_len, Ordering::Relaxed);
        self.entries.lock().truncate(max_len);
    }

    /// Whether a command that ran `duration_us` is to be logged (one atomic load on the hot path).
    pub fn wants(&self, duration_us: u64) -> bool {
        let slower_than_us = self.slower_than_us.load(Ordering::Relaxed);
        slower_than_us >= 0 && duration_us >= slower_than_us as u64
    }

    /// Logs a command (see `wants`).
    pub fn push(&self, args: &[&[u8]], duration_us: u64, client_addr: &str, client_name: &str) {
        let max_len = self.max_len.load(Ordering::Relaxed);
        if max_len == 0 {
            return;
        }
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_time_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
            duration_us,
            args: kept_args(args),
            client_addr: client_addr.to_string(),
            client_name: client_name.to_string(),
        };
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max_len);
    }

    /// The newest `count` entries (all for None).
    pub fn newest(&self, count: Option<usize>) -> Vec<Entry> {
        let entries = self.entries.lock();
        let count = count.unwrap_or(entries.len());
        entries.iter().take(count).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

/// The arguments as Redis keeps them: at most 32, the last standing for the rest; each at most 128
/// bytes, with how many more there were.
fn kept_args(args: &[&[u8]]) -> Vec<Vec<u8>> {
    let kept_count = args.len().min(ENTRY_ARGS_MAX);
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(kept_count);
    for (index, arg) in args.iter().take(kept_count).enumerate() {
        if index == ENTRY_ARGS_MAX - 1 && args.len() > ENTRY_ARGS_MAX {
            let more = args.len() - ENTRY_ARGS_MAX + 1;
            kept.push(format!("... ({more} more arguments)").into_bytes());
            break;
        }
        if arg.len() > ENTRY_ARG_BYTES_MAX {
            let mut text = arg[..ENTRY_ARG_BYTES_MAX].to_vec();
            let more = arg.len() - ENTRY_ARG_BYTES_MAX;
            text.extend_from_slice(format!("... ({more} more bytes)").as_bytes());
            kept.push(text);
        } else {
            kept.push(arg.to_vec());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_bounded_as_redis_bounds_them() {
        let many: Vec<Vec<u8>> = (0..40).map(|n| n.to_string().into_bytes()).collect();
        let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        let kept = kept_args(&refs);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[31], b"... (9 more arguments)");
        let long = vec![b'x'; 200];
        let kept = kept_args(&[b"set", &long]);
        assert_eq!(kept[1].len(), 128 + b"... (72 more bytes)".len());
    }

    #[test]
    fn the_log_keeps_the_newest_and_honours_its_settings() {
        let log = SlowLog::default();
        log.configure(0, 2);
        assert!(log.wants(0));
        for n in 0..3u64 {
            log.push(&[b"get", n.to_string().as_bytes()], n, "addr", "");
        }
        let newest = log.newest(None);
        assert_eq!(
            newest.iter().map(|entry| entry.id).collect::<Vec<_>>(),
            [2, 1]
        );
        log.configure(-1, 2);
        assert!(!log.wants(u64::MAX), "negative: nothing is logged");
        log.reset();
        assert!(log.is_empty());
    }
}
