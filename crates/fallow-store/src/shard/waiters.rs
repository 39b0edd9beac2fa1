//! Clients blocked on a key of a shard (BLPOP and friends). The store knows them only as `Waiter`s: the
//! server decides how a blocked client is woken (an async runtime's notify, a thread's condvar), so the
//! store depends on no async runtime.
use super::{space_id, Location, Shard};
use crate::types::Kind;
use std::sync::Arc;

/// A blocked client, as the shard wakes it.
///
/// `wake` is called under the shard lock, so it must not block or take a shard lock. A wake that comes
/// before the client waits must not be lost (store a permit, as an async `Notify::notify_one` does): the
/// client registers, retries its command, then waits, and a push may land between the retry and the wait.
/// A waiter is identified by its allocation: `remove_waiter` drops the registration made with the same
/// `Arc`.
pub trait Waiter: Send + Sync {
    fn wake(&self);
}

/// The clients blocked on one key, in arrival order.
pub(super) type Waiters = Vec<Arc<dyn Waiter>>;

/// The same waiter: the same allocation (data pointers only; vtable pointers of one type may differ
/// between codegen units).
fn same_waiter(left: &Arc<dyn Waiter>, right: &Arc<dyn Waiter>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(left), Arc::as_ptr(right))
}

impl Shard {
    /// Registers a blocked client's wake-up for `key` of `keyspace`.
    pub fn add_waiter(&mut self, keyspace: usize, key: &[u8], waiter: Arc<dyn Waiter>) {
        self.waiters
            .entry((space_id(keyspace), key.into()))
            .or_default()
            .push(waiter);
    }

    /// Drops a blocked client's registration (it timed out or was served). When it was first in line,
    /// the next client is woken: the key may still hold something for it (one wake-up per push only
    /// reaches the head of the line, which keeps serving first-come first-served).
    pub fn remove_waiter(&mut self, keyspace: usize, key: &[u8], waiter: &Arc<dyn Waiter>) {
        let map_key = (space_id(keyspace), Box::<[u8]>::from(key));
        if let Some(list) = self.waiters.get_mut(&map_key) {
            let was_head = list.first().is_some_and(|head| same_waiter(head, waiter));
            list.retain(|queued| !same_waiter(queued, waiter));
            match list.first() {
                None => {
                    self.waiters.remove(&map_key);
                }
                Some(next) if was_head => next.wake(),
                Some(_) => {}
            }
        }
    }

    /// Wakes the longest-waiting client blocked on `key` (a push made it ready). Clients wait in line:
    /// the next one is woken when the head leaves (`remove_waiter`), so they are served in arrival order.
    pub fn wake_waiters(&mut self, keyspace: usize, key: &[u8]) {
        if self.waiters.is_empty() {
            return;
        }
        if let Some(head) = self
            .waiters
            .get(&(space_id(keyspace), Box::<[u8]>::from(key)))
            .and_then(|list| list.first())
        {
            head.wake();
        }
    }

    /// Wakes every client blocked on `key`: stream readers do not consume what they read, so one new
    /// entry may serve all of them (clients still waiting for something else wait on).
    pub fn wake_all_waiters(&mut self, keyspace: usize, key: &[u8]) {
        if self.waiters.is_empty() {
            return;
        }
        if let Some(list) = self
            .waiters
            .get(&(space_id(keyspace), Box::<[u8]>::from(key)))
        {
            list.iter().for_each(|waiter| waiter.wake());
        }
    }

    /// The item at `location` is going (deleted, overwritten, flushed): if it is a stream, its blocked
    /// readers retry, and a blocked XREADGROUP answers that the stream is gone, as Redis does.
    pub(super) fn wake_stream_readers(&mut self, keyspace: usize, location: Location) {
        if self.waiters.is_empty() || Kind::from_u8(self.header(location).kind) != Kind::Stream {
            return;
        }
        let key = self.item_key(location).to_vec();
        self.wake_all_waiters(keyspace, &key);
    }

    /// Wakes every client blocked on a key of the spaces `spaces` (SWAPDB: their keys changed under
    /// them, so each retries).
    pub(super) fn wake_all_waiters_of(&self, spaces: [u32; 2]) {
        for ((space, _), waiters) in &self.waiters {
            if spaces.contains(space) {
                waiters.iter().for_each(|waiter| waiter.wake());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::tests::shard;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Waiter for Counter {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Counter {
        fn wakes(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn waiters_are_woken_in_line() {
        let mut shard = shard();
        let (first, second) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        let (first_waiter, second_waiter): (Arc<dyn Waiter>, Arc<dyn Waiter>) =
            (first.clone(), second.clone());
        shard.add_waiter(0, b"q", first_waiter.clone());
        shard.add_waiter(0, b"q", second_waiter.clone());
        shard.wake_waiters(0, b"q");
        assert_eq!(first.wakes(), 1, "the head of the line is woken");
        assert_eq!(second.wakes(), 0, "the next in line is not");
        shard.remove_waiter(0, b"q", &first_waiter);
        assert_eq!(second.wakes(), 1, "the head leaving wakes the next");
        shard.remove_waiter(0, b"q", &second_waiter);
        shard.wake_waiters(0, b"q");
        assert_eq!((first.wakes(), second.wakes()), (1, 1), "nobody is left");
        assert!(shard.waiters.is_empty());
    }

    #[test]
    fn stream_readers_are_all_woken_by_entries_and_by_the_stream_going() {
        use crate::types::stream::{IdRequest, StreamValue};
        let mut shard = shard();
        let readers: Vec<Arc<Counter>> = (0..2).map(|_| Arc::new(Counter::default())).collect();
        for reader in &readers {
            shard.add_waiter(0, b"s", reader.clone());
        }
        let wakes =
            |readers: &[Arc<Counter>]| readers.iter().map(|r| r.wakes()).collect::<Vec<_>>();
        shard.wake_all_waiters(0, b"s");
        assert_eq!(wakes(&readers), [1, 1], "every reader, not the head only");
        let add = |stream: &mut StreamValue| stream.add(IdRequest::Auto, &[b"f", b"v"], 1);
        shard.update(0, b"s", 0, true, add).unwrap();
        assert!(shard.remove(0, b"s", 0));
        assert_eq!(
            wakes(&readers),
            [2, 2],
            "a deleted stream wakes its readers"
        );
        shard.update(0, b"s", 0, true, add).unwrap();
        shard.set_string(0, b"s", b"x", 0, 0, 0);
        assert_eq!(wakes(&readers), [3, 3], "so does one overwritten");
        shard.set_string(0, b"s", b"y", 0, 0, 0);
        assert_eq!(wakes(&readers), [3, 3], "a string going wakes nobody");
        shard.flush_db(0);
        assert_eq!(wakes(&readers), [4, 4]);
    }

    #[test]
    fn swap_dbs_wakes_every_waiter_of_both_keyspaces() {
        let mut shard = shard();
        let waiters: Vec<Arc<Counter>> = (0..3).map(|_| Arc::new(Counter::default())).collect();
        shard.add_waiter(0, b"a", waiters[0].clone());
        shard.add_waiter(0, b"a", waiters[1].clone());
        shard.add_waiter(5, b"b", waiters[2].clone());
        shard.swap_dbs(0, 2);
        let wakes: Vec<usize> = waiters.iter().map(|waiter| waiter.wakes()).collect();
        assert_eq!(wakes, [1, 1, 0], "keyspace 5 was not swapped");
    }
}
