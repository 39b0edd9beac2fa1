//! Key changes the shards record for the server: which keys a command (or active expiry, or eviction)
//! modified, and why. Client-side caching (CLIENT TRACKING) turns them into invalidations; keyspace
//! notifications can turn them into events. Recording costs one relaxed load per change while nobody
//! listens (`listen` counts listeners).
//!
//! Changes go to a per-thread record: a command runs on one thread from start to end, so what the record
//! holds after it is exactly what it changed (Redis's `signalModifiedKey`), with no lock on the write
//! path. Whoever runs store code drains the record after it (`take_thread_changes`): the dispatcher after
//! each command, housekeeping after each expiry or eviction step. The record is bounded in bytes; past
//! the bound changes are dropped and the record says it overflowed, so a listener can fall back to
//! "everything may have changed" (tracking sends a flush invalidation) instead of missing one.
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Why a key changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A command wrote it (a new value, an update of a collection, a new expiry).
    Written,
    /// A command deleted it (DEL, a collection emptied, an expiry set in the past, RENAME's source).
    Removed,
    /// Its time to live passed (lazily on access, or by active expiry).
    Expired,
    /// Eviction removed it to free memory.
    Evicted,
}

/// One changed key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyChange {
    /// Keyspace address (`crate::pool::keyspace`).
    pub keyspace: usize,
    pub key: Box<[u8]>,
    pub cause: Cause,
}

/// What a thread recorded since it was last drained.
#[derive(Debug, Default)]
pub struct Changes {
    pub changes: Vec<KeyChange>,
    /// Changes were dropped because the record was full.
    pub overflowed: bool,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && !self.overflowed
    }
}

/// Bytes one thread's record may hold before it drops changes (a FLUSHALL-sized DEL of millions of keys
/// overflows, and listeners treat that as "everything changed").
pub const THREAD_RECORD_BYTES_MAX: usize = 16 << 20;

/// What one recorded change costs beyond its key's bytes (the struct and its box).
const CHANGE_OVERHEAD_BYTES: usize = std::mem::size_of::<KeyChange>() + 16;

/// Parties that want changes recorded (tracking clients, keyspace notifications).
static LISTENERS: AtomicUsize = AtomicUsize::new(0);

/// Changes recorded, and changes dropped for a full record, since start.
pub static CHANGES_RECORDED: AtomicU64 = AtomicU64::new(0);
pub static CHANGES_DROPPED: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct Record {
    changes: Changes,
    bytes: usize,
}

thread_local! {
    static RECORD: RefCell<Record> = RefCell::new(Record::default());
}

/// One more (`true`) or one less (`false`) party wants changes recorded.
pub fn listen(on: bool) {
    if on {
        LISTENERS.fetch_add(1, Ordering::Relaxed);
    } else {
        let before = LISTENERS.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "every listener stopped was started");
    }
}

/// Whether changes are being recorded.
pub fn recording() -> bool {
    LISTENERS.load(Ordering::Relaxed) > 0
}

/// Records that `key` of `keyspace` changed (when anyone listens).
pub fn record(keyspace: usize, key: &[u8], cause: Cause) {
    if !recording() {
        return;
    }
    RECORD.with(|record| {
        let mut record = record.borrow_mut();
        let bytes = key.len() + CHANGE_OVERHEAD_BYTES;
        if record.bytes + bytes > THREAD_RECORD_BYTES_MAX {
            record.changes.overflowed = true;
            CHANGES_DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        record.bytes += bytes;
        record.changes.changes.push(KeyChange {
            keyspace,
            key: key.into(),
            cause,
        });
        CHANGES_RECORDED.fetch_add(1, Ordering::Relaxed);
    });
}

/// Takes what this thread recorded since its last drain.
pub fn take_thread_changes() -> Changes {
    RECORD.with(|record| {
        let mut record = record.borrow_mut();
        if record.changes.is_empty() {
            return Changes::default();
        }
        record.bytes = 0;
        std::mem::take(&mut record.changes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_listened_to_and_drains() {
        // Other tests on this thread may listen too: count relative to what is recorded here.
        let _ = take_thread_changes();
        listen(true);
        record(3, b"k", Cause::Written);
        record(3, b"j", Cause::Expired);
        let taken = take_thread_changes();
        listen(false);
        assert_eq!(taken.changes.len(), 2);
        assert_eq!(taken.changes[0].key.as_ref(), b"k");
        assert_eq!(taken.changes[1].cause, Cause::Expired);
        assert!(!taken.overflowed);
        assert!(take_thread_changes().is_empty());
    }

    #[test]
    fn a_full_record_drops_and_says_so() {
        let _ = take_thread_changes();
        listen(true);
        let key = vec![b'x'; 1 << 20];
        for _ in 0..(THREAD_RECORD_BYTES_MAX >> 20) + 1 {
            record(0, &key, Cause::Removed);
        }
        let taken = take_thread_changes();
        listen(false);
        assert!(taken.overflowed);
        assert!(taken.changes.len() < (THREAD_RECORD_BYTES_MAX >> 20) + 1);
        assert!(
            take_thread_changes().is_empty(),
            "draining resets the bound"
        );
    }
}
