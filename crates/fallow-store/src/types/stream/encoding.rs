//! A stream's binary encoding (tier 2 and crash recovery). Conventions in `types::codec`; an id is two
//! varints (ms, seq). Layout, version 1:
//!
//! ```text
//! version 1 | last id | entries added (varint) | largest deleted id
//! node count, then per node (by first id):
//!     first id | last id (its newest entry, live or deleted) | deleted entries (varint)
//!     listpack bytes (varint) | master field count, fields (bytes)
//!     live entry count, then per entry: id | pair count (≥ 1) | field, value (bytes) ...
//! group count, then per group (by name):
//!     name (bytes) | last delivered id | read counter: 0, or 1 then an i64
//!     consumer count, then per consumer (by name):
//!         name (bytes) | seen ms (i64) | pending count, then per pending entry (by id):
//!             id | delivery ms (i64) | delivery count (varint)
//! ```
//!
//! Decoding rejects what no sequence of commands makes and what later commands could trip on: ids out
//! of order, an entry outside its node, an entry above the last id, fields missing, an id pending for two
//! consumers.
use super::super::codec::{put_bytes, put_len, put_varint, Reader};
use super::groups::{Consumer, Group, Pending};
use super::{DecodeError, Entry, Kind, Node, StreamId, StreamValue};
use std::collections::BTreeSet;
use std::sync::Arc;

const CODEC_VERSION: u8 = 1;

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_varint(out, id.ms);
    put_varint(out, id.seq);
}

fn read_id(reader: &mut Reader) -> Result<StreamId, DecodeError> {
    Ok(StreamId::new(reader.varint()?, reader.varint()?))
}

pub(super) fn encode(stream: &StreamValue, out: &mut Vec<u8>) {
    out.push(CODEC_VERSION);
    put_id(out, stream.last_id);
    put_varint(out, stream.entries_added);
    put_id(out, stream.max_deleted_id);
    put_len(out, stream.nodes.len());
    let mut masters = stream.nodes.iter().peekable();
    while let Some((&first, node)) = masters.next() {
        let end = masters.peek().map(|(&next, _)| next);
        encode_node(stream, first, end, node, out);
    }
    put_len(out, stream.groups.len());
    for (name, group) in &stream.groups {
        put_bytes(out, name);
        put_id(out, group.last_id());
        match group.entries_read() {
            Some(read) => {
                out.push(1);
                out.extend_from_slice(&read.to_le_bytes());
            }
            None => out.push(0),
        }
        put_len(out, group.consumers().len());
        for (name, consumer) in group.consumers() {
            put_bytes(out, name);
            out.extend_from_slice(&consumer.seen_ms.to_le_bytes());
            put_len(out, consumer.pending().len());
            for id in consumer.pending() {
                let pending = &group.pel()[id];
                put_id(out, *id);
                out.extend_from_slice(&pending.delivery_ms.to_le_bytes());
                put_varint(out, pending.delivery_count);
            }
        }
    }
}

/// One node and its live entries: those from `first` up to the next node's first id (`end`).
fn encode_node(
    stream: &StreamValue,
    first: StreamId,
    end: Option<StreamId>,
    node: &Node,
    out: &mut Vec<u8>,
) {
    put_id(out, first);
    put_id(out, node.last_id);
    put_varint(out, u64::from(node.deleted));
    put_varint(out, node.listpack_bytes);
    put_len(out, node.master_fields.len());
    for field in node.master_fields.iter() {
        put_bytes(out, field);
    }
    put_varint(out, u64::from(node.live));
    let entries = stream
        .entries
        .range(first..)
        .take_while(|(&id, _)| end.is_none_or(|end| id < end));
    for (&id, entry) in entries {
        put_id(out, id);
        out.extend_from_slice(entry.packed());
    }
}

pub(super) fn decode(bytes: &[u8]) -> Result<StreamValue, DecodeError> {
    let mut reader = Reader::new(bytes);
    reader.version(Kind::Stream, CODEC_VERSION)?;
    let mut stream = StreamValue {
        last_id: read_id(&mut reader)?,
        entries_added: reader.varint()?,
        max_deleted_id: read_id(&mut reader)?,
        ..StreamValue::default()
    };
    // a node takes at least 8 bytes: two ids, two counts, its byte size and its field count
    let node_count = reader.count("stream nodes", 8)?;
    for _ in 0..node_count {
        decode_node(&mut reader, &mut stream)?;
    }
    if stream
        .nodes
        .last_key_value()
        .is_some_and(|(_, node)| node.last_id > stream.last_id)
    {
        return Err(DecodeError::Invalid("stream entry above the last id"));
    }
    if stream.entries_added < stream.entries.len() as u64 {
        return Err(DecodeError::Invalid(
            "stream with fewer entries added than held",
        ));
    }
    // a group takes at least 5 bytes: its name's length, an id, the counter flag, a consumer count
    let group_count = reader.count("stream groups", 5)?;
    let mut previous: Option<&[u8]> = None;
    for _ in 0..group_count {
        let name = reader.bytes()?;
        if previous.is_some_and(|previous| previous >= name) {
            return Err(DecodeError::BadOrder("stream groups"));
        }
        previous = Some(name);
        let group = decode_group(&mut reader)?;
        stream.groups.insert(name.into(), group);
    }
    reader.finish()?;
    stream.bytes = stream.recount_bytes();
    Ok(stream)
}

fn decode_node(reader: &mut Reader, stream: &mut StreamValue) -> Result<(), DecodeError> {
    let first = read_id(reader)?;
    let last_id = read_id(reader)?;
    if stream
        .nodes
        .last_key_value()
        .is_some_and(|(_, previous)| previous.last_id >= first)
    {
        return Err(DecodeError::BadOrder("stream nodes"));
    }
    if last_id < first {
        return Err(DecodeError::Invalid("stream node ending before it starts"));
    }
    let deleted =
        u32::try_from(reader.varint()?).map_err(|_| DecodeError::Invalid("stream node count"))?;
    let listpack_bytes = reader.varint()?;
    let field_count = reader.count("stream node fields", 1)?;
    if field_count == 0 {
        return Err(DecodeError::Invalid("stream node without fields"));
    }
    let master_fields = (0..field_count)
        .map(|_| reader.bytes().map(Box::<[u8]>::from))
        .collect::<Result<Box<[_]>, _>>()?;
    // an entry takes at least 5 bytes: its id, its pair count and one pair
    let live = reader.count("stream entries", 5)?;
    let mut previous: Option<StreamId> = None;
    for _ in 0..live {
        let id = read_id(reader)?;
        if id < first || id > last_id || previous.is_some_and(|previous| previous >= id) {
            return Err(DecodeError::BadOrder("stream entries"));
        }
        previous = Some(id);
        // the entry's encoding is its packed form: checked here, then copied as it is
        let start = reader.remaining();
        let packed = reader.rest();
        let pair_count = reader.count("stream entry fields", 2)?;
        if pair_count == 0 {
            return Err(DecodeError::Invalid("stream entry without fields"));
        }
        for _ in 0..2 * pair_count {
            reader.bytes()?;
        }
        let packed = &packed[..start - reader.remaining()];
        stream.entries.insert(id, Entry::from_packed(packed));
    }
    let live = u32::try_from(live).map_err(|_| DecodeError::Invalid("stream node count"))?;
    let node = Node {
        master_fields,
        live,
        deleted,
        last_id,
        listpack_bytes,
    };
    stream.nodes.insert(first, node);
    Ok(())
}

fn decode_group(reader: &mut Reader) -> Result<Group, DecodeError> {
    let last_id = read_id(reader)?;
    let entries_read = match reader.u8()? {
        0 => None,
        1 => Some(reader.i64()?),
        _ => return Err(DecodeError::Invalid("stream group read counter")),
    };
    let mut group = Group::new(last_id, entries_read);
    // a consumer takes at least 10 bytes: its name's length, its seen time, a pending count
    let consumer_count = reader.count("stream consumers", 10)?;
    let mut previous: Option<&[u8]> = None;
    for _ in 0..consumer_count {
        let name = reader.bytes()?;
        if previous.is_some_and(|previous| previous >= name) {
            return Err(DecodeError::BadOrder("stream consumers"));
        }
        previous = Some(name);
        let name: Arc<[u8]> = name.into();
        let seen_ms = reader.i64()?;
        // a pending entry takes at least 11 bytes: its id, its delivery time and count
        let pending_count = reader.count("stream pending entries", 11)?;
        let mut owned = BTreeSet::new();
        let mut last: Option<StreamId> = None;
        for _ in 0..pending_count {
            let id = read_id(reader)?;
            if last.is_some_and(|last| last >= id) {
                return Err(DecodeError::BadOrder("stream pending entries"));
            }
            last = Some(id);
            let pending = Pending {
                consumer: name.clone(),
                delivery_ms: reader.i64()?,
                delivery_count: reader.varint()?,
            };
            if group.pel.insert(id, pending).is_some() {
                return Err(DecodeError::Duplicate("stream pending entry"));
            }
            owned.insert(id);
        }
        let consumer = Consumer {
            seen_ms,
            pending: owned,
        };
        group.consumers.insert(name, consumer);
    }
    Ok(group)
}
