//! Pub/sub registry: which connections listen on which channels and patterns. PUBLISH delivers into each
//! subscriber's bounded queue; a subscriber whose queue is full is disconnected (as Redis does when a
//! pub/sub client's output buffer limit is reached), so a slow reader never grows the server's memory.
use crate::server::ClientHandle;
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
}

#[derive(Default)]
pub struct PubSub {
    registry: Mutex<Registry>,
    pub messages_published: AtomicU64,
    pub subscribers_dropped_slow: AtomicU64,
}

impl PubSub {
    /// Subscribes a client to a channel (`pattern` = false) or a pattern.
    pub fn subscribe(
        &self,
        name: &[u8],
        pattern: bool,
        handle: &Arc<ClientHandle>,
        sender: &Sender<PubSubMessage>,
    ) {
        let mut registry = self.registry.lock();
        let map = if pattern {
            &mut registry.patterns
        } else {
            &mut registry.channels
        };
        map.entry(name.to_vec()).or_default().insert(
            handle.id,
            Subscriber {
                sender: sender.clone(),
                handle: handle.clone(),
            },
        );
    }

    pub fn unsubscribe(&self, name: &[u8], pattern: bool, client_id: u64) {
        let mut registry = self.registry.lock();
        let map = if pattern {
            &mut registry.patterns
        } else {
            &mut registry.channels
        };
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
        for map in [&mut registry.channels, &mut registry.patterns] {
            map.retain(|_, subscribers| {
                subscribers.remove(&client_id);
                !subscribers.is_empty()
            });
        }
    }

    /// Delivers a message; returns how many clients received it.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> usize {
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
                receivers += self.deliver(subscriber, message);
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
                receivers += self.deliver(subscriber, message);
            }
        }
        receivers
    }

    fn deliver(&self, subscriber: &Subscriber, message: PubSubMessage) -> usize {
        match subscriber.sender.try_send(message) {
            Ok(()) => 1,
            Err(TrySendError::Full(_)) => {
                self.subscribers_dropped_slow
                    .fetch_add(1, Ordering::Relaxed);
                subscriber.handle.kill();
                0
            }
            Err(TrySendError::Closed(_)) => 0,
        }
    }

    /// Active channels matching `pattern` (all when None).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let registry = self.registry.lock();
        registry
            .channels
            .keys()
            .filter(|channel| {
                pattern.is_none_or(|pattern| fallow_store::glob::matches(pattern, channel))
            })
            .cloned()
            .collect()
    }

    pub fn subscriber_count(&self, channel: &[u8]) -> usize {
        self.registry
            .lock()
            .channels
            .get(channel)
            .map_or(0, |subscribers| subscribers.len())
    }

    pub fn pattern_count(&self) -> usize {
        self.registry.lock().patterns.len()
    }
}
