//! Server-wide event counters: INFO's `stats` (`ServerStats`) and memcached's `stats` (`McStats`). A leaf:
//! whoever counts an event holds the server and bumps the counter here.
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Server-wide event counters (INFO stats).
#[derive(Default)]
pub struct ServerStats {
    pub connections_received: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub unknown_commands: AtomicU64,
    pub error_replies: AtomicU64,
    pub oom_rejections: AtomicU64,
    /// TCP clients refused by protected mode (not loopback, no password set).
    pub protected_mode_rejections: AtomicU64,
    /// Error replies by their first word (INFO errorstats).
    pub errors: ErrorStats,
}

impl ServerStats {
    /// Counts `reply` if it is an error reply (`-PREFIX message`): in `error_replies` and by its prefix.
    /// Every error a command answers goes through here once, those of EXEC's and TXN.COMMIT's commands too.
    pub fn count_error_reply(&self, reply: &[u8]) {
        if let Some(text) = reply.strip_prefix(b"-") {
            self.count_error(text);
        }
    }

    /// Counts an error reply by its text (`ERR ...`, without the leading `-`).
    pub fn count_error(&self, text: &[u8]) {
        self.error_replies.fetch_add(1, Ordering::Relaxed);
        let prefix_end = text
            .iter()
            .position(|&byte| matches!(byte, b' ' | b'\r' | b'\n'))
            .unwrap_or(text.len());
        self.errors.count(&text[..prefix_end]);
    }
}

/// Error prefixes fallow answers with, counted without a lock.
const ERROR_PREFIXES: [&str; 14] = [
    "ERR",
    "WRONGTYPE",
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    "OOM",
    "EXECABORT",
    "TXNABORT",
    "TXNBUSY",
    "BUSYKEY",
    "NOPROTO",
    "DENIED",
    "UNBLOCKED",
    "NOTBUSY",
];

/// Most distinct other prefixes tracked; past it they are counted under `OTHER` (Redis stops tracking
/// errorstats at 128 prefixes, so a client cannot grow this map without bound).
pub const ERROR_PREFIXES_OTHER_MAX: usize = 128;

/// Longest prefix kept; a longer first word is counted as `OTHER`.
const ERROR_PREFIX_BYTES_MAX: usize = 32;

/// Error replies by prefix, as Redis's INFO errorstats counts them (`errorstat_ERR:count=3`).
#[derive(Default)]
pub struct ErrorStats {
    known: [AtomicU64; ERROR_PREFIXES.len()],
    other: Mutex<BTreeMap<String, u64>>,
}

impl ErrorStats {
    fn count(&self, prefix: &[u8]) {
        if let Some(index) = ERROR_PREFIXES
            .iter()
            .position(|known| known.as_bytes() == prefix)
        {
            self.known[index].fetch_add(1, Ordering::Relaxed);
            return;
        }
        let printable = prefix.len() <= ERROR_PREFIX_BYTES_MAX
            && !prefix.is_empty()
            && prefix.iter().all(|byte| byte.is_ascii_graphic());
        let mut other = self.other.lock();
        let name = match std::str::from_utf8(prefix) {
            Ok(name)
                if printable
                    && (other.contains_key(name) || other.len() < ERROR_PREFIXES_OTHER_MAX) =>
            {
                name
            }
            _ => "OTHER",
        };
        *other.entry(name.to_string()).or_insert(0) += 1;
        assert!(other.len() <= ERROR_PREFIXES_OTHER_MAX + 1, "bounded");
    }

    /// Every prefix seen with its count, in name order.
    pub fn counts(&self) -> Vec<(String, u64)> {
        let mut counts: BTreeMap<String, u64> = self.other.lock().clone();
        for (prefix, counter) in ERROR_PREFIXES.iter().zip(&self.known) {
            let count = counter.load(Ordering::Relaxed);
            if count > 0 {
                *counts.entry(prefix.to_string()).or_insert(0) += count;
            }
        }
        counts.into_iter().collect()
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        self.known
            .iter()
            .for_each(|counter| counter.store(0, Ordering::Relaxed));
        self.other.lock().clear();
    }
}

/// Counters behind `stats` (what memcached keeps per thread, kept here server-wide).
#[derive(Default)]
pub struct McStats {
    pub total_connections: AtomicU64,
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub cmd_meta: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub total_items: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Authentication attempts (SASL auth/step, text `set` credentials), as memcached counts them.
    pub auth_cmds: AtomicU64,
    /// Failed authentication attempts.
    pub auth_errors: AtomicU64,
    /// Requests refused because the connection had not authenticated.
    pub unauthenticated_cmds: AtomicU64,
    /// Requests refused by the user's ACL (command or key permissions).
    pub permission_denied_cmds: AtomicU64,
    /// Bumped by every flush_all; a delayed flush runs only if no newer one came.
    pub flush_generation: AtomicU64,
    pub verbosity: AtomicU64,
}

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl McStats {
    /// The resettable counters, in `stats` order.
    pub(crate) fn counters(&self) -> [(&'static str, &AtomicU64); 26] {
        [
            ("total_connections", &self.total_connections),
            ("cmd_get", &self.cmd_get),
            ("cmd_set", &self.cmd_set),
            ("cmd_flush", &self.cmd_flush),
            ("cmd_touch", &self.cmd_touch),
            ("cmd_meta", &self.cmd_meta),
            ("get_hits", &self.get_hits),
            ("get_misses", &self.get_misses),
            ("delete_misses", &self.delete_misses),
            ("delete_hits", &self.delete_hits),
            ("incr_misses", &self.incr_misses),
            ("incr_hits", &self.incr_hits),
            ("decr_misses", &self.decr_misses),
            ("decr_hits", &self.decr_hits),
            ("cas_misses", &self.cas_misses),
            ("cas_hits", &self.cas_hits),
            ("cas_badval", &self.cas_badval),
            ("touch_hits", &self.touch_hits),
            ("touch_misses", &self.touch_misses),
            ("bytes_read", &self.bytes_read),
            ("bytes_written", &self.bytes_written),
            ("auth_cmds", &self.auth_cmds),
            ("auth_errors", &self.auth_errors),
            ("unauthenticated_cmds", &self.unauthenticated_cmds),
            ("permission_denied_cmds", &self.permission_denied_cmds),
            ("total_items", &self.total_items),
        ]
    }

    /// `stats reset`.
    pub fn reset(&self) {
        for (_, counter) in self.counters() {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_replies_are_counted_by_prefix() {
        let stats = ServerStats::default();
        stats.count_error_reply(b"-ERR syntax error\r\n");
        stats.count_error_reply(b"-NOAUTH Authentication required.\r\n");
        stats.count_error_reply(b"-ERR again\r\n");
        stats.count_error_reply(b"-MYPREFIX custom\r\n");
        stats.count_error_reply(b"+OK\r\n");
        stats.count_error_reply(b"");
        assert_eq!(stats.error_replies.load(Ordering::Relaxed), 4);
        let counts = stats.errors.counts();
        assert_eq!(
            counts,
            vec![
                ("ERR".into(), 2),
                ("MYPREFIX".into(), 1),
                ("NOAUTH".into(), 1)
            ]
        );
        stats.errors.reset();
        assert!(stats.errors.counts().is_empty());
    }

    #[test]
    fn other_prefixes_are_bounded() {
        let errors = ErrorStats::default();
        for n in 0..1000 {
            errors.count(format!("E{n}").as_bytes());
        }
        errors.count(&[0xff, b'x']);
        let counts = errors.counts();
        assert_eq!(counts.len(), ERROR_PREFIXES_OTHER_MAX + 1);
        let other = counts.iter().find(|(name, _)| name == "OTHER").unwrap().1;
        assert_eq!(other, 1000 - ERROR_PREFIXES_OTHER_MAX as u64 + 1);
    }
}

/// Shared-memory channels of one server (INFO shm), bumped by `net::shm`.
#[derive(Default)]
pub struct ShmStats {
    pub opened: AtomicU64,
    /// SHM.OPEN requests answered with an error after the command accepted them (peer not allowed,
    /// no memory for the rings...).
    pub refused: AtomicU64,
    pub closed: AtomicU64,
    /// Channels closed because the client broke the ring's rules (impossible indices).
    pub closed_corrupt: AtomicU64,
    /// Channels closed because their Unix socket (the lifeline) closed or carried bytes.
    pub closed_by_lifeline: AtomicU64,
    /// Bytes of rings mapped by open channels.
    pub ring_bytes: AtomicU64,
}

/// The channel poller threads of the process (shared by every server in it), INFO shm.
#[derive(Default)]
pub struct ShmPollerStats {
    /// Times a poller went to sleep on its doorbells after spinning out its budget.
    pub sleeps: AtomicU64,
    /// Microseconds pollers spent spinning with nothing to do (the CPU the spin policy burns).
    pub idle_spin_us: AtomicU64,
    /// CPU microseconds the poller threads have used (their own clock, updated as they run).
    pub cpu_us: AtomicU64,
    /// Futures polled (a request batch, a wake-up of a blocked command...).
    pub polls: AtomicU64,
}

pub static SHM_POLLER: ShmPollerStats = ShmPollerStats {
    sleeps: AtomicU64::new(0),
    idle_spin_us: AtomicU64::new(0),
    cpu_us: AtomicU64::new(0),
    polls: AtomicU64::new(0),
};

impl ShmStats {
    /// INFO's `shm` section.
    pub fn info_section(&self, text: &mut String) {
        use std::fmt::Write;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let opened = load(&self.opened);
        let closed = load(&self.closed);
        let _ = write!(
            text,
            "# Shm\r\nshm_channels_opened:{opened}\r\nshm_channels_active:{}\r\nshm_channels_refused:{}\r\n\
shm_channels_closed:{closed}\r\nshm_channels_closed_corrupt:{}\r\nshm_channels_closed_by_lifeline:{}\r\n\
shm_ring_bytes:{}\r\nshm_poller_sleeps:{}\r\nshm_poller_idle_spin_us:{}\r\nshm_poller_cpu_us:{}\r\n\
shm_poller_polls:{}\r\n",
            opened.saturating_sub(closed),
            load(&self.refused),
            load(&self.closed_corrupt),
            load(&self.closed_by_lifeline),
            load(&self.ring_bytes),
            load(&SHM_POLLER.sleeps),
            load(&SHM_POLLER.idle_spin_us),
            load(&SHM_POLLER.cpu_us),
            load(&SHM_POLLER.polls),
        );
    }
}
