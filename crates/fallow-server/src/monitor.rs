//! MONITOR: every command run is streamed to the monitoring clients as Redis 7.0 formats it,
//! `+1700000000.123456 [0 127.0.0.1:5555] "set" "k" "v"`, arguments quoted as Redis's `sdscatrepr`
//! quotes them, commands from scripts as `[0 lua]`, AUTH and HELLO AUTH credentials as `(redacted)`.
//! Lines go through the client's pub/sub queue: they count as its output under the `normal` class of
//! `client-output-buffer-limit` (Redis shows monitors as normal clients) and a monitor past it is disconnected and
//! counted. One atomic load per command while nobody monitors.
use crate::clients::memory::{ClientClass, ClientsMemory};
use crate::clients::ClientHandle;
use crate::pubsub::{PubSub, PubSubMessage};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::Sender;

/// Bytes of one argument a line shows at most; the rest is cut (a MONITOR line is for eyes, and the
/// limit keeps one huge SET from making a line per monitor of its size).
pub const LINE_ARG_BYTES_MAX: usize = 64 << 10;

/// Where a command came from, as the line's bracket names it.
pub enum Origin<'a> {
    /// A client: its address (`127.0.0.1:5555`, or `unix:/path` for a unix socket).
    Client(&'a str),
    /// A script's `redis.call`.
    Lua,
}

struct Monitor {
    handle: Arc<ClientHandle>,
    sender: Sender<PubSubMessage>,
}

#[derive(Default)]
pub struct Monitors {
    count: AtomicUsize,
    monitors: Mutex<Vec<Monitor>>,
    /// Lines queued to monitors.
    pub lines_sent: AtomicU64,
    /// Monitors disconnected for reading too slowly (their output passed its limits).
    pub dropped_slow: AtomicU64,
}

impl Monitors {
    /// Clients monitoring now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether anyone monitors (the hot path's only cost).
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub fn add(&self, handle: &Arc<ClientHandle>, sender: &Sender<PubSubMessage>) {
        let mut monitors = self.monitors.lock();
        if monitors
            .iter()
            .any(|monitor| monitor.handle.id == handle.id)
        {
            return;
        }
        handle.monitoring.store(true, Ordering::Relaxed);
        monitors.push(Monitor {
            handle: handle.clone(),
            sender: sender.clone(),
        });
        self.count.store(monitors.len(), Ordering::Relaxed);
    }

    /// Stops a client's monitoring (RESET, disconnect); true when it was monitoring.
    pub fn remove(&self, client_id: u64) -> bool {
        if !self.active() {
            return false;
        }
        let mut monitors = self.monitors.lock();
        let before = monitors.len();
        monitors.retain(|monitor| {
            let stays = monitor.handle.id != client_id;
            if !stays {
                monitor.handle.monitoring.store(false, Ordering::Relaxed);
            }
            stays
        });
        self.count.store(monitors.len(), Ordering::Relaxed);
        monitors.len() != before
    }

    pub fn is_monitoring(&self, client_id: u64) -> bool {
        self.active()
            && self
                .monitors
                .lock()
                .iter()
                .any(|monitor| monitor.handle.id == client_id)
    }

    /// Sends one command's line to every monitor.
    pub fn feed(
        &self,
        pubsub: &PubSub,
        clients: &ClientsMemory,
        db: usize,
        origin: Origin,
        args: &[&[u8]],
    ) {
        if !self.active() {
            return;
        }
        let line: Arc<[u8]> = format_line(unix_time_us(), db, &origin, args)
            .into_bytes()
            .into();
        let monitors = self.monitors.lock();
        for monitor in monitors.iter() {
            let message = PubSubMessage::Monitor(line.clone());
            if pubsub.deliver_to(
                clients,
                ClientClass::Normal,
                &monitor.handle,
                &monitor.sender,
                message,
            ) {
                self.lines_sent.fetch_add(1, Ordering::Relaxed);
            } else if monitor.handle.is_killed() {
                self.dropped_slow.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn unix_time_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros())
}

/// One line, without the leading `+` and line end (the reply writer adds them).
pub fn format_line(unix_us: u128, db: usize, origin: &Origin, args: &[&[u8]]) -> String {
    let mut line = format!("{}.{:06} ", unix_us / 1_000_000, unix_us % 1_000_000);
    match origin {
        Origin::Client(address) => line.push_str(&format!("[{db} {address}]")),
        Origin::Lua => line.push_str(&format!("[{db} lua]")),
    }
    let redacted = redacted_positions(args);
    for (position, arg) in args.iter().enumerate() {
        line.push(' ');
        if redacted.contains(&position) {
            line.push_str("\"(redacted)\"");
        } else {
            quote_into(&mut line, &arg[..arg.len().min(LINE_ARG_BYTES_MAX)]);
        }
    }
    line
}

/// The arguments Redis replaces by `(redacted)`: AUTH's, and HELLO's AUTH user and password.
fn redacted_positions(args: &[&[u8]]) -> Vec<usize> {
    let name = args.first().map(|name| name.to_ascii_lowercase());
    match name.as_deref() {
        Some(b"auth") => (1..args.len()).collect(),
        Some(b"hello") => {
            let mut positions = Vec::new();
            let mut index = 2;
            while index < args.len() {
                if args[index].eq_ignore_ascii_case(b"auth") && index + 2 < args.len() {
                    positions.extend([index + 1, index + 2]);
                    index += 3;
                } else if args[index].eq_ignore_ascii_case(b"setname") {
                    index += 2;
                } else {
                    break;
                }
            }
            positions
        }
        _ => Vec::new(),
    }
}

/// Redis's `sdscatrepr`: in double quotes; `\\` `\"` `\n` `\r` `\t` `\a` `\b` escaped, other
/// non-printable bytes as `\xNN`.
pub fn quote_into(line: &mut String, bytes: &[u8]) {
    line.push('"');
    for &byte in bytes {
        match byte {
            b'\\' => line.push_str("\\\\"),
            b'"' => line.push_str("\\\""),
            b'\n' => line.push_str("\\n"),
            b'\r' => line.push_str("\\r"),
            b'\t' => line.push_str("\\t"),
            0x07 => line.push_str("\\a"),
            0x08 => line.push_str("\\b"),
            0x20..=0x7e => line.push(byte as char),
            _ => line.push_str(&format!("\\x{byte:02x}")),
        }
    }
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_like_sdscatrepr() {
        let args: [&[u8]; 3] = [b"set", b"k", b"v \"q\" \\ \n\x01\xff"];
        let line = format_line(
            1_795_688_007_124_311,
            0,
            &Origin::Client("127.0.0.1:40454"),
            &args,
        );
        // Redis 7.0.15's line for the same command.
        assert_eq!(
            line,
            r#"1795688007.124311 [0 127.0.0.1:40454] "set" "k" "v \"q\" \\ \n\x01\xff""#
        );
        let line = format_line(5_000_001, 2, &Origin::Lua, &[b"get", b"x"]);
        assert_eq!(line, r#"5.000001 [2 lua] "get" "x""#);
    }

    #[test]
    fn credentials_are_redacted() {
        let auth: [&[u8]; 3] = [b"AUTH", b"u", b"p"];
        assert_eq!(redacted_positions(&auth), vec![1, 2]);
        let hello: [&[u8]; 7] = [b"hello", b"3", b"auth", b"u", b"p", b"setname", b"nm"];
        let line = format_line(0, 0, &Origin::Client("a:1"), &hello);
        assert!(line.ends_with(r#""hello" "3" "auth" "(redacted)" "(redacted)" "setname" "nm""#));
        assert!(redacted_positions(&[b"get", b"auth"]).is_empty());
    }
}
