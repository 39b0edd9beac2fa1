//! Mirrors how Redis 7.0.15 `src/quicklist.c` lays a list out in nodes when
//! it is built by RPUSH (quicklistPushTail + _quicklistNodeAllowInsert), how
//! list-compress-depth compresses interior nodes (__quicklistCompress /
//! __quicklistCompressNode), and how rdbSaveObject writes the result as
//! RDB_TYPE_LIST_QUICKLIST_2; plus the reading side of rdbLoadObject for
//! RDB_TYPE_LIST_QUICKLIST_2 (18) and RDB_TYPE_LIST_QUICKLIST (14).
//!
//! Body layout (QUICKLIST_2):
//!   <node count: len> ( <container: len, 2 = PACKED listpack, 1 = PLAIN>
//!                       <node data: RDB string> )*
//! QUICKLIST (14) has no container field and each node is a ziplist.
//!
//! Node splitting for fill f (list-max-listpack-size, clamped to -5..=32767):
//! an element of at least the packed threshold (1 GiB unless changed with
//! DEBUG QUICKLIST-PACKED-THRESHOLD) gets a PLAIN node of its own, holding
//! the element verbatim. A smaller element of n bytes joins the tail node when
//! that node is a listpack and, with est = node bytes + n + 8:
//!   f < 0: est <= 4096 << (-f - 1)
//!   f >= 0: est <= 8192 and node count < f
//! otherwise it starts a new listpack node.
//!
//! Compression (depth d > 0): nodes at index d .. count-d are kept in memory
//! LZF-compressed when they are at least 48 bytes and liblzf (with an output
//! buffer of the node's size) gets compressed + 8 < node size; DUMP writes
//! those compressed bytes as an LZF string as they are. Every other node goes
//! through rdbSaveRawString (which may LZF it with its own, different rules).
//!
//! Differences: a list built with LPUSH, LINSERT, LSET or deletions has node
//! boundaries that depend on that history; this encoder always produces the
//! RPUSH layout (Redis keeps whatever node layout RESTORE hands it).

use std::borrow::Cow;

use super::encoding::{self, Reader};
use super::listpack::{self, Builder};
use super::value::EncodingLimits;
use super::{lzf, ziplist, DumpError};

/// Container value of a node holding one large element verbatim.
const CONTAINER_PLAIN: u64 = 1;
/// Container value of a node holding a listpack.
const CONTAINER_PACKED: u64 = 2;
/// `optimization_level[]`: size limits for fill -1 ..= -5.
const FILL_SIZE_LIMITS_BYTES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// `SIZE_SAFETY_LIMIT`.
const SAFETY_LIMIT_BYTES: usize = 8192;
/// `SIZE_ESTIMATE_OVERHEAD`.
const ESTIMATE_OVERHEAD_BYTES: usize = 8;
/// `MIN_COMPRESS_BYTES`.
const MIN_COMPRESS_BYTES: usize = 48;
/// `MIN_COMPRESS_IMPROVE`.
const MIN_COMPRESS_IMPROVE_BYTES: usize = 8;
/// `FILL_MAX`.
const FILL_MAX: i32 = (1 << 15) - 1;

/// One quicklist node ready to be written.
enum Node<'a> {
    Packed(Builder),
    Plain(&'a [u8]),
}

fn allows_insert(node: &Node, fill: i32, element_bytes: usize) -> bool {
    let Node::Packed(builder) = node else {
        return false;
    };
    let estimate = builder.size_bytes() + element_bytes + ESTIMATE_OVERHEAD_BYTES;
    if fill < 0 {
        let level = (-fill - 1) as usize;
        return FILL_SIZE_LIMITS_BYTES
            .get(level)
            .is_some_and(|&limit| estimate <= limit);
    }
    estimate <= SAFETY_LIMIT_BYTES && builder.count() < fill as usize
}

/// Splits `elements` into nodes the way repeated RPUSH does.
/// Elements of `plain_threshold_bytes` or more get a PLAIN node.
fn split(elements: &[Vec<u8>], fill: i32, plain_threshold_bytes: usize) -> Vec<Node<'_>> {
    let fill = fill.clamp(-5, FILL_MAX);
    let mut nodes: Vec<Node> = Vec::new();
    for element in elements {
        if element.len() >= plain_threshold_bytes {
            nodes.push(Node::Plain(element));
            continue;
        }
        let joins_tail = nodes
            .last()
            .is_some_and(|node| allows_insert(node, fill, element.len()));
        match nodes.last_mut() {
            Some(Node::Packed(builder)) if joins_tail => builder.append(element),
            _ => {
                let mut builder = Builder::new();
                builder.append(element);
                nodes.push(Node::Packed(builder));
            }
        }
    }
    nodes
}

/// __quicklistCompressNode: the in-memory LZF form of a node, if any.
fn compressed_node(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.len() < MIN_COMPRESS_BYTES {
        return None;
    }
    let packed = lzf::compress(raw, raw.len())?;
    (packed.len() + MIN_COMPRESS_IMPROVE_BYTES < raw.len()).then_some(packed)
}

/// Writes the RDB_TYPE_LIST_QUICKLIST_2 body for `elements`.
pub fn write_body(out: &mut Vec<u8>, elements: &[Vec<u8>], limits: &EncodingLimits) {
    let depth = limits.list_compress_depth_nodes;
    let nodes = split(
        elements,
        limits.list_max_listpack_size,
        limits.list_plain_threshold_bytes,
    );
    encoding::write_len(out, nodes.len() as u64);
    for (index, node) in nodes.iter().enumerate() {
        let (container, raw) = match node {
            Node::Packed(builder) => (CONTAINER_PACKED, Cow::Owned(builder.finish())),
            Node::Plain(bytes) => (CONTAINER_PLAIN, Cow::Borrowed(*bytes)),
        };
        encoding::write_len(out, container);
        let interior = depth > 0 && index >= depth && index + depth < nodes.len();
        match interior.then(|| compressed_node(&raw)).flatten() {
            Some(packed) => encoding::write_lzf_blob(out, &packed, raw.len()),
            None => encoding::write_string(out, &raw, limits.rdb_compression),
        }
    }
}

/// Reads a QUICKLIST_2 (`has_container`) or QUICKLIST body.
pub fn read_body(reader: &mut Reader<'_>, has_container: bool) -> Result<Vec<Vec<u8>>, DumpError> {
    let node_count = reader.count(if has_container { 2 } else { 1 })?;
    let mut elements = Vec::new();
    for _ in 0..node_count {
        let container = if has_container {
            reader.len()?
        } else {
            CONTAINER_PACKED
        };
        let data = reader.string()?;
        if data.is_empty() {
            return Err(DumpError::BadFormat("empty quicklist node"));
        }
        match (container, has_container) {
            (CONTAINER_PLAIN, _) => elements.push(data),
            (CONTAINER_PACKED, true) => {
                let entries = listpack::parse(&data)?;
                elements.extend(entries.into_iter().map(listpack::Entry::to_bytes));
            }
            (CONTAINER_PACKED, false) => elements.extend(ziplist::parse(&data)?),
            _ => return Err(DumpError::BadFormat("quicklist integrity check failed")),
        }
    }
    if elements.is_empty() {
        return Err(DumpError::BadFormat("empty list"));
    }
    Ok(elements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_counts(elements: &[Vec<u8>], fill: i32) -> Vec<usize> {
        split(elements, fill, 1 << 30)
            .iter()
            .map(|node| match node {
                Node::Packed(builder) => builder.count(),
                Node::Plain(_) => 1,
            })
            .collect()
    }

    #[test]
    fn count_fill_splits_by_count() {
        let elements: Vec<Vec<u8>> = (0..12).map(|i| format!("e{i}").into_bytes()).collect();
        assert_eq!(node_counts(&elements, 5), vec![5, 5, 2]);
    }

    #[test]
    fn size_fill_keeps_nodes_under_limit() {
        let elements: Vec<Vec<u8>> = (0..5000)
            .map(|i| format!("element:{i}").into_bytes())
            .collect();
        let nodes = split(&elements, -2, 1 << 30);
        assert!(nodes.len() > 1);
        for node in &nodes {
            if let Node::Packed(builder) = node {
                assert!(builder.size_bytes() <= 8192);
            }
        }
    }

    #[test]
    fn oversized_element_gets_its_own_node() {
        let elements = vec![b"a".to_vec(), vec![b'x'; 9000], b"b".to_vec()];
        assert_eq!(node_counts(&elements, -2), vec![1, 1, 1]);
    }

    #[test]
    fn body_round_trips() {
        let mut elements: Vec<Vec<u8>> = (0..3000)
            .map(|i| format!("v{}", i % 37).into_bytes())
            .collect();
        elements.insert(1000, vec![b'p'; 30]); // a PLAIN node at threshold 20
        for depth in [0, 1, 2] {
            let mut out = Vec::new();
            let limits = EncodingLimits {
                list_compress_depth_nodes: depth,
                list_plain_threshold_bytes: 20,
                ..EncodingLimits::default()
            };
            write_body(&mut out, &elements, &limits);
            let mut reader = Reader::new(&out, usize::MAX);
            assert_eq!(read_body(&mut reader, true).unwrap(), elements);
            assert!(reader.is_empty());
        }
    }
}
