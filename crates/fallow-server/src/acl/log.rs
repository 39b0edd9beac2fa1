//! ACL LOG and the defence against guessed passwords: denied authentications, commands, keys and channels
//! are counted (INFO stats `acl_access_denied_*`) and kept as entries (`ACL LOG`, at most `acllog-max-len`,
//! similar consecutive events grouped as Redis groups them); a connection that keeps failing to
//! authenticate is answered later and later, and the log gets at most one warning line per interval.
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Largest `acllog-max-len`: each entry holds a client description (a few hundred bytes).
pub const LOG_LEN_LIMIT: usize = 100_000;
/// An event joins an entry updated this recently (Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA).
const GROUPING_WINDOW_MS: u64 = 60_000;
/// Newest entries searched for one to group with (Redis scans 10).
const GROUPING_SCAN: usize = 10;
/// At most one warning line about failed authentications per this interval.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// Client addresses one warning line names.
const WARNING_CLIENTS_MAX: usize = 8;
/// Longest object (key, channel) or username kept in an entry: both come from the client.
const OBJECT_BYTES_MAX: usize = 1024;
/// Longest client description kept in an entry (a client name may be long).
const CLIENT_INFO_BYTES_MAX: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Auth,
    Command,
    Key,
    Channel,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Auth => "auth",
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
        }
    }
}

/// Where the denied request ran: on its own, queued in (or run by) MULTI/EXEC, or by a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    pub fn of_multi(in_multi: bool) -> Context {
        if in_multi {
            Context::Multi
        } else {
            Context::Toplevel
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// One ACL LOG entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    /// The command name (auth, hello, a denied command), key or channel.
    pub object: String,
    pub username: String,
    /// The client as CLIENT LIST shows it, at the latest event.
    pub client_info: String,
    pub entry_id: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
}

impl Entry {
    fn groups_with(
        &self,
        reason: Reason,
        context: Context,
        object: &str,
        username: &str,
        now_ms: u64,
    ) -> bool {
        self.reason == reason
            && self.context == context
            && now_ms.saturating_sub(self.updated_ms) <= GROUPING_WINDOW_MS
            && self.object == object
            && self.username == username
    }
}

/// INFO stats counters of denials.
#[derive(Default)]
pub struct Denials {
    pub auth: AtomicU64,
    pub command: AtomicU64,
    pub key: AtomicU64,
    pub channel: AtomicU64,
}

impl Denials {
    fn counter(&self, reason: Reason) -> &AtomicU64 {
        match reason {
            Reason::Auth => &self.auth,
            Reason::Command => &self.command,
            Reason::Key => &self.key,
            Reason::Channel => &self.channel,
        }
    }

    pub fn reset(&self) {
        for reason in [Reason::Auth, Reason::Command, Reason::Key, Reason::Channel] {
            self.counter(reason).store(0, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct Entries {
    /// Newest first.
    list: VecDeque<Entry>,
    next_id: u64,
}

/// Failed authentications not yet reported in a warning line.
#[derive(Default)]
struct Unreported {
    last_warning: Option<Instant>,
    failures: u64,
    clients: Vec<String>,
}

/// The server's ACL log, denial counters and warning state.
#[derive(Default)]
pub struct AclLog {
    entries: Mutex<Entries>,
    pub denials: Denials,
    unreported: Mutex<Unreported>,
}

impl AclLog {
    /// Counts a denial and records it, grouped with a similar recent entry; `max_len` bounds the log.
    pub fn record(
        &self,
        reason: Reason,
        context: Context,
        object: &str,
        username: &str,
        client_info: String,
        max_len: usize,
    ) {
        self.denials.counter(reason).fetch_add(1, Ordering::Relaxed);
        if max_len == 0 {
            return;
        }
        let (object, username) = (
            truncated(object, OBJECT_BYTES_MAX),
            truncated(username, OBJECT_BYTES_MAX),
        );
        let mut client_info = client_info;
        client_info.truncate(truncated(&client_info, CLIENT_INFO_BYTES_MAX).len());
        let now_ms = fallow_store::now_ms();
        let mut entries = self.entries.lock();
        let similar = entries
            .list
            .iter()
            .take(GROUPING_SCAN)
            .position(|entry| entry.groups_with(reason, context, object, username, now_ms));
        let entry = match similar.and_then(|position| entries.list.remove(position)) {
            Some(mut entry) => {
                entry.count += 1;
                entry.client_info = client_info;
                entry.updated_ms = now_ms;
                entry
            }
            None => {
                let entry_id = entries.next_id;
                entries.next_id += 1;
                Entry {
                    count: 1,
                    reason,
                    context,
                    object: object.to_string(),
                    username: username.to_string(),
                    client_info,
                    entry_id,
                    created_ms: now_ms,
                    updated_ms: now_ms,
                }
            }
        };
        entries.list.push_front(entry);
        entries.list.truncate(max_len);
    }

    /// The newest `count` entries, newest first.
    pub fn newest(&self, count: usize) -> Vec<Entry> {
        self.entries
            .lock()
            .list
            .iter()
            .take(count)
            .cloned()
            .collect()
    }

    pub fn reset(&self) {
        self.entries.lock().list.clear();
    }

    /// Drops the oldest entries past a lowered `acllog-max-len`.
    pub fn trim(&self, max_len: usize) {
        self.entries.lock().list.truncate(max_len);
    }

    /// Adds a failure to the next warning line; logs it when the interval since the last one has passed.
    pub fn warn_rate_limited(&self, client_addr: &str) {
        let mut unreported = self.unreported.lock();
        unreported.failures += 1;
        if unreported.clients.len() < WARNING_CLIENTS_MAX
            && !unreported.clients.iter().any(|known| known == client_addr)
        {
            unreported.clients.push(client_addr.to_string());
        }
        Self::warn_if_due(&mut unreported);
    }

    /// Logs failures still unreported once the interval has passed (housekeeping calls it, so the last
    /// failures of a burst are reported too).
    pub fn report_auth_failures(&self) {
        let mut unreported = self.unreported.lock();
        if unreported.failures > 0 {
            Self::warn_if_due(&mut unreported);
        }
    }

    fn warn_if_due(unreported: &mut Unreported) {
        let due = unreported
            .last_warning
            .is_none_or(|last| last.elapsed() >= WARNING_INTERVAL);
        if !due {
            return;
        }
        tracing::warn!(
            failures = unreported.failures,
            clients = %unreported.clients.join(" "),
            "failed authentications since the last such warning (at most one line per {}s; ACL LOG has details)",
            WARNING_INTERVAL.as_secs()
        );
        unreported.last_warning = Some(Instant::now());
        unreported.failures = 0;
        unreported.clients.clear();
    }
}

fn truncated(text: &str, bytes_max: usize) -> &str {
    if text.len() <= bytes_max {
        return text;
    }
    let mut end = bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The delay after the `failures`-th failure of one connection.
pub fn auth_failure_delay(
    failures: u32,
    free: u32,
    first_ms: u64,
    max_ms: u64,
) -> Option<Duration> {
    let slowed = failures.checked_sub(free)?.checked_sub(1)?;
    let delay_ms = first_ms.saturating_mul(1u64 << slowed.min(32)).min(max_ms);
    (delay_ms > 0).then(|| Duration::from_millis(delay_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_after_the_free_failures_up_to_the_cap() {
        let delays: Vec<u64> = (1..=17)
            .map(|n| auth_failure_delay(n, 10, 100, 2000).map_or(0, |d| d.as_millis() as u64))
            .collect();
        assert_eq!(
            delays,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100, 200, 400, 800, 1600, 2000, 2000]
        );
        assert_eq!(
            auth_failure_delay(u32::MAX, 0, 100, 2000),
            Some(Duration::from_millis(2000))
        );
        assert_eq!(
            auth_failure_delay(50, 10, 0, 2000),
            None,
            "delay 0 turns it off"
        );
    }

    #[test]
    fn similar_events_are_grouped_and_the_log_is_bounded() {
        let log = AclLog::default();
        for _ in 0..3 {
            log.record(
                Reason::Auth,
                Context::Toplevel,
                "auth",
                "bob",
                "id=1".into(),
                4,
            );
        }
        log.record(Reason::Key, Context::Multi, "k", "bob", "id=2".into(), 4);
        let entries = log.newest(10);
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].reason, entries[0].count), (Reason::Key, 1));
        assert_eq!((entries[1].reason, entries[1].count), (Reason::Auth, 3));
        assert_eq!(entries[1].entry_id, 0);
        for user in 0..10 {
            log.record(
                Reason::Auth,
                Context::Toplevel,
                "auth",
                &format!("u{user}"),
                String::new(),
                4,
            );
        }
        assert_eq!(log.newest(100).len(), 4, "acllog-max-len bounds the log");
        assert_eq!(log.denials.auth.load(Ordering::Relaxed), 13);
        log.record(
            Reason::Auth,
            Context::Toplevel,
            "auth",
            "x",
            String::new(),
            0,
        );
        assert_eq!(
            log.denials.auth.load(Ordering::Relaxed),
            14,
            "counted even when not logged"
        );
        log.reset();
        assert!(log.newest(10).is_empty());
    }

    #[test]
    fn what_clients_send_is_kept_bounded() {
        let log = AclLog::default();
        let long = "é".repeat(10_000);
        log.record(
            Reason::Auth,
            Context::Toplevel,
            &long,
            &long,
            long.clone(),
            4,
        );
        let entry = &log.newest(1)[0];
        assert!(entry.object.len() <= OBJECT_BYTES_MAX && entry.username.len() <= OBJECT_BYTES_MAX);
        assert!(entry.client_info.len() <= CLIENT_INFO_BYTES_MAX);
        assert!(entry.object.starts_with('é'));
    }
}
