//! A recorder of key events the shard sees below the commands: keys that expired (lazily or actively),
//! keys evicted for memory, keys created (keyspace notifications' `new`) and reads of missing keys
//! (`keymiss`). The server
//! drains it after each command and each housekeeping tick and publishes the events. It records only
//! the causes asked for (nothing by default, so it costs a branch per removal) and holds at most
//! `KEY_EVENTS_BYTES_MAX` bytes per shard: past that, events are dropped and counted, as a notification
//! is fire-and-forget anyway.
use super::{Location, Shard};
use std::sync::atomic::{AtomicU64, Ordering};

/// Orders events across shards: one command's events in several shards are published in the order
/// they happened (a relaxed counter suffices: the shards' locks order each command's own events).
static NEXT_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Bytes of recorded events one shard holds before it drops new ones.
pub const KEY_EVENTS_BYTES_MAX: usize = 1 << 20;

/// Bookkeeping bytes of one event besides its key.
const EVENT_OVERHEAD_BYTES: usize = std::mem::size_of::<KeyEvent>();

/// Why a key was created or removed without a command naming it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyEventCause {
    Expired,
    Evicted,
    Created,
    /// A read looked for the key and did not find it.
    Missed,
}

impl KeyEventCause {
    fn bit(self) -> u8 {
        match self {
            KeyEventCause::Expired => 1,
            KeyEventCause::Evicted => 2,
            KeyEventCause::Created => 4,
            KeyEventCause::Missed => 8,
        }
    }
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    /// Keyspace address (tenant, namespace, database).
    pub keyspace: usize,
    pub key: Vec<u8>,
    pub cause: KeyEventCause,
    /// When it was recorded, among the events of every shard.
    pub sequence: u64,
}

/// The recorder a shard owns.
#[derive(Debug, Default)]
pub struct KeyEvents {
    /// Bits of the causes to record.
    causes: u8,
    events: Vec<KeyEvent>,
    held_bytes: usize,
    /// Events recorded since the shard started.
    pub recorded: u64,
    /// Events dropped because `KEY_EVENTS_BYTES_MAX` was reached.
    pub dropped: u64,
}

impl KeyEvents {
    fn wants(&self, cause: KeyEventCause) -> bool {
        self.causes & cause.bit() != 0
    }

    fn record(&mut self, keyspace: usize, key: Vec<u8>, cause: KeyEventCause) {
        let bytes = key.len() + EVENT_OVERHEAD_BYTES;
        if self.held_bytes + bytes > KEY_EVENTS_BYTES_MAX {
            self.dropped += 1;
            return;
        }
        self.held_bytes += bytes;
        self.recorded += 1;
        self.events.push(KeyEvent {
            keyspace,
            key,
            cause,
            sequence: NEXT_SEQUENCE.fetch_add(1, Ordering::Relaxed),
        });
    }
}

impl Shard {
    /// Chooses which causes are recorded from now on. What was recorded before is dropped: it was
    /// recorded for the classes that were on, and is not to be published late under new ones.
    pub fn record_key_events(&mut self, causes: &[KeyEventCause]) {
        self.key_events.causes = causes.iter().fold(0, |bits, cause| bits | cause.bit());
        self.take_key_events();
    }

    /// Whether events wait to be taken.
    pub fn has_key_events(&self) -> bool {
        !self.key_events.events.is_empty()
    }

    /// The recorded events, oldest first; the recorder is empty afterwards.
    pub fn take_key_events(&mut self) -> Vec<KeyEvent> {
        self.key_events.held_bytes = 0;
        std::mem::take(&mut self.key_events.events)
    }

    /// The recorder's counters: (recorded, dropped).
    pub fn key_event_counts(&self) -> (u64, u64) {
        (self.key_events.recorded, self.key_events.dropped)
    }

    /// Records that the live item at `location` (keyspace `keyspace`) is about to go for `cause`.
    pub(super) fn note_key_event(
        &mut self,
        keyspace: usize,
        location: Location,
        cause: KeyEventCause,
    ) {
        if !self.key_events.wants(cause) {
            return;
        }
        let key = self.item_key(location).to_vec();
        self.key_events.record(keyspace, key, cause);
    }

    /// Records that `key` of `keyspace` was created, or missed by a read.
    pub(super) fn note_key(&mut self, keyspace: usize, key: &[u8], cause: KeyEventCause) {
        if self.key_events.wants(cause) {
            self.key_events.record(keyspace, key.to_vec(), cause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::tests::shard;
    use crate::EvictionPolicy;

    fn causes(events: &[KeyEvent]) -> Vec<(&[u8], KeyEventCause)> {
        events
            .iter()
            .map(|event| (event.key.as_slice(), event.cause))
            .collect()
    }

    #[test]
    fn a_shard_records_what_it_removes_and_creates_only_when_asked() {
        let mut shard = shard();
        shard.set_string(0, b"quiet", b"1", 2000, 0, 1000);
        assert!(!shard.exists(0, b"quiet", 2500));
        assert!(!shard.has_key_events(), "nothing is recorded by default");

        shard.record_key_events(&[
            KeyEventCause::Expired,
            KeyEventCause::Evicted,
            KeyEventCause::Created,
        ]);
        shard.set_string(3, b"a", b"1", 2000, 0, 1000);
        shard.set_string(3, b"a", b"2", 2000, 0, 1000);
        shard.set_string(0, b"b", b"1", 2000, 0, 1000);
        assert!(!shard.exists(3, b"a", 2500), "lazy expiry");
        assert_eq!(shard.expire_cycle(2500, 100), 1, "active expiry of b");
        shard.set_string(0, b"c", b"1", 0, 0, 1000);
        assert!(shard
            .evict_one(EvictionPolicy::AllKeysRandom, 3000)
            .is_some());
        let events = shard.take_key_events();
        assert_eq!(
            causes(&events),
            vec![
                (&b"a"[..], KeyEventCause::Created),
                (b"b", KeyEventCause::Created),
                (b"a", KeyEventCause::Expired),
                (b"b", KeyEventCause::Expired),
                (b"c", KeyEventCause::Created),
                (b"c", KeyEventCause::Evicted),
            ]
        );
        assert_eq!(events[2].keyspace, 3, "the keyspace of the key");
        assert!(!shard.has_key_events(), "taken");

        shard.record_key_events(&[KeyEventCause::Evicted]);
        shard.set_string(0, b"d", b"1", 2000, 0, 1000);
        assert!(!shard.exists(0, b"d", 2500));
        assert!(!shard.has_key_events(), "expiry and creation are off");
        shard.record_key_events(&[KeyEventCause::Missed]);
        assert!(shard.access(0, b"nothing", 3000).is_none());
        assert!(!shard.exists(0, b"nothing", 3000), "not a read: no miss");
        assert_eq!(
            causes(&shard.take_key_events()),
            vec![(&b"nothing"[..], KeyEventCause::Missed)]
        );
        assert_eq!(shard.key_event_counts(), (7, 0));
    }

    #[test]
    fn records_only_wanted_causes_within_its_byte_bound() {
        let mut events = KeyEvents::default();
        events.record(0, b"ignored-by-caller".to_vec(), KeyEventCause::Expired);
        assert_eq!(events.events.len(), 1, "record itself does not filter");
        assert!(!events.wants(KeyEventCause::Expired));
        events.causes = KeyEventCause::Evicted.bit();
        assert!(events.wants(KeyEventCause::Evicted));
        assert!(!events.wants(KeyEventCause::Created));
        let big = vec![b'k'; KEY_EVENTS_BYTES_MAX / 2];
        events.record(0, big.clone(), KeyEventCause::Evicted);
        events.record(0, big.clone(), KeyEventCause::Evicted);
        assert_eq!(events.dropped, 1);
        assert!(events.held_bytes <= KEY_EVENTS_BYTES_MAX);
        assert_eq!(events.recorded, 2);
    }
}
