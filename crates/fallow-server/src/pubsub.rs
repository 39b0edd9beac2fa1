//! Pub/sub registry: which connections listen on which channels, patterns and shard channels (Redis 7's
//! sharded pub/sub: SSUBSCRIBE and SPUBLISH, a namespace of their own). PUBLISH delivers into each
//! subscriber's queue, bounded in bytes by the pubsub class of `client-output-buffer-limit` (the queued
//! messages count as the subscriber's output, with its unwritten replies) and in messages by
//! `pubsub-queue-messages-max`; a subscriber past either is disconnected, as Redis does, so a slow reader
//! never grows the server's memory.
use crate::clients::memory::{self as client_memory, ClientClass, ClientsMemory};
use crate::clients::ClientHandle;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::{error::TrySendError, Sender};

/// A message on its way to one subscriber.
#[derive(Clone, Debug)]
pub enum PubSubMessage {
    Message {
        channel: Arc<[u8]>,
        payload: Arc<[u8]>,
    },
    PatternMessage {
        pattern: Arc<[u8]>,
        channel: Arc<[u8]>,
        payload: Arc<[u8]>,
    },
    ShardMessage {
        channel: Arc<[u8]>,
        payload: Arc<[u8]>,
    },
    /// A client-side caching invalidation (`crate::tracking`): its keys, or None for everything, a
    /// null written as the tracking client's protocol writes it.
    Invalidate {
        keys: Option<Arc<[Box<[u8]>]>>,
        null_resp3: bool,
    },
    /// Client-side caching: the connection invalidations were redirected to is gone.
    TrackingRedirectBroken { redirect: u64 },
    /// A MONITOR line (see `crate::monitor`), sent as a simple string.
    Monitor(Arc<[u8]>),
}

/// The three subscription namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Channels,
    Patterns,
    Shard,
}

/// What one PUBLISH checks each delivery against.
struct Delivery<'a> {
    clients: &'a ClientsMemory,
    limit: client_memory::ClassLimit,
    now_ms: u64,
    over_clients_limit: std::cell::Cell<bool>,
}

impl PubSubMessage {
    /// Bytes the message holds for one subscriber until it is written: its encoded size (the payload
    /// is shared by all subscribers, but each will copy it into its output).
    pub fn queued_bytes(&self) -> u64 {
        /// The RESP framing of the message: array header, the kind, lengths and line ends.
        const FRAMING_BYTES: u64 = 48;
        let names = match self {
            PubSubMessage::Message { channel, .. }
            | PubSubMessage::ShardMessage { channel, .. } => channel.len(),
            PubSubMessage::PatternMessage {
                pattern, channel, ..
            } => pattern.len() + channel.len(),
            PubSubMessage::Invalidate { keys, .. } => {
                return keys
                    .as_ref()
                    .map_or(0, |keys| keys.iter().map(|key| key.len() as u64 + 16).sum())
                    + FRAMING_BYTES;
            }
            PubSubMessage::TrackingRedirectBroken { .. } => return FRAMING_BYTES,
            PubSubMessage::Monitor(_) => 0,
        };
        (names + self.payload().len()) as u64 + FRAMING_BYTES
    }

    fn payload(&self) -> &[u8] {
        match self {
            PubSubMessage::Message { payload, .. }
            | PubSubMessage::PatternMessage { payload, .. }
            | PubSubMessage::ShardMessage { payload, .. } => payload,
            PubSubMessage::Invalidate { .. } | PubSubMessage::TrackingRedirectBroken { .. } => &[],
            PubSubMessage::Monitor(line) => line,
        }
    }
}

#[derive(Clone)]
struct Subscriber {
    sender: Sender<PubSubMessage>,
    handle: Arc<ClientHandle>,
}

#[derive(Default)]
struct Registry {
    channels: HashMap<Vec<u8>, HashMap<u64, Subscriber>>,
    patterns: HashMap<Vec<u8>, HashMap<u64, Subscriber>>,
    shard_channels: HashMap<Vec<u8>, HashMap<u64, Subscriber>>,
}

impl Registry {
    fn space(&mut self, space: Space) -> &mut HashMap<Vec<u8>, HashMap<u64, Subscriber>> {
        match space {
            Space::Channels => &mut self.channels,
            Space::Patterns => &mut self.patterns,
            Space::Shard => &mut self.shard_channels,
        }
    }
}

#[derive(Default)]
pub struct PubSub {
    registry: Mutex<Registry>,
    pub messages_published: AtomicU64,
    pub subscribers_dropped_slow: AtomicU64,
}

impl PubSub {
    /// Subscribes a client to a channel, pattern or shard channel.
    pub fn subscribe(
        &self,
        name: &[u8],
        space: Space,
        handle: &Arc<ClientHandle>,
        sender: &Sender<PubSubMessage>,
    ) {
        let mut registry = self.registry.lock();
        registry
            .space(space)
            .entry(name.to_vec())
            .or_default()
            .insert(
                handle.id,
                Subscriber {
                    sender: sender.clone(),
                    handle: handle.clone(),
                },
            );
    }

    pub fn unsubscribe(&self, name: &[u8], space: Space, client_id: u64) {
        let mut registry = self.registry.lock();
        let map = registry.space(space);
        if let Some(subscribers) = map.get_mut(name) {
            subscribers.remove(&client_id);
            if subscribers.is_empty() {
                map.remove(name);
            }
        }
    }

    /// Removes a client from everything (it disconnected).
    pub fn unsubscribe_all(&self, client_id: u64) {
        let mut guard = self.registry.lock();
        let registry = &mut *guard;
        for map in [
            &mut registry.channels,
            &mut registry.patterns,
            &mut registry.shard_channels,
        ] {
            map.retain(|_, subscribers| {
                subscribers.remove(&client_id);
                !subscribers.is_empty()
            });
        }
    }

    /// Delivers a message; returns how many clients received it. Subscribers past their output limits
    /// are closed; true in the second value when all clients' buffers passed maxmemory-clients.
    pub fn publish(
        &self,
        channel: &[u8],
        payload: &[u8],
        clients: &ClientsMemory,
    ) -> (usize, bool) {
        let limit = clients.limits().class(ClientClass::Pubsub);
        let delivery = Delivery {
            clients,
            limit,
            now_ms: clients.now_ms(),
            over_clients_limit: std::cell::Cell::new(false),
        };
        self.messages_published.fetch_add(1, Ordering::Relaxed);
        let registry = self.registry.lock();
        let channel: Arc<[u8]> = channel.into();
        let payload: Arc<[u8]> = payload.into();
        let mut receivers = 0;
        if let Some(subscribers) = registry.channels.get(&*channel) {
            for subscriber in subscribers.values() {
                let message = PubSubMessage::Message {
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                receivers += self.deliver(&delivery, subscriber, message);
            }
        }
        for (pattern, subscribers) in &registry.patterns {
            if !fallow_store::glob::matches(pattern, &channel) {
                continue;
            }
            let pattern: Arc<[u8]> = pattern.as_slice().into();
            for subscriber in subscribers.values() {
                let message = PubSubMessage::PatternMessage {
                    pattern: pattern.clone(),
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                receivers += self.deliver(&delivery, subscriber, message);
            }
        }
        (receivers, delivery.over_clients_limit.get())
    }

    /// SPUBLISH: delivers a message to a shard channel's subscribers; returns how many received it (and
    /// whether all clients' buffers passed maxmemory-clients, as `publish`).
    pub fn publish_shard(
        &self,
        channel: &[u8],
        payload: &[u8],
        clients: &ClientsMemory,
    ) -> (usize, bool) {
        let delivery = Delivery {
            clients,
            limit: clients.limits().class(ClientClass::Pubsub),
            now_ms: clients.now_ms(),
            over_clients_limit: std::cell::Cell::new(false),
        };
        self.messages_published.fetch_add(1, Ordering::Relaxed);
        let registry = self.registry.lock();
        let Some(subscribers) = registry.shard_channels.get(channel) else {
            return (0, false);
        };
        let channel: Arc<[u8]> = channel.into();
        let payload: Arc<[u8]> = payload.into();
        let receivers = subscribers
            .values()
            .map(|subscriber| {
                let message = PubSubMessage::ShardMessage {
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                self.deliver(&delivery, subscriber, message)
            })
            .sum();
        (receivers, delivery.over_clients_limit.get())
    }

    /// Queues one message outside any channel (a MONITOR line, a client-side caching invalidation) for
    /// one client under `class`'s output limits; false when it was not queued (the client is closed, or
    /// was closed now for passing its limits).
    pub fn deliver_to(
        &self,
        clients: &ClientsMemory,
        class: ClientClass,
        handle: &Arc<ClientHandle>,
        sender: &Sender<PubSubMessage>,
        message: PubSubMessage,
    ) -> bool {
        let delivery = Delivery {
            clients,
            limit: clients.limits().class(class),
            now_ms: clients.now_ms(),
            over_clients_limit: std::cell::Cell::new(false),
        };
        let subscriber = Subscriber {
            sender: sender.clone(),
            handle: handle.clone(),
        };
        // Past maxmemory-clients, housekeeping closes the largest clients on its next tick.
        self.deliver(&delivery, &subscriber, message) == 1
    }

    /// Queues a message for one subscriber, its bytes counted as the subscriber's output first.
    fn deliver(
        &self,
        delivery: &Delivery,
        subscriber: &Subscriber,
        message: PubSubMessage,
    ) -> usize {
        let handle = &subscriber.handle;
        if handle.is_killed() {
            return 0;
        }
        let bytes = message.queued_bytes();
        let memory = &handle.memory;
        let queued = memory.pubsub_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let output = queued + memory.output_bytes.load(Ordering::Relaxed);
        if output >= client_memory::TRIM_AFTER_CLIENT_BYTES {
            memory.peak_bytes.fetch_max(output, Ordering::Relaxed);
        }
        if let Some(breach) = client_memory::check(
            delivery.limit,
            output,
            &memory.soft_since_ms,
            delivery.now_ms,
        ) {
            memory.pubsub_bytes.fetch_sub(bytes, Ordering::Relaxed);
            delivery.clients.close_for_output(handle, breach, output);
            return 0;
        }
        // Counted before it is sent: the subscriber's connection subtracts it once it takes it.
        if delivery.clients.grow(bytes) {
            delivery.over_clients_limit.set(true);
        }
        match subscriber.sender.try_send(message) {
            Ok(()) => 1,
            Err(error) => {
                memory.pubsub_bytes.fetch_sub(bytes, Ordering::Relaxed);
                delivery.clients.shrink(bytes);
                if let TrySendError::Full(_) = error {
                    self.subscribers_dropped_slow
                        .fetch_add(1, Ordering::Relaxed);
                    handle.kill();
                }
                0
            }
        }
    }

    /// Active channels (or shard channels) matching `pattern` (all when None).
    pub fn channels(&self, space: Space, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut registry = self.registry.lock();
        registry
            .space(space)
            .keys()
            .filter(|channel| {
                pattern.is_none_or(|pattern| fallow_store::glob::matches(pattern, channel))
            })
            .cloned()
            .collect()
    }

    /// Subscribers of a channel (or shard channel), pattern subscriptions not counted.
    pub fn subscriber_count(&self, space: Space, channel: &[u8]) -> usize {
        self.registry
            .lock()
            .space(space)
            .get(channel)
            .map_or(0, |subscribers| subscribers.len())
    }

    pub fn pattern_count(&self) -> usize {
        self.registry.lock().patterns.len()
    }
}
