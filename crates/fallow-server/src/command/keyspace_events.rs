//! Keyspace notifications from the handlers: `Ctx::notify` is called where Redis calls
//! notifyKeyspaceEvent, so what each command publishes is decided per command, as in Redis
//! (`crate::notify` holds the classes, the channels and the publishing).
use super::{Class, Ctx};

impl Ctx<'_, '_> {
    /// Publishes keyspace event `event` of `class` on `key` of the selected database, where Redis calls
    /// notifyKeyspaceEvent (so each handler decides, as Redis's does, what a call emitted).
    pub fn notify(&mut self, class: Class, event: &str, key: &[u8]) {
        let db = self.conn.db;
        self.notify_in(class, event, key, db);
    }

    /// `notify` for a key of database `db` (MOVE, COPY ... DB).
    pub fn notify_in(&mut self, class: Class, event: &str, key: &[u8], db: usize) {
        let server = self.server;
        if !server.notify.wants(class) {
            return;
        }
        // What the store did first (a lazy expiry, a new key) is published first, as Redis does.
        self.publish_store_events();
        let notify = &server.notify;
        if notify.publish(
            &server.pubsub,
            &server.clients_memory,
            class,
            event,
            db,
            key,
        ) {
            crate::clients::memory::enforce_maxmemory_clients(
                &server.clients,
                &server.clients_memory,
            );
        }
    }

    /// `notify` for a write that may have emptied a collection: the store deletes an empty one, and
    /// Redis then publishes `del` after the write's own event.
    pub fn notify_and_del_if_gone(&mut self, class: Class, event: &str, key: &[u8]) {
        self.notify(class, event, key);
        if self.server.notify.wants(Class::GENERIC) {
            let (db, now) = (self.keyspace(), self.now_ms);
            if self.guards.shard(key).peek(db, key, now).is_none() {
                self.notify(Class::GENERIC, "del", key);
            }
        }
    }

    /// Publishes the key events (expired, evicted, new) the store recorded in the command's shards.
    pub fn publish_store_events(&mut self) {
        let mut events = Vec::new();
        for shard in self.guards.iter_mut() {
            if shard.has_key_events() {
                events.append(&mut shard.take_key_events());
            }
        }
        if !events.is_empty() {
            self.server.publish_key_events(events);
        }
    }
}
