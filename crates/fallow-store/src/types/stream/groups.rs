//! Consumer groups of a stream (Redis 7.0's XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM).
//!
//! A group has the id it delivered last, its read counter (`entries_read`, the position of that id
//! among all entries ever added, when known), its pending entries list (PEL: delivered, not yet
//! acknowledged, each owned by one consumer) and its consumers, each with the ids it owns. Groups and
//! consumers are ordered by name bytes, as Redis's radix trees list them. Every change goes through
//! `StreamValue` so the stream's byte count stays exact.
use super::{element_bytes, StreamId, StreamValue};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A group's slot, ids and counters (beside its name).
const GROUP_OVERHEAD_BYTES: usize = 112;
/// A consumer's slot, its shared name's header and its seen time (beside the name).
const CONSUMER_OVERHEAD_BYTES: usize = 80;
/// One pending entry: its slot in the group's PEL and in its consumer's.
const PENDING_BYTES: usize = 96;

/// A delivered, unacknowledged entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Arc<[u8]>,
    /// When it was last delivered (Unix ms).
    pub delivery_ms: i64,
    pub delivery_count: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// When the consumer last read or claimed (Unix ms).
    pub seen_ms: i64,
    pub(super) pending: BTreeSet<StreamId>,
}

impl Consumer {
    fn new(seen_ms: i64) -> Consumer {
        Consumer {
            seen_ms,
            pending: BTreeSet::new(),
        }
    }

    /// The ids it owns, in order.
    pub fn pending(&self) -> &BTreeSet<StreamId> {
        &self.pending
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    last_id: StreamId,
    entries_read: Option<i64>,
    pub(super) pel: BTreeMap<StreamId, Pending>,
    pub(super) consumers: BTreeMap<Arc<[u8]>, Consumer>,
}

impl Group {
    pub(super) fn new(last_id: StreamId, entries_read: Option<i64>) -> Group {
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// The id delivered last (XINFO's last-delivered-id).
    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    /// The read counter of the last delivered id; None when unknown.
    pub fn entries_read(&self) -> Option<i64> {
        self.entries_read
    }

    /// The pending entries list, by id.
    pub fn pel(&self) -> &BTreeMap<StreamId, Pending> {
        &self.pel
    }

    pub fn consumers(&self) -> impl ExactSizeIterator<Item = (&[u8], &Consumer)> {
        self.consumers
            .iter()
            .map(|(name, consumer)| (&**name, consumer))
    }

    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    /// Heap bytes of the group named `name`.
    pub(super) fn bytes(&self, name: &[u8]) -> usize {
        GROUP_OVERHEAD_BYTES
            + element_bytes(name.len())
            + self
                .consumers
                .keys()
                .map(|name| consumer_bytes(name))
                .sum::<usize>()
            + self.pel.len() * PENDING_BYTES
    }

    /// The consumer named `name`, created (seen now) when new; the bytes it added.
    fn consumer_entry(&mut self, name: &[u8], now_ms: i64) -> (Arc<[u8]>, usize) {
        if let Some((key, _)) = self.consumers.get_key_value(name) {
            return (key.clone(), 0);
        }
        let key: Arc<[u8]> = name.into();
        self.consumers.insert(key.clone(), Consumer::new(now_ms));
        (key, consumer_bytes(name))
    }

    /// Gives the pending entry `id` to `consumer` (moving it from its owner).
    /// Makes `id` pending for `consumer`, delivered once at `now_ms`; false (nothing changed) when it is
    /// pending already.
    fn start_pending(&mut self, id: StreamId, consumer: &Arc<[u8]>, now_ms: i64) -> bool {
        if self.pel.contains_key(&id) {
            return false;
        }
        let pending = Pending {
            consumer: consumer.clone(),
            delivery_ms: now_ms,
            delivery_count: 1,
        };
        self.pel.insert(id, pending);
        true
    }

    fn reassign(&mut self, id: StreamId, consumer: &Arc<[u8]>) {
        let pending = self.pel.get_mut(&id).expect("a pending entry");
        if pending.consumer != *consumer {
            if let Some(owner) = self.consumers.get_mut(&pending.consumer) {
                owner.pending.remove(&id);
            }
            pending.consumer = consumer.clone();
        }
        self.consumers
            .get_mut(consumer)
            .expect("an existing consumer")
            .pending
            .insert(id);
    }

    /// Drops the pending entry `id`; false when it is not pending.
    fn forget(&mut self, id: StreamId) -> bool {
        let Some(pending) = self.pel.remove(&id) else {
            return false;
        };
        if let Some(owner) = self.consumers.get_mut(&pending.consumer) {
            owner.pending.remove(&id);
        }
        true
    }
}

fn consumer_bytes(name: &[u8]) -> usize {
    CONSUMER_OVERHEAD_BYTES + element_bytes(name.len())
}

/// What XREADGROUP reads from one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRead {
    /// `>`: entries never delivered to the group.
    New,
    /// An id: the consumer's own pending entries after it.
    History(StreamId),
}

/// What XREADGROUP got from one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupReply {
    /// Nothing new to deliver (the stream is left out of the reply).
    Nothing,
    /// New entries, delivered now.
    New(Vec<StreamId>),
    /// Pending ids of the consumer with whether their entry still exists.
    History(Vec<(StreamId, bool)>),
}

/// XCLAIM's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    /// Entries idle for less are not claimed (0 = any).
    pub min_idle_ms: i64,
    /// The delivery time to set (IDLE/TIME); None = now. Out of [0, now] means now.
    pub delivery_ms: Option<i64>,
    /// RETRYCOUNT: the delivery count to set; None (or negative) = increment unless `just_id`.
    pub retry_count: Option<i64>,
    /// FORCE: entries not pending are made pending, if they exist.
    pub force: bool,
    pub just_id: bool,
    /// LASTID: raise the group's last delivered id to it.
    pub last_id: Option<StreamId>,
}

/// XAUTOCLAIM's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoClaimScan {
    /// Entries idle for less are skipped (0 = any).
    pub min_idle_ms: i64,
    /// The first pending id to look at.
    pub start: StreamId,
    /// Claim (or drop) at most this many entries; look at most 10 times as many.
    pub count: u64,
    pub just_id: bool,
}

/// XAUTOCLAIM's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoClaim {
    /// Where the next scan starts (0-0 when the PEL was scanned to its end).
    pub next: StreamId,
    pub claimed: Vec<StreamId>,
    /// Pending ids whose entries no longer exist; they left the PEL.
    pub deleted: Vec<StreamId>,
}

impl StreamValue {
    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.get(name)
    }

    pub fn groups(&self) -> impl ExactSizeIterator<Item = (&[u8], &Group)> {
        self.groups.iter().map(|(name, group)| (&**name, group))
    }

    /// XGROUP CREATE; false when the name is taken.
    pub fn create_group(
        &mut self,
        name: &[u8],
        last_id: StreamId,
        entries_read: Option<i64>,
    ) -> bool {
        if self.groups.contains_key(name) {
            return false;
        }
        let group = Group::new(last_id, entries_read);
        self.bytes += group.bytes(name);
        self.groups.insert(name.into(), group);
        true
    }

    /// XGROUP DESTROY; false when there is no such group.
    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        match self.groups.remove(name) {
            Some(group) => {
                self.bytes -= group.bytes(name);
                true
            }
            None => false,
        }
    }

    /// XGROUP SETID; false when there is no such group.
    pub fn set_group_id(&mut self, name: &[u8], id: StreamId, entries_read: Option<i64>) -> bool {
        let Some(group) = self.groups.get_mut(name) else {
            return false;
        };
        group.last_id = id;
        group.entries_read = entries_read;
        true
    }

    /// XGROUP CREATECONSUMER: Some(true) when created, Some(false) when it existed, None without the
    /// group.
    pub fn create_consumer(&mut self, group: &[u8], consumer: &[u8], now_ms: i64) -> Option<bool> {
        let group = self.groups.get_mut(group)?;
        let (_, added_bytes) = group.consumer_entry(consumer, now_ms);
        self.bytes += added_bytes;
        Some(added_bytes != 0)
    }

    /// XGROUP DELCONSUMER: how many entries it had pending (they leave the PEL), Some(0) when there is no
    /// such consumer, None without the group.
    pub fn delete_consumer(&mut self, group: &[u8], consumer: &[u8]) -> Option<usize> {
        let group = self.groups.get_mut(group)?;
        let Some(removed) = group.consumers.remove(consumer) else {
            return Some(0);
        };
        for id in &removed.pending {
            group.pel.remove(id);
        }
        self.bytes -= consumer_bytes(consumer) + removed.pending.len() * PENDING_BYTES;
        Some(removed.pending.len())
    }

    /// The consumer `consumer` of `group` (created when new) is seen now; false without the group.
    /// Redis 7.0 looks a consumer up (refreshing when it was seen, creating it) only when it is served
    /// something: XREADGROUP with entries or history to answer, XCLAIM and XAUTOCLAIM when they claim.
    fn touch_consumer(&mut self, group: &[u8], consumer: &[u8], now_ms: i64) -> bool {
        let Some(group) = self.groups.get_mut(group) else {
            return false;
        };
        let (name, added_bytes) = group.consumer_entry(consumer, now_ms);
        group.consumers.get_mut(&name).expect("just made").seen_ms = now_ms;
        self.bytes += added_bytes;
        true
    }

    /// XREADGROUP on this stream for `consumer`: up to `count` entries (0 = all). New entries advance the
    /// group's last id and read counter and, unless `no_ack`, become pending for the consumer; history
    /// re-delivers the consumer's pending entries. The consumer is created (and seen) when it is served,
    /// as history always is. None without the group.
    pub fn read_group(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        read: GroupRead,
        count: usize,
        no_ack: bool,
        now_ms: i64,
    ) -> Option<GroupReply> {
        let limit = if count == 0 { usize::MAX } else { count };
        let last_id = self.groups.get(group)?.last_id;
        match read {
            GroupRead::History(after) => {
                self.touch_consumer(group, consumer, now_ms);
                Some(GroupReply::History(
                    self.redeliver(group, consumer, after, limit, now_ms),
                ))
            }
            GroupRead::New if self.last_entry_id().is_some_and(|top| top > last_id) => {
                self.touch_consumer(group, consumer, now_ms);
                let ids: Vec<StreamId> = match last_id.next() {
                    Some(start) => self
                        .range(start, StreamId::MAX)
                        .take(limit)
                        .map(|(id, _)| id)
                        .collect(),
                    None => Vec::new(),
                };
                for &id in &ids {
                    self.deliver(group, consumer, id, no_ack, now_ms);
                }
                Some(GroupReply::New(ids))
            }
            GroupRead::New => Some(GroupReply::Nothing),
        }
    }

    /// Delivers the new entry `id` of `group` to `consumer`.
    fn deliver(&mut self, group: &[u8], consumer: &[u8], id: StreamId, no_ack: bool, now_ms: i64) {
        let read = self.groups[group].entries_read;
        let entries_read = if read.is_some() && !self.has_tombstones_from(id) {
            read.map(|read| read.wrapping_add(1))
        } else if self.entries_added != 0 {
            self.entries_read_at(id)
        } else {
            read
        };
        let group = self.groups.get_mut(group).expect("checked by the caller");
        group.entries_read = entries_read;
        group.last_id = id;
        if no_ack {
            return;
        }
        let (name, added_bytes) = group.consumer_entry(consumer, now_ms);
        self.bytes += added_bytes;
        if group.start_pending(id, &name, now_ms) {
            self.bytes += PENDING_BYTES;
        } else {
            // pending already (the group's id was set back): it starts over with this consumer
            let pending = group.pel.get_mut(&id).expect("pending");
            pending.delivery_ms = now_ms;
            pending.delivery_count = 1;
        }
        group.reassign(id, &name);
    }

    /// Re-delivers `consumer`'s pending entries after `after` (history reads).
    fn redeliver(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        after: StreamId,
        limit: usize,
        now_ms: i64,
    ) -> Vec<(StreamId, bool)> {
        let Some(start) = after.next() else {
            return Vec::new();
        };
        let group = self.groups.get_mut(group).expect("checked by the caller");
        let Some(owned) = group.consumers.get(consumer) else {
            return Vec::new();
        };
        let ids: Vec<StreamId> = owned.pending.range(start..).take(limit).copied().collect();
        ids.into_iter()
            .map(|id| {
                let exists = self.entries.contains_key(&id);
                if exists {
                    let pending = group.pel.get_mut(&id).expect("owned ids are pending");
                    pending.delivery_ms = now_ms;
                    pending.delivery_count += 1;
                }
                (id, exists)
            })
            .collect()
    }

    /// XACK of one id; false when it was not pending (or there is no such group).
    pub fn ack(&mut self, group: &[u8], id: StreamId) -> bool {
        let acked = self
            .groups
            .get_mut(group)
            .is_some_and(|group| group.forget(id));
        if acked {
            self.bytes -= PENDING_BYTES;
        }
        acked
    }

    /// XCLAIM: gives `consumer` the pending entries among `ids` idle long enough (the consumer is created,
    /// and seen, when it gets one); pending ids whose entries are gone leave the PEL. Returns the claimed
    /// ids, in the order asked; None without the group.
    pub fn claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        ids: &[StreamId],
        claim: &Claim,
        now_ms: i64,
    ) -> Option<Vec<StreamId>> {
        let group_name = group;
        let group = self.groups.get_mut(group_name)?;
        if let Some(last_id) = claim.last_id.filter(|&id| id > group.last_id) {
            group.last_id = last_id;
        }
        let delivery_ms = match claim.delivery_ms {
            Some(ms) if (0..=now_ms).contains(&ms) => ms,
            _ => now_ms,
        };
        let min_idle_ms = claim.min_idle_ms.max(0);
        let mut claimed = Vec::new();
        for &id in ids {
            let exists = self.entries.contains_key(&id);
            let group = self.groups.get_mut(group_name).expect("checked above");
            if !exists {
                if group.forget(id) {
                    self.bytes -= PENDING_BYTES;
                }
                continue;
            }
            let created = !group.pel.contains_key(&id);
            if created && !claim.force {
                continue;
            }
            if !created
                && min_idle_ms > 0
                && now_ms.wrapping_sub(group.pel[&id].delivery_ms) < min_idle_ms
            {
                continue;
            }
            if claimed.is_empty() {
                self.touch_consumer(group_name, consumer, now_ms);
            }
            let group = self.groups.get_mut(group_name).expect("checked above");
            let (name, _) = group.consumer_entry(consumer, now_ms);
            if group.start_pending(id, &name, now_ms) {
                self.bytes += PENDING_BYTES;
            }
            group.reassign(id, &name);
            let pending = group.pel.get_mut(&id).expect("pending");
            pending.delivery_ms = delivery_ms;
            match claim.retry_count.filter(|&count| count >= 0) {
                Some(count) => pending.delivery_count = count as u64,
                None if !claim.just_id => pending.delivery_count += 1,
                None => {}
            }
            claimed.push(id);
        }
        Some(claimed)
    }

    /// XAUTOCLAIM: scans the PEL from `scan.start`, claiming for `consumer` (created, and seen, when it
    /// gets an entry) entries idle long enough, until `scan.count` entries are claimed or dropped (their entries are
    /// gone) or 10 times as many pending entries were looked at. None without the group.
    pub fn autoclaim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        scan: &AutoClaimScan,
        now_ms: i64,
    ) -> Option<AutoClaim> {
        self.groups.get(group)?;
        let AutoClaimScan {
            min_idle_ms,
            start,
            count,
            just_id,
        } = *scan;
        let min_idle_ms = min_idle_ms.max(0);
        let mut result = AutoClaim::default();
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        // None once the scan passed the largest id
        let mut cursor = Some(start);
        let mut scanned_to_end = false;
        while attempts > 0 && left > 0 {
            attempts -= 1;
            let group_entry = self.groups.get_mut(group).expect("checked above");
            let next =
                cursor.and_then(|from| group_entry.pel.range(from..).next().map(|(&id, _)| id));
            let Some(id) = next else {
                scanned_to_end = true;
                break;
            };
            cursor = id.next();
            if !self.entries.contains_key(&id) {
                group_entry.forget(id);
                self.bytes -= PENDING_BYTES;
                result.deleted.push(id);
                left -= 1;
                continue;
            }
            if min_idle_ms > 0
                && now_ms.wrapping_sub(group_entry.pel[&id].delivery_ms) < min_idle_ms
            {
                continue;
            }
            if result.claimed.is_empty() {
                self.touch_consumer(group, consumer, now_ms);
            }
            let group_entry = self.groups.get_mut(group).expect("checked above");
            let (name, _) = group_entry.consumer_entry(consumer, now_ms);
            group_entry.reassign(id, &name);
            let pending = group_entry.pel.get_mut(&id).expect("pending");
            pending.delivery_ms = now_ms;
            if !just_id {
                pending.delivery_count += 1;
            }
            result.claimed.push(id);
            left -= 1;
        }
        let group = &self.groups[group];
        result.next = match cursor.filter(|_| !scanned_to_end) {
            Some(from) => group
                .pel
                .range(from..)
                .next()
                .map_or(StreamId::MIN, |(&id, _)| id),
            None => StreamId::MIN,
        };
        Some(result)
    }

    /// The group's lag: entries added and not yet delivered to it; None when it cannot be known
    /// (deleted entries after its last id, and no read counter to go by).
    pub fn lag(&self, group: &Group) -> Option<i64> {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return Some(0);
        }
        if let Some(read) = group.entries_read {
            if !self.has_tombstones_from(group.last_id) {
                return Some(added.wrapping_sub(read));
            }
        }
        self.entries_read_at(group.last_id)
            .map(|read| added.wrapping_sub(read))
    }
}
