//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0: an event on a key is published as
//! a pub/sub message on `__keyspace@<db>__:<key>` (the message is the event) and on
//! `__keyevent@<db>__:<event>` (the message is the key), each when its class (K, E) is on and the
//! event's class is on. Handlers call `Ctx::notify` where Redis calls notifyKeyspaceEvent; the store
//! records expired, evicted and created keys (`fallow_store::shard::KeyEvent`), published after the
//! command or the housekeeping tick that caused them. Off (the default), an event costs one relaxed
//! atomic load.
use crate::clients::memory::ClientsMemory;
use crate::pubsub::PubSub;
use fallow_store::shard::{KeyEvent, KeyEventCause};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An event class, Redis's NOTIFY_* bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class(pub u32);

impl Class {
    pub const KEYSPACE: Class = Class(1 << 0);
    pub const KEYEVENT: Class = Class(1 << 1);
    pub const GENERIC: Class = Class(1 << 2);
    pub const STRING: Class = Class(1 << 3);
    pub const LIST: Class = Class(1 << 4);
    pub const SET: Class = Class(1 << 5);
    pub const HASH: Class = Class(1 << 6);
    pub const ZSET: Class = Class(1 << 7);
    pub const EXPIRED: Class = Class(1 << 8);
    pub const EVICTED: Class = Class(1 << 9);
    pub const STREAM: Class = Class(1 << 10);
    pub const KEY_MISS: Class = Class(1 << 11);
    pub const MODULE: Class = Class(1 << 13);
    pub const NEW: Class = Class(1 << 14);
    /// What `A` stands for: every class but `m` and `n` (as Redis's NOTIFY_ALL).
    pub const ALL: Class = Class(
        Class::GENERIC.0
            | Class::STRING.0
            | Class::LIST.0
            | Class::SET.0
            | Class::HASH.0
            | Class::ZSET.0
            | Class::EXPIRED.0
            | Class::EVICTED.0
            | Class::STREAM.0
            | Class::MODULE.0,
    );
}

/// The error CONFIG SET gives for a character that is not a class, Redis's text.
pub const INVALID_CLASS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// The characters of the single classes, in the order Redis's keyspaceEventsFlagsToString writes them.
const CLASS_CHARS: [(char, Class); 11] = [
    ('g', Class::GENERIC),
    ('$', Class::STRING),
    ('l', Class::LIST),
    ('s', Class::SET),
    ('h', Class::HASH),
    ('z', Class::ZSET),
    ('x', Class::EXPIRED),
    ('e', Class::EVICTED),
    ('t', Class::STREAM),
    ('d', Class::MODULE),
    ('n', Class::NEW),
];

/// The flags of a `notify-keyspace-events` value; Err for a character that is no class.
pub fn parse_classes(text: &str) -> Result<u32, String> {
    let mut flags = 0;
    for character in text.chars() {
        flags |= match character {
            'A' => Class::ALL.0,
            'K' => Class::KEYSPACE.0,
            'E' => Class::KEYEVENT.0,
            'm' => Class::KEY_MISS.0,
            other => match CLASS_CHARS.iter().find(|(name, _)| *name == other) {
                Some((_, class)) => class.0,
                None => return Err(INVALID_CLASS.into()),
            },
        };
    }
    Ok(flags)
}

/// The canonical text of flags, as CONFIG GET shows it. Like Redis, `A` replaces the single classes
/// when all of them are on, `n` included (so `AKEn` reads back as `AKE`).
pub fn classes_text(flags: u32) -> String {
    let mut text = String::new();
    if flags & Class::ALL.0 == Class::ALL.0 {
        text.push('A');
    } else {
        for (name, class) in CLASS_CHARS {
            if flags & class.0 != 0 {
                text.push(name);
            }
        }
    }
    for (name, class) in [
        ('K', Class::KEYSPACE),
        ('E', Class::KEYEVENT),
        ('m', Class::KEY_MISS),
    ] {
        if flags & class.0 != 0 {
            text.push(name);
        }
    }
    text
}

/// The store's key events with the class and the event name each is published as.
const STORE_EVENTS: [(KeyEventCause, Class, &str); 4] = [
    (KeyEventCause::Expired, Class::EXPIRED, "expired"),
    (KeyEventCause::Evicted, Class::EVICTED, "evicted"),
    (KeyEventCause::Created, Class::NEW, "new"),
    (KeyEventCause::Missed, Class::KEY_MISS, "keymiss"),
];

/// The server's notification state: the flags in force and the counters.
#[derive(Default)]
pub struct Notifier {
    flags: AtomicU32,
    /// Pub/sub messages published for keyspace events (one event makes up to two).
    pub messages_published: AtomicU64,
    /// Store key events (expired, evicted, new) taken from the shards' recorders.
    pub store_events_taken: AtomicU64,
}

impl Notifier {
    pub fn set_flags(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    /// Whether an event of `class` would be published: its class and K or E are on.
    pub fn wants(&self, class: Class) -> bool {
        let flags = self.flags();
        flags & class.0 != 0 && flags & (Class::KEYSPACE.0 | Class::KEYEVENT.0) != 0
    }

    /// The store causes the shards should record under `flags` (none unless K or E is on).
    pub fn store_causes(flags: u32) -> Vec<KeyEventCause> {
        if flags & (Class::KEYSPACE.0 | Class::KEYEVENT.0) == 0 {
            return Vec::new();
        }
        STORE_EVENTS
            .iter()
            .filter(|(_, class, _)| flags & class.0 != 0)
            .map(|&(cause, _, _)| cause)
            .collect()
    }

    /// Publishes `event` of `class` on `key` of database `db` (the SELECT index), if wanted. Returns
    /// true when all clients' buffers passed maxmemory-clients (the caller enforces it).
    pub fn publish(
        &self,
        pubsub: &PubSub,
        clients: &ClientsMemory,
        class: Class,
        event: &str,
        db: usize,
        key: &[u8],
    ) -> bool {
        let flags = self.flags();
        if !self.wants(class) {
            return false;
        }
        let mut over_clients_limit = false;
        if flags & Class::KEYSPACE.0 != 0 {
            let channel = channel_name("__keyspace@", db, key);
            over_clients_limit |= pubsub.publish(&channel, event.as_bytes(), clients).1;
            self.messages_published.fetch_add(1, Ordering::Relaxed);
        }
        if flags & Class::KEYEVENT.0 != 0 {
            let channel = channel_name("__keyevent@", db, event.as_bytes());
            over_clients_limit |= pubsub.publish(&channel, key, clients).1;
            self.messages_published.fetch_add(1, Ordering::Relaxed);
        }
        over_clients_limit
    }

    /// Publishes events a shard recorded, in their order. Returns true as `publish` does.
    pub fn publish_store_events(
        &self,
        pubsub: &PubSub,
        clients: &ClientsMemory,
        events: Vec<KeyEvent>,
    ) -> bool {
        self.store_events_taken
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        let mut over_clients_limit = false;
        for event in events {
            let &(_, class, name) = STORE_EVENTS
                .iter()
                .find(|(cause, _, _)| *cause == event.cause)
                .expect("every cause is listed");
            let db = fallow_store::pool::Address::of(event.keyspace).db;
            over_clients_limit |= self.publish(pubsub, clients, class, name, db, &event.key);
        }
        over_clients_limit
    }
}

/// `<prefix><db>__:<suffix>`.
fn channel_name(prefix: &str, db: usize, suffix: &[u8]) -> Vec<u8> {
    let mut channel = Vec::with_capacity(prefix.len() + 6 + suffix.len());
    channel.extend_from_slice(prefix.as_bytes());
    channel.extend_from_slice(db.to_string().as_bytes());
    channel.extend_from_slice(b"__:");
    channel.extend_from_slice(suffix);
    channel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        classes_text(parse_classes(text).unwrap())
    }

    #[test]
    fn classes_read_back_as_redis_writes_them() {
        // Each pair checked against redis-server 7.0.15's CONFIG SET / CONFIG GET.
        for (set, get) in [
            ("", ""),
            ("K", "K"),
            ("KE", "KE"),
            ("A", "A"),
            ("gK", "gK"),
            ("Ag$", "A"),
            ("g$lshzxetdKE", "AKE"),
            ("n", "n"),
            ("m", "m"),
            ("KEn", "nKE"),
            ("KEAmn", "AKEm"),
            ("KA", "AK"),
            ("Elg", "glE"),
        ] {
            assert_eq!(canonical(set), get, "{set:?}");
        }
        assert_eq!(parse_classes("KEQ"), Err(INVALID_CLASS.to_string()));
        assert_eq!(parse_classes("a"), Err(INVALID_CLASS.to_string()));
    }

    #[test]
    fn events_are_wanted_only_with_a_channel_kind() {
        let notifier = Notifier::default();
        assert!(!notifier.wants(Class::STRING));
        notifier.set_flags(parse_classes("A").unwrap());
        assert!(!notifier.wants(Class::STRING), "neither K nor E");
        notifier.set_flags(parse_classes("K$").unwrap());
        assert!(notifier.wants(Class::STRING));
        assert!(!notifier.wants(Class::LIST));
        assert_eq!(Notifier::store_causes(notifier.flags()), vec![]);
        assert_eq!(
            Notifier::store_causes(parse_classes("Exmn").unwrap()),
            vec![
                KeyEventCause::Expired,
                KeyEventCause::Created,
                KeyEventCause::Missed
            ]
        );
        assert_eq!(Notifier::store_causes(parse_classes("xn").unwrap()), vec![]);
    }

    /// A server with a client subscribed to every keyspace channel: (server, writer, receiver).
    fn subscribed_server() -> (
        crate::server::Server,
        crate::connection::ConnState,
        tokio::sync::mpsc::Receiver<crate::pubsub::PubSubMessage>,
    ) {
        let server = crate::server::Server::for_tests();
        let connect = |server: &crate::server::Server| {
            let handle = server
                .register_client(crate::clients::ClientKind::Resp, "t".into(), "t".into())
                .expect("room for a client");
            let (sender, receiver) = tokio::sync::mpsc::channel(1000);
            (
                crate::connection::ConnState::new(handle, true, sender),
                receiver,
            )
        };
        let (mut subscriber, receiver) = connect(&server);
        run(&server, &mut subscriber, &["PSUBSCRIBE", "__key*__:*"]);
        let (writer, _) = connect(&server);
        (server, writer, receiver)
    }

    fn run(server: &crate::server::Server, conn: &mut crate::connection::ConnState, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        let mut out = fallow_proto::ReplyWriter::new(false);
        crate::command::dispatch::execute(server, conn, &mut out, &args);
    }

    /// (channel, message) of every message queued for the subscriber.
    fn received(
        receiver: &mut tokio::sync::mpsc::Receiver<crate::pubsub::PubSubMessage>,
    ) -> Vec<(String, String)> {
        let mut messages = Vec::new();
        while let Ok(message) = receiver.try_recv() {
            let crate::pubsub::PubSubMessage::PatternMessage {
                channel, payload, ..
            } = message
            else {
                panic!("a pattern subscription gets pattern messages");
            };
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            messages.push((text(&channel), text(&payload)));
        }
        messages
    }

    #[test]
    fn commands_publish_their_events_only_while_on() {
        let (server, mut writer, mut receiver) = subscribed_server();
        run(&server, &mut writer, &["RPUSH", "l", "a"]);
        assert!(received(&mut receiver).is_empty(), "off by default");
        run(
            &server,
            &mut writer,
            &["CONFIG", "SET", "notify-keyspace-events", "KEl"],
        );
        run(&server, &mut writer, &["SET", "s", "1"]);
        run(&server, &mut writer, &["LPOP", "l"]);
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(channel, message)| (channel.to_string(), message.to_string()))
                .collect()
        };
        assert_eq!(
            received(&mut receiver),
            pairs(&[("__keyspace@0__:l", "lpop"), ("__keyevent@0__:lpop", "l")]),
            "the string class is off, and so is del's (generic)"
        );
        assert_eq!(server.notify.messages_published.load(Ordering::Relaxed), 2);
        run(
            &server,
            &mut writer,
            &["CONFIG", "SET", "notify-keyspace-events", "Em"],
        );
        run(&server, &mut writer, &["GET", "nothing"]);
        assert_eq!(
            received(&mut receiver),
            pairs(&[("__keyevent@0__:keymiss", "nothing")]),
            "a store event is published after the command that caused it"
        );
    }

    #[test]
    fn the_config_file_takes_classes_and_shows_them_canonically() {
        let config = crate::config::Config::from_toml_str(
            "shards = 2\nthreads = 1\nnotify-keyspace-events = \"KEA\"\n",
        )
        .unwrap();
        assert_eq!(config.notify_keyspace_events, "AKE");
        let refused = crate::config::Config::from_toml_str(
            "shards = 2\nthreads = 1\nnotify-keyspace-events = \"KEQ\"\n",
        );
        assert!(refused.unwrap_err().contains(INVALID_CLASS));
    }

    #[test]
    fn channels_name_the_database() {
        assert_eq!(
            channel_name("__keyspace@", 12, b"k:1"),
            b"__keyspace@12__:k:1"
        );
    }
}
