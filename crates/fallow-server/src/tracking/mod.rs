//! Client-side caching (Redis's CLIENT TRACKING): which clients cache which keys, and the invalidation
//! messages they get when those keys change.
//!
//! - Default mode: the keys a tracking client reads are remembered in the tracking table (`table`); when
//!   one changes, each client that read it gets one invalidation and the entry goes.
//! - BCAST: a client registers key prefixes; every changed key under a prefix is collected and sent to
//!   the prefix's clients after the command (Redis: once per event-loop iteration), sorted, once each.
//! - NOLOOP: a client is not told about its own changes. OPTIN/OPTOUT: reads are remembered only after
//!   (or except after) CLIENT CACHING YES/NO.
//! - FLUSHDB/FLUSHALL (and a change record that overflowed) send every tracking client a null
//!   invalidation: "drop everything".
//!
//! Delivery: a RESP3 client gets `invalidate` pushes on its own connection; with REDIRECT they go to
//! another connection (a RESP2 one receives them as `__redis__:invalidate` pub/sub messages when it is
//! subscribed). Messages for other connections travel their pub/sub queue (same byte limits); messages
//! for the connection running the command are deferred to after its reply (after EXEC as a whole), as
//! Redis 7.0 does.
//!
//! The store records which keys each command changed (`fallow_store::changes`, only while some client
//! tracks); the dispatcher hands them here after every command and housekeeping after expiry and
//! eviction. Everything shared sits behind one lock, taken only while some client tracks.
pub mod table;

use crate::clients::memory::ClientClass;
use crate::clients::memory::ClientsMemory;
use crate::clients::ClientHandle;
use crate::pubsub::{PubSub, PubSubMessage};
use fallow_store::changes::{Cause, Changes};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use table::{Table, TableKey};
use tokio::sync::mpsc::Sender;

/// The channel RESP2 clients subscribe to for redirected invalidations.
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

/// Bytes of changed keys waiting for the next broadcast over all prefixes; past it a prefix's clients get
/// a null invalidation instead of the keys (nothing is missed, memory stays bounded).
pub const BROADCAST_PENDING_BYTES_MAX: usize = 16 << 20;

/// Default `tracking-table-max-bytes`: the tracking table's memory bound whatever its key bound.
pub const TABLE_BYTES_MAX_DEFAULT: u64 = 256 << 20;

/// What CLIENT TRACKING ON asked for (checked by the command before `enable`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Client id the invalidations go to; 0 = the tracking client itself.
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    pub prefixes: Vec<Vec<u8>>,
}

/// A tracking client's mode, as CLIENT TRACKINGINFO shows it.
#[derive(Clone, Debug, Default)]
pub struct Mode {
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// An invalidation found the redirection target gone.
    pub broken_redirect: bool,
    pub prefixes: BTreeSet<Vec<u8>>,
    /// The namespace of the keys it sees (a tenant hears only of its own keys).
    pub namespace: u16,
}

/// What a connection keeps of its tracking, for its per-command checks without the lock, and the
/// messages for itself deferred until its reply is written.
#[derive(Debug, Default)]
pub struct ConnTracking {
    pub on: bool,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    /// CLIENT CACHING YES (OPTIN) or NO (OPTOUT) was given for the next command.
    pub caching: bool,
    /// The REDIRECT client id, 0 for none (CLIENT LIST shows it).
    pub redirect: u64,
    /// Messages for this connection, written after the current command's reply.
    pub deferred: Vec<PubSubMessage>,
}

impl ConnTracking {
    /// Whether the keys a read command names are remembered now (Redis's trackingRememberKeys).
    pub fn remembers_reads(&self) -> bool {
        // OPTIN tracks only after CACHING YES, OPTOUT all but after CACHING NO.
        let wanted = if self.optin {
            self.caching
        } else {
            !(self.optout && self.caching)
        };
        self.on && !self.bcast && wanted
    }
}

/// The connection running the command that changed keys: messages for it are deferred.
pub struct Current<'a> {
    pub id: u64,
    pub resp3: bool,
    pub subscribed: bool,
    pub deferred: &'a mut Vec<PubSubMessage>,
}

/// Where messages for other connections go.
pub struct Outlet<'a> {
    pub pubsub: &'a PubSub,
    pub clients_memory: &'a ClientsMemory,
}

/// What one invalidation says.
#[derive(Clone)]
enum Payload {
    Keys(Arc<[Box<[u8]>]>),
    /// Everything (a flush).
    Null,
}

struct Mailbox {
    sender: Sender<PubSubMessage>,
    handle: Arc<ClientHandle>,
}

/// One BCAST prefix: its clients and the keys under it changed since the last broadcast.
#[derive(Default)]
struct Prefix {
    clients: BTreeSet<u64>,
    /// Changed keys, sorted (Redis's rax order), with the client that changed them (None: expiry or
    /// eviction), so NOLOOP clients can be spared their own changes.
    pending: BTreeMap<TableKey, Option<u64>>,
    /// More changed than `BROADCAST_PENDING_BYTES_MAX` allowed: its clients get a null invalidation.
    overflowed: bool,
}

#[derive(Default)]
struct State {
    /// Clients with tracking on, by id (ascending: the order Redis walks its clients on a flush).
    modes: BTreeMap<u64, Mode>,
    /// Every RESP connection's queue, for redirected invalidations.
    mailboxes: HashMap<u64, Mailbox>,
    table: Table,
    prefixes: BTreeMap<Vec<u8>, Prefix>,
    /// Bytes of keys pending in all prefixes.
    pending_bytes: usize,
}

/// Events of client-side caching, for INFO `tracking` fields and the fallow section.
#[derive(Default)]
pub struct TrackingStats {
    /// (key, client) items added to the tracking table.
    pub keys_remembered: AtomicU64,
    /// Invalidation messages sent (a key list or a null).
    pub invalidations_sent: AtomicU64,
    /// Null invalidations sent for FLUSHDB/FLUSHALL or an overflowed record.
    pub flush_invalidations: AtomicU64,
    /// Table entries dropped (and invalidated) for the table's bounds.
    pub table_evictions: AtomicU64,
    /// Broadcast messages sent to BCAST clients.
    pub broadcasts_sent: AtomicU64,
    /// Invalidations that found their redirection target gone.
    pub redirects_broken: AtomicU64,
    /// Invalidations nobody could receive (a RESP2 client without a subscribed redirection) or whose
    /// receiver's queue refused them.
    pub messages_dropped: AtomicU64,
}

#[derive(Default)]
pub struct Tracking {
    state: Mutex<State>,
    /// Clients with tracking on (INFO `tracking_clients`); 0 means no work anywhere.
    clients_on: AtomicUsize,
    /// `tracking-table-max-keys` (0: no key bound).
    pub keys_max: AtomicUsize,
    /// `tracking-table-max-bytes`.
    pub bytes_max: AtomicUsize,
    pub stats: TrackingStats,
}

fn count(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Tracking {
    pub fn new(keys_max: usize, bytes_max: usize) -> Tracking {
        let tracking = Tracking::default();
        tracking.set_bounds(keys_max, bytes_max);
        tracking
    }

    pub fn set_bounds(&self, keys_max: usize, bytes_max: usize) {
        self.keys_max.store(keys_max, Ordering::Relaxed);
        self.bytes_max.store(bytes_max, Ordering::Relaxed);
    }

    /// Whether any client tracks: every other entry point is skipped while none does.
    pub fn any_on(&self) -> bool {
        self.clients_on.load(Ordering::Relaxed) > 0
    }

    pub fn clients_on(&self) -> usize {
        self.clients_on.load(Ordering::Relaxed)
    }

    /// A RESP connection opened: invalidations may be redirected to it.
    pub fn register(&self, handle: &Arc<ClientHandle>, sender: &Sender<PubSubMessage>) {
        let mailbox = Mailbox {
            sender: sender.clone(),
            handle: handle.clone(),
        };
        self.state.lock().mailboxes.insert(handle.id, mailbox);
    }

    /// A connection closed: its tracking ends and nothing more is redirected to it.
    pub fn unregister(&self, id: u64) {
        let mut state = self.state.lock();
        state.mailboxes.remove(&id);
        self.disable_locked(&mut state, id);
    }

    pub fn mode(&self, id: u64) -> Option<Mode> {
        self.state.lock().modes.get(&id).cloned()
    }

    /// CLIENT TRACKING ON with checked options. A client already tracking keeps its prefixes and adds
    /// the new ones, as Redis does.
    pub fn enable(&self, id: u64, namespace: u16, options: &Options) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if !state.modes.contains_key(&id) {
            self.clients_on.fetch_add(1, Ordering::Relaxed);
            fallow_store::changes::listen(true);
        }
        let mode = state.modes.entry(id).or_default();
        mode.redirect = options.redirect;
        mode.bcast = options.bcast;
        mode.optin = options.optin;
        mode.optout = options.optout;
        mode.noloop = options.noloop;
        mode.broken_redirect = false;
        mode.namespace = namespace;
        if !options.bcast {
            return;
        }
        let mut prefixes = options.prefixes.clone();
        if prefixes.is_empty() {
            prefixes.push(Vec::new());
        }
        for prefix in prefixes {
            mode.prefixes.insert(prefix.clone());
            state.prefixes.entry(prefix).or_default().clients.insert(id);
        }
    }

    /// CLIENT TRACKING OFF (also RESET and disconnection). The client's table items stay until their
    /// keys change, as in Redis: they are skipped then.
    pub fn disable(&self, id: u64) {
        let mut state = self.state.lock();
        self.disable_locked(&mut state, id);
    }

    fn disable_locked(&self, state: &mut State, id: u64) {
        let Some(mode) = state.modes.remove(&id) else {
            return;
        };
        for prefix in &mode.prefixes {
            let entry = state
                .prefixes
                .get_mut(prefix)
                .expect("a client's prefix exists");
            entry.clients.remove(&id);
            if entry.clients.is_empty() {
                let gone = state.prefixes.remove(prefix).expect("just found");
                state.pending_bytes -= pending_bytes_of(&gone);
            }
        }
        let before = self.clients_on.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "a tracking client was counted");
        fallow_store::changes::listen(false);
    }

    /// Remembers that client `id` read `keys` (a read-only command ran for it).
    pub fn remember<'k>(&self, id: u64, namespace: u16, keys: impl Iterator<Item = &'k [u8]>) {
        let mut state = self.state.lock();
        let mut added = 0;
        for key in keys {
            added += state.table.remember(namespace, key, id) as u64;
        }
        count(&self.stats.keys_remembered, added);
    }

    /// Turns what a command (`current`) or housekeeping (None) changed into invalidations: default-mode
    /// readers are told now, BCAST keys are collected for `broadcast`.
    pub fn changed(&self, outlet: &Outlet, changes: &Changes, mut current: Option<Current>) {
        if changes.overflowed {
            // Some changes were not recorded: only "everything" is safe to say.
            return self.flush(outlet, current);
        }
        let mut state = self.state.lock();
        let current_id = current.as_ref().map(|current| current.id);
        for change in &changes.changes {
            let namespace = fallow_store::pool::Address::of(change.keyspace).namespace;
            // A client changed the key; an expiry or eviction is nobody's (it matters for NOLOOP).
            let modifier = match change.cause {
                Cause::Written | Cause::Removed => current_id,
                Cause::Expired | Cause::Evicted => None,
            };
            if !state.prefixes.is_empty() {
                note_for_broadcast(&mut state, namespace, &change.key, modifier);
            }
            // Redis spares a NOLOOP reader whatever the running client's command did, expiries included.
            self.invalidate_key(&mut state, outlet, &mut current, namespace, &change.key);
        }
    }

    /// Sends the readers of one key an invalidation and forgets them.
    fn invalidate_key(
        &self,
        state: &mut State,
        outlet: &Outlet,
        current: &mut Option<Current>,
        namespace: u16,
        key: &[u8],
    ) {
        let Some(readers) = state.table.take(namespace, key) else {
            return;
        };
        let payload = Payload::Keys(Arc::from(vec![Box::<[u8]>::from(key)]));
        let current_id = current.as_ref().map(|current| current.id);
        for reader in readers {
            let Some(mode) = state.modes.get(&reader) else {
                continue; // tracking was turned off since it read the key
            };
            // A client that switched to BCAST is not sent what it read before.
            if mode.bcast || (mode.noloop && current_id == Some(reader)) {
                continue;
            }
            self.send(state, outlet, current, reader, payload.clone());
        }
    }

    /// FLUSHDB/FLUSHALL: every tracking client gets a null invalidation and the table is emptied.
    pub fn flush(&self, outlet: &Outlet, mut current: Option<Current>) {
        let mut state = self.state.lock();
        let ids: Vec<u64> = state.modes.keys().copied().collect();
        count(&self.stats.flush_invalidations, ids.len() as u64);
        for id in ids {
            self.send(&mut state, outlet, &mut current, id, Payload::Null);
        }
        state.table.clear();
    }

    /// Sends each BCAST client the keys changed under its prefixes since the last broadcast: one
    /// message per prefix, keys sorted (a NOLOOP client's own changes left out).
    pub fn broadcast(&self, outlet: &Outlet, mut current: Option<Current>) {
        let mut state = self.state.lock();
        if state.pending_bytes == 0 && !state.prefixes.values().any(|prefix| prefix.overflowed) {
            return;
        }
        let names: Vec<Vec<u8>> = state.prefixes.keys().cloned().collect();
        for name in names {
            let prefix = state.prefixes.get_mut(&name).expect("listed");
            let pending = std::mem::take(&mut prefix.pending);
            let overflowed = std::mem::take(&mut prefix.overflowed);
            let clients: Vec<u64> = prefix.clients.iter().copied().collect();
            for client in clients {
                let Some(payload) = broadcast_payload(&state, client, &pending, overflowed) else {
                    continue;
                };
                count(&self.stats.broadcasts_sent, 1);
                self.send(&mut state, outlet, &mut current, client, payload);
            }
        }
        state.pending_bytes = 0;
    }

    /// Keeps the table within `tracking-table-max-keys` and its byte bound: the oldest entries go, and
    /// their readers are told as if the keys changed (Redis evicts at random; oldest first keeps the
    /// keys still read).
    pub fn limit_table(&self, outlet: &Outlet, mut current: Option<Current>) {
        let keys_max = self.keys_max.load(Ordering::Relaxed);
        let bytes_max = self.bytes_max.load(Ordering::Relaxed);
        let mut state = self.state.lock();
        while state.table.over(keys_max, bytes_max) {
            let ((_, key), readers) = state.table.pop_oldest().expect("over: not empty");
            count(&self.stats.table_evictions, 1);
            let payload = Payload::Keys(Arc::from(vec![key]));
            for reader in readers {
                if state.modes.get(&reader).is_some_and(|mode| !mode.bcast) {
                    self.send(&mut state, outlet, &mut current, reader, payload.clone());
                }
            }
        }
    }

    /// Sends one message to tracking client `id`, or where it redirects to (Redis's
    /// sendTrackingMessage): a RESP3 receiver gets a push, a redirected-to RESP2 receiver a pub/sub
    /// message when subscribed, anyone else nothing.
    fn send(
        &self,
        state: &mut State,
        outlet: &Outlet,
        current: &mut Option<Current>,
        id: u64,
        payload: Payload,
    ) {
        let Some(mode) = state.modes.get_mut(&id) else {
            return;
        };
        let mut receiver = id;
        if mode.redirect != 0 {
            if !state.mailboxes.contains_key(&mode.redirect) {
                mode.broken_redirect = true;
                let redirect = mode.redirect;
                count(&self.stats.redirects_broken, 1);
                if resp3_of(state, current, id) {
                    let message = PubSubMessage::TrackingRedirectBroken { redirect };
                    self.post(state, outlet, current, id, message);
                }
                return;
            }
            receiver = mode.redirect;
        }
        let redirected = receiver != id;
        let receives = resp3_of(state, current, receiver)
            || (redirected && subscribed(state, current, receiver));
        if !receives {
            count(&self.stats.messages_dropped, 1);
            return;
        }
        // A null is written as the tracking client's protocol writes it, whoever receives it (as Redis).
        let message = PubSubMessage::Invalidate {
            keys: match payload {
                Payload::Keys(keys) => Some(keys),
                Payload::Null => None,
            },
            null_resp3: resp3_of(state, current, id),
        };
        count(&self.stats.invalidations_sent, 1);
        self.post(state, outlet, current, receiver, message);
    }

    /// Queues a message for connection `receiver`: deferred when it runs the command, else sent.
    fn post(
        &self,
        state: &State,
        outlet: &Outlet,
        current: &mut Option<Current>,
        receiver: u64,
        message: PubSubMessage,
    ) {
        if let Some(current) = current.as_mut().filter(|current| current.id == receiver) {
            current.deferred.push(message);
            return;
        }
        let Some(mailbox) = state.mailboxes.get(&receiver) else {
            count(&self.stats.messages_dropped, 1);
            return;
        };
        let delivered = outlet.pubsub.deliver_to(
            outlet.clients_memory,
            ClientClass::Pubsub,
            &mailbox.handle,
            &mailbox.sender,
            message,
        );
        if !delivered {
            count(&self.stats.messages_dropped, 1);
        }
    }

    /// After store work on this thread that is no RESP client's command (housekeeping's expiry and
    /// eviction, elastic reclaim, memcached commands): its invalidations and broadcasts.
    pub fn unattributed_changes(&self, outlet: &Outlet) {
        let changes = fallow_store::changes::take_thread_changes();
        if !self.any_on() {
            return;
        }
        if !changes.is_empty() {
            self.changed(outlet, &changes, None);
        }
        self.broadcast(outlet, None);
    }

    /// INFO: (keys in the table, (key, client) items, BCAST prefixes).
    pub fn table_sizes(&self) -> (usize, usize, usize) {
        let state = self.state.lock();
        (
            state.table.keys(),
            state.table.items(),
            state.prefixes.len(),
        )
    }

    /// Bytes the tracking table and the pending broadcasts hold.
    pub fn memory_bytes(&self) -> usize {
        let state = self.state.lock();
        state.table.bytes() + state.pending_bytes
    }
}

fn pending_bytes_of(prefix: &Prefix) -> usize {
    prefix
        .pending
        .keys()
        .map(|(_, key)| key.len() + PENDING_KEY_OVERHEAD_BYTES)
        .sum()
}

/// What one pending broadcast key costs beyond its bytes.
const PENDING_KEY_OVERHEAD_BYTES: usize = 48;

/// Adds a changed key to the pending keys of every prefix it falls under.
fn note_for_broadcast(state: &mut State, namespace: u16, key: &[u8], modifier: Option<u64>) {
    let bytes = key.len() + PENDING_KEY_OVERHEAD_BYTES;
    let over = state.pending_bytes + bytes > BROADCAST_PENDING_BYTES_MAX;
    let mut added = 0;
    for (name, prefix) in state.prefixes.iter_mut() {
        if !key.starts_with(name) {
            continue;
        }
        if over {
            prefix.overflowed = true;
            continue;
        }
        if prefix
            .pending
            .insert((namespace, key.into()), modifier)
            .is_none()
        {
            added += bytes;
        }
    }
    state.pending_bytes += added;
}

/// What a BCAST client is sent for one prefix: the pending keys of its namespace (less its own changes
/// under NOLOOP), or a null when the prefix overflowed; None when nothing is left for it.
fn broadcast_payload(
    state: &State,
    client: u64,
    pending: &BTreeMap<TableKey, Option<u64>>,
    overflowed: bool,
) -> Option<Payload> {
    let mode = state.modes.get(&client)?;
    if overflowed {
        return Some(Payload::Null);
    }
    let keys: Vec<Box<[u8]>> = pending
        .iter()
        .filter(|((namespace, _), modifier)| {
            *namespace == mode.namespace && !(mode.noloop && **modifier == Some(client))
        })
        .map(|((_, key), _)| key.clone())
        .collect();
    (!keys.is_empty()).then(|| Payload::Keys(keys.into()))
}

/// Whether connection `id` speaks RESP3 (the running one as it is now, others as they last showed).
fn resp3_of(state: &State, current: &Option<Current>, id: u64) -> bool {
    match current {
        Some(current) if current.id == id => current.resp3,
        _ => state
            .mailboxes
            .get(&id)
            .is_some_and(|mailbox| mailbox.handle.snapshot.lock().resp == 3),
    }
}

/// Whether connection `id` has subscriptions (a RESP2 connection receives redirected messages then).
fn subscribed(state: &State, current: &Option<Current>, id: u64) -> bool {
    match current {
        Some(current) if current.id == id => current.subscribed,
        _ => state.mailboxes.get(&id).is_some_and(|mailbox| {
            let snapshot = mailbox.handle.snapshot.lock();
            snapshot.subscriptions + snapshot.pattern_subscriptions > 0
        }),
    }
}

/// Writes a tracking message: a RESP3 push, or a RESP2 `__redis__:invalidate` pub/sub message.
pub fn encode(out: &mut fallow_proto::ReplyWriter, message: &PubSubMessage) {
    match message {
        PubSubMessage::Invalidate { keys, null_resp3 } => {
            if out.resp3 {
                out.push_len(2);
                out.bulk(b"invalidate");
            } else {
                out.push_len(3);
                out.bulk(b"message");
                out.bulk(INVALIDATE_CHANNEL);
            }
            match keys {
                Some(keys) => out.bulks(keys.iter().map(|key| &key[..])),
                None if *null_resp3 => out.buf.extend_from_slice(b"_\r\n"),
                None => out.buf.extend_from_slice(b"$-1\r\n"),
            }
        }
        PubSubMessage::TrackingRedirectBroken { redirect } => {
            out.push_len(2);
            out.bulk(b"tracking-redir-broken");
            out.int(*redirect as i64);
        }
        _ => unreachable!("only tracking messages are encoded here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::ClientKind;
    use fallow_store::changes::KeyChange;
    use tokio::sync::mpsc::Receiver;

    struct Harness {
        tracking: Tracking,
        pubsub: PubSub,
        clients_memory: ClientsMemory,
        receivers: HashMap<u64, Receiver<PubSubMessage>>,
    }

    impl Harness {
        fn new(connections: &[u64]) -> Harness {
            let mut harness = Harness {
                tracking: Tracking::new(0, usize::MAX),
                pubsub: PubSub::default(),
                clients_memory: ClientsMemory::default(),
                receivers: HashMap::new(),
            };
            for &id in connections {
                harness.connect(id, 3);
            }
            harness
        }

        fn connect(&mut self, id: u64, resp: u8) {
            let handle = Arc::new(ClientHandle::new(
                id,
                ClientKind::Resp,
                String::new(),
                String::new(),
            ));
            handle.snapshot.lock().resp = resp;
            let (sender, receiver) = tokio::sync::mpsc::channel(16);
            self.tracking.register(&handle, &sender);
            self.receivers.insert(id, receiver);
        }

        fn outlet(&self) -> Outlet<'_> {
            Outlet {
                pubsub: &self.pubsub,
                clients_memory: &self.clients_memory,
            }
        }

        /// Client `by` changed `keys` (by a write); returns what it deferred for itself.
        fn write(&self, by: u64, keys: &[&str]) -> Vec<PubSubMessage> {
            let changes = Changes {
                changes: keys
                    .iter()
                    .map(|key| KeyChange {
                        keyspace: 0,
                        key: key.as_bytes().into(),
                        cause: Cause::Written,
                    })
                    .collect(),
                overflowed: false,
            };
            let mut deferred = Vec::new();
            let current = Current {
                id: by,
                resp3: true,
                subscribed: false,
                deferred: &mut deferred,
            };
            self.tracking
                .changed(&self.outlet(), &changes, Some(current));
            deferred
        }

        /// The keys of each message queued for `id` (None for a null).
        fn received(&mut self, id: u64) -> Vec<Option<Vec<String>>> {
            let receiver = self.receivers.get_mut(&id).unwrap();
            std::iter::from_fn(|| receiver.try_recv().ok())
                .map(|message| keys_of(&message))
                .collect()
        }
    }

    fn keys_of(message: &PubSubMessage) -> Option<Vec<String>> {
        match message {
            PubSubMessage::Invalidate { keys, .. } => keys.as_ref().map(|keys| {
                keys.iter()
                    .map(|key| String::from_utf8_lossy(key).into_owned())
                    .collect()
            }),
            other => panic!("not an invalidation: {other:?}"),
        }
    }

    #[test]
    fn readers_are_told_once_and_the_writer_after_its_reply() {
        let mut harness = Harness::new(&[1, 2]);
        harness.tracking.enable(1, 0, &Options::default());
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        assert!(harness.write(2, &["k"]).is_empty());
        assert_eq!(harness.received(1), vec![Some(vec!["k".to_string()])]);
        harness.write(2, &["k"]);
        assert!(harness.received(1).is_empty(), "the entry went");
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        let deferred = harness.write(1, &["k"]);
        assert_eq!(deferred.len(), 1, "its own change is deferred, not queued");
        assert!(harness.received(1).is_empty());
        assert_eq!(harness.tracking.table_sizes(), (0, 0, 0));
    }

    #[test]
    fn noloop_spares_the_writer_and_off_stops_everything() {
        let mut harness = Harness::new(&[1, 2]);
        let noloop = Options {
            noloop: true,
            ..Options::default()
        };
        harness.tracking.enable(1, 0, &noloop);
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        assert!(harness.write(1, &["k"]).is_empty());
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        harness.tracking.disable(1);
        assert_eq!(harness.tracking.clients_on(), 0);
        harness.write(2, &["k"]);
        assert!(harness.received(1).is_empty());
    }

    #[test]
    fn bcast_sends_sorted_keys_per_prefix_after_the_batch() {
        let mut harness = Harness::new(&[1, 2]);
        let bcast = Options {
            bcast: true,
            prefixes: vec![b"b".to_vec(), b"a".to_vec()],
            ..Options::default()
        };
        harness.tracking.enable(1, 0, &bcast);
        harness.write(2, &["a2", "b1", "c", "a1", "a2"]);
        assert!(
            harness.received(1).is_empty(),
            "nothing before the broadcast"
        );
        harness.tracking.broadcast(&harness.outlet(), None);
        let got = harness.received(1);
        assert_eq!(
            got,
            vec![
                Some(vec!["a1".to_string(), "a2".to_string()]),
                Some(vec!["b1".to_string()])
            ]
        );
        assert_eq!(harness.tracking.memory_bytes(), 0, "pending keys are gone");
        assert_eq!(harness.tracking.table_sizes().2, 2);
        harness.tracking.unregister(1);
        assert_eq!(
            harness.tracking.table_sizes().2,
            0,
            "prefixes go with their last client"
        );
    }

    #[test]
    fn flush_sends_a_null_to_every_tracking_client() {
        let mut harness = Harness::new(&[1, 2, 3]);
        harness.tracking.enable(1, 0, &Options::default());
        harness.tracking.enable(
            2,
            0,
            &Options {
                bcast: true,
                ..Options::default()
            },
        );
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        harness.tracking.flush(&harness.outlet(), None);
        assert_eq!(harness.received(1), vec![None]);
        assert_eq!(harness.received(2), vec![None]);
        assert!(harness.received(3).is_empty());
        assert_eq!(harness.tracking.table_sizes().0, 0);
    }

    #[test]
    fn redirection_and_its_breaking() {
        let mut harness = Harness::new(&[1]);
        harness.connect(2, 2);
        let redirect = Options {
            redirect: 2,
            ..Options::default()
        };
        harness.tracking.enable(1, 0, &redirect);
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        harness.write(3, &["k"]);
        assert!(
            harness.received(2).is_empty(),
            "a RESP2 target without subscriptions receives nothing"
        );
        harness.tracking.remember(1, 0, [&b"k"[..]].into_iter());
        harness.tracking.unregister(2);
        harness.write(3, &["k"]);
        let receiver = harness.receivers.get_mut(&1).unwrap();
        assert!(matches!(
            receiver.try_recv(),
            Ok(PubSubMessage::TrackingRedirectBroken { redirect: 2 })
        ));
        assert!(harness.tracking.mode(1).unwrap().broken_redirect);
    }

    #[test]
    fn the_table_bound_invalidates_the_oldest() {
        let mut harness = Harness::new(&[1]);
        harness.tracking.set_bounds(2, usize::MAX);
        harness.tracking.enable(1, 0, &Options::default());
        for key in [&b"t1"[..], b"t2", b"t3"] {
            harness.tracking.remember(1, 0, [key].into_iter());
        }
        harness.tracking.limit_table(&harness.outlet(), None);
        assert_eq!(harness.received(1), vec![Some(vec!["t1".to_string()])]);
        assert_eq!(harness.tracking.table_sizes().0, 2);
        assert_eq!(
            harness
                .tracking
                .stats
                .table_evictions
                .load(Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn an_overflowed_record_flushes() {
        let mut harness = Harness::new(&[1]);
        harness.tracking.enable(1, 0, &Options::default());
        let changes = Changes {
            changes: Vec::new(),
            overflowed: true,
        };
        harness.tracking.changed(&harness.outlet(), &changes, None);
        assert_eq!(harness.received(1), vec![None]);
    }
}
