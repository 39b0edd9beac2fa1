//! The data types a key can hold. Strings live inline in segment items; collections live in a per-shard
//! table and the segment item holds their handle. Each collection type keeps an exact running estimate of
//! its heap bytes (`memory_bytes`) so the shard can account every stored byte.
pub mod bag;
pub mod bitmap;
mod codec;
pub mod geo;
pub mod hash;
pub mod hyperloglog;
pub mod lcs;
pub mod list;
pub mod redis_sort;
pub mod set;
pub mod sort;
pub mod stream;
pub mod topk;
pub mod zset;

pub use bag::BagValue;
pub use codec::DecodeError;
pub use hash::HashValue;
pub use list::ListValue;
pub use set::SetValue;
pub use stream::StreamValue;
pub use topk::TopKValue;
pub use zset::ZSetValue;

/// Estimated heap bytes for one owned byte string element: the bytes, the boxed slice and the allocator's
/// minimum chunk.
pub fn element_bytes(len: usize) -> usize {
    len.max(8).next_multiple_of(16) + 16
}

/// Resolves Redis's inclusive, possibly negative index range [start, end] over `len` elements (GETRANGE,
/// LRANGE, LTRIM, ZRANGE by rank): negative indexes count from the end, both ends are clamped. Some((from,
/// to)) with from <= to < len, or None when the range is empty.
pub fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { len + end } else { end.min(len - 1) };
    (start <= end && start < len && end >= 0).then_some((start as usize, end as usize))
}

/// How many picks a random-member count yields from a collection of `len` (HRANDFIELD, SRANDMEMBER,
/// ZRANDMEMBER): a negative count picks |count| times with repetition, a positive one picks distinct
/// elements, at most all of them.
pub fn pick_count(len: usize, count: i64) -> usize {
    if len == 0 {
        return 0;
    }
    if count < 0 {
        count.unsigned_abs() as usize
    } else {
        (count as u64).min(len as u64) as usize
    }
}

/// Calls `visit` with the position of each pick (see `pick_count`). A positive count covering the whole
/// collection visits every position in order, as Redis returns the whole collection then.
pub fn pick_indexes(
    len: usize,
    count: i64,
    rng: &mut impl rand::Rng,
    mut visit: impl FnMut(usize),
) {
    let picks = pick_count(len, count);
    if picks == 0 {
        return;
    }
    if count < 0 {
        (0..picks).for_each(|_| visit(rng.gen_range(0..len)));
    } else if picks == len {
        (0..len).for_each(visit);
    } else {
        rand::seq::index::sample(rng, len, picks)
            .into_iter()
            .for_each(visit);
    }
}

/// Type of the value a key holds, stored in the item header.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String = 1,
    Hash = 2,
    Set = 3,
    ZSet = 4,
    List = 5,
    TopN = 6,
    Bag = 7,
    Stream = 8,
}

impl Kind {
    pub fn from_u8(value: u8) -> Kind {
        Kind::try_from_u8(value).unwrap_or_else(|| panic!("corrupt item kind {value}"))
    }

    /// The kind stored as `value`, None for a byte no kind has (tier-2 records check with it).
    pub fn try_from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::String,
            2 => Kind::Hash,
            3 => Kind::Set,
            4 => Kind::ZSet,
            5 => Kind::List,
            6 => Kind::TopN,
            7 => Kind::Bag,
            8 => Kind::Stream,
            _ => return None,
        })
    }

    /// The name TYPE reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
            Kind::TopN => "topn",
            Kind::Bag => "bag",
            Kind::Stream => "stream",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Kind> {
        let name = name.to_ascii_lowercase();
        [
            Kind::String,
            Kind::Hash,
            Kind::Set,
            Kind::ZSet,
            Kind::List,
            Kind::TopN,
            Kind::Bag,
            Kind::Stream,
        ]
        .into_iter()
        .find(|kind| kind.name().as_bytes() == name)
    }
}

/// A collection value, owned by its shard's collection table.
#[derive(Clone, Debug)]
pub enum Collection {
    Hash(HashValue),
    Set(SetValue),
    ZSet(ZSetValue),
    List(ListValue),
    TopN(TopKValue),
    Bag(BagValue),
    /// Boxed: a stream's counters and trees would make every collection slot larger.
    Stream(Box<StreamValue>),
}

impl Collection {
    pub fn kind(&self) -> Kind {
        match self {
            Collection::Hash(_) => Kind::Hash,
            Collection::Set(_) => Kind::Set,
            Collection::ZSet(_) => Kind::ZSet,
            Collection::List(_) => Kind::List,
            Collection::TopN(_) => Kind::TopN,
            Collection::Bag(_) => Kind::Bag,
            Collection::Stream(_) => Kind::Stream,
        }
    }

    pub fn memory_bytes(&self) -> usize {
        match self {
            Collection::Hash(value) => value.memory_bytes(),
            Collection::Set(value) => value.memory_bytes(),
            Collection::ZSet(value) => value.memory_bytes(),
            Collection::List(value) => value.memory_bytes(),
            Collection::TopN(value) => value.memory_bytes(),
            Collection::Bag(value) => value.memory_bytes(),
            Collection::Stream(value) => value.memory_bytes(),
        }
    }

    /// Whether the key should go: a collection emptied by its commands is deleted. A reserved TopN is a
    /// value even with no members (it carries its k), a bag is never emptied, and a stream stays when
    /// its entries are gone (it keeps its last id and groups), as in Redis.
    pub fn is_empty(&self) -> bool {
        match self {
            Collection::Hash(value) => value.len() == 0,
            Collection::Set(value) => value.len() == 0,
            Collection::ZSet(value) => value.len() == 0,
            Collection::List(value) => value.len() == 0,
            Collection::TopN(_) => false,
            Collection::Bag(value) => value.is_empty(),
            Collection::Stream(_) => false,
        }
    }

    /// The encoding OBJECT ENCODING reports: the one Redis 7.0 would hold these contents in under
    /// `limits` (and the one DUMP writes). fallow's own memory layout is the same for every size.
    pub fn encoding(&self, limits: &crate::rdb::EncodingLimits) -> &'static str {
        match self {
            Collection::Hash(hash) if limits.hash_fits_listpack(hash.len(), hash.iter()) => {
                "listpack"
            }
            Collection::Hash(_) => "hashtable",
            Collection::Set(set) if limits.set_fits_intset(set.len(), set.iter()) => "intset",
            Collection::Set(_) => "hashtable",
            Collection::ZSet(zset)
                if limits.zset_fits_listpack(zset.len(), zset.iter().map(|(member, _)| member)) =>
            {
                "listpack"
            }
            Collection::ZSet(_) => "skiplist",
            Collection::List(_) => "quicklist",
            Collection::TopN(_) => "btree",
            Collection::Bag(_) => "summary",
            Collection::Stream(_) => "stream",
        }
    }

    /// Appends the whole value's binary encoding (for the tier-2 log and crash recovery). The kind is
    /// not part of it: store `kind()` beside it and pass it to `decode`. Each type's layout is described
    /// in its own file, and the shared conventions (LEB128 varint lengths, little-endian numbers, a
    /// leading version byte) in `codec.rs`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Collection::Hash(value) => value.encode(out),
            Collection::Set(value) => value.encode(out),
            Collection::ZSet(value) => value.encode(out),
            Collection::List(value) => value.encode(out),
            Collection::TopN(value) => value.encode(out),
            Collection::Bag(value) => value.encode(out),
            Collection::Stream(value) => value.encode(out),
        }
    }

    /// Decodes a value of `kind` that `encode` wrote; the whole of `bytes` must be that one value.
    /// Untrusted input is safe: corrupt bytes give an error, never a panic or an allocation larger than
    /// the input justifies. The result is built as the type's own inserts build it, so its form and
    /// `memory_bytes` are those of the same value built by commands.
    pub fn decode(kind: Kind, bytes: &[u8]) -> Result<Collection, DecodeError> {
        Ok(match kind {
            Kind::Hash => Collection::Hash(HashValue::decode(bytes)?),
            Kind::Set => Collection::Set(SetValue::decode(bytes)?),
            Kind::ZSet => Collection::ZSet(ZSetValue::decode(bytes)?),
            Kind::List => Collection::List(ListValue::decode(bytes)?),
            Kind::TopN => Collection::TopN(TopKValue::decode(bytes)?),
            Kind::Bag => Collection::Bag(BagValue::decode(bytes)?),
            Kind::Stream => Collection::Stream(Box::new(StreamValue::decode(bytes)?)),
            Kind::String => return Err(DecodeError::BadKind(kind)),
        })
    }
}

/// Access to one concrete collection type inside `Collection`.
pub trait CollectionType: Sized + Default {
    const KIND: Kind;
    fn wrap(self) -> Collection;
    fn from_ref(collection: &Collection) -> Option<&Self>;
    fn from_mut(collection: &mut Collection) -> Option<&mut Self>;
}

macro_rules! collection_type {
    ($type:ty, $variant:ident) => {
        impl CollectionType for $type {
            const KIND: Kind = Kind::$variant;
            fn wrap(self) -> Collection {
                Collection::$variant(self)
            }
            fn from_ref(collection: &Collection) -> Option<&Self> {
                match collection {
                    Collection::$variant(value) => Some(value),
                    _ => None,
                }
            }
            fn from_mut(collection: &mut Collection) -> Option<&mut Self> {
                match collection {
                    Collection::$variant(value) => Some(value),
                    _ => None,
                }
            }
        }
    };
}

collection_type!(HashValue, Hash);
collection_type!(SetValue, Set);
collection_type!(ZSetValue, ZSet);
collection_type!(ListValue, List);
collection_type!(TopKValue, TopN);
collection_type!(BagValue, Bag);

impl CollectionType for StreamValue {
    const KIND: Kind = Kind::Stream;
    fn wrap(self) -> Collection {
        Collection::Stream(Box::new(self))
    }
    fn from_ref(collection: &Collection) -> Option<&Self> {
        match collection {
            Collection::Stream(value) => Some(value),
            _ => None,
        }
    }
    fn from_mut(collection: &mut Collection) -> Option<&mut Self> {
        match collection {
            Collection::Stream(value) => Some(value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_redis_s_for_the_contents() {
        let limits = crate::rdb::EncodingLimits {
            hash_max_listpack_entries: 2,
            set_max_intset_entries: 2,
            zset_max_listpack_entries: 1,
            ..crate::rdb::EncodingLimits::default()
        };
        let mut hash = HashValue::default();
        hash.insert(b"a", b"1");
        assert_eq!(Collection::Hash(hash.clone()).encoding(&limits), "listpack");
        hash.insert(b"b", &[b'v'; 65]);
        assert_eq!(
            Collection::Hash(hash.clone()).encoding(&limits),
            "hashtable",
            "value too long"
        );
        let mut set = SetValue::default();
        set.insert(b"1");
        assert_eq!(Collection::Set(set.clone()).encoding(&limits), "intset");
        set.insert(b"x");
        assert_eq!(
            Collection::Set(set.clone()).encoding(&limits),
            "hashtable",
            "not an integer"
        );
        let mut zset = ZSetValue::default();
        zset.insert(b"a", 1.0);
        assert_eq!(Collection::ZSet(zset.clone()).encoding(&limits), "listpack");
        zset.insert(b"b", 2.0);
        assert_eq!(
            Collection::ZSet(zset).encoding(&limits),
            "skiplist",
            "past the entry limit"
        );
    }

    /// Every collection key pays for the largest variant, so a new type must fit beside the others.
    #[test]
    fn the_collection_slot_stays_small() {
        assert!(std::mem::size_of::<Collection>() <= 80);
        assert_eq!(std::mem::align_of::<Collection>(), 8);
    }

    #[test]
    fn ranges_clamp_like_redis() {
        assert_eq!(clamp_range(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp_range(-3, -2, 5), Some((2, 3)));
        assert_eq!(clamp_range(2, 100, 5), Some((2, 4)));
        assert_eq!(clamp_range(4, 2, 5), None);
        assert_eq!(clamp_range(0, -1, 0), None);
        assert_eq!(clamp_range(-100, -50, 5), None);
    }

    fn picks(len: usize, count: i64) -> Vec<usize> {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut seen = Vec::new();
        pick_indexes(len, count, &mut rng, |index| seen.push(index));
        seen
    }

    #[test]
    fn negative_counts_repeat_picks() {
        let seen = picks(3, -50);
        assert_eq!(seen.len(), 50);
        assert!(seen.iter().all(|&index| index < 3));
        // 50 draws from 3 leave no index unpicked with overwhelming probability (fixed seed).
        assert!((0..3).all(|index| seen.contains(&index)));
        assert_eq!(pick_count(3, -50), 50);
    }

    #[test]
    fn positive_counts_pick_distinct() {
        let mut seen = picks(100, 10);
        assert_eq!(seen.len(), 10);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10);
        assert!(seen.iter().all(|&index| index < 100));
        assert_eq!(picks(4, 10), vec![0, 1, 2, 3]);
        assert_eq!(picks(4, 4), vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_and_zero_counts_pick_nothing() {
        assert!(picks(0, -5).is_empty());
        assert!(picks(0, 5).is_empty());
        assert!(picks(5, 0).is_empty());
        assert_eq!(pick_count(0, -5), 0);
    }

    #[test]
    fn kinds_round_trip_through_byte_and_name() {
        assert_eq!(Kind::try_from_u8(0), None);
        assert_eq!(Kind::try_from_u8(9), None);
        for value in 1..=8 {
            let kind = Kind::from_u8(value);
            assert_eq!(kind as u8, value);
            assert_eq!(Kind::from_name(kind.name().as_bytes()), Some(kind));
        }
        assert_eq!(Kind::from_name(b"TOPN"), Some(Kind::TopN));
        assert_eq!(Kind::from_name(b"bag"), Some(Kind::Bag));
    }

    /// One small value of each collection type.
    fn one_of_each() -> Vec<Collection> {
        let mut hash = HashValue::default();
        hash.insert(b"field", b"value");
        let mut set = SetValue::default();
        set.insert(b"member");
        let mut zset = ZSetValue::default();
        zset.insert(b"low", f64::NEG_INFINITY);
        zset.insert(b"high", f64::INFINITY);
        let mut list = ListValue::default();
        list.push_back(b"x");
        list.push_front(b"y");
        let mut topn = TopKValue::new(3);
        topn.add(b"m", 7);
        let mut bag = BagValue::default();
        bag.add(-4);
        let mut stream = StreamValue::default();
        stream
            .add(
                stream::IdRequest::Exact(stream::StreamId::new(1, 1)),
                &[b"f", b"v"],
                0,
            )
            .expect("adds");
        stream.create_group(b"g", stream::StreamId::MIN, None);
        vec![
            Collection::Hash(hash),
            Collection::Set(set),
            Collection::ZSet(zset),
            Collection::List(list),
            Collection::TopN(topn),
            Collection::Bag(bag),
            Collection::Stream(Box::new(stream)),
        ]
    }

    fn encoded(collection: &Collection) -> Vec<u8> {
        let mut out = Vec::new();
        collection.encode(&mut out);
        out
    }

    #[test]
    fn collections_round_trip_by_kind() {
        for collection in one_of_each() {
            let bytes = encoded(&collection);
            let decoded = Collection::decode(collection.kind(), &bytes).expect("decodes");
            assert_eq!(decoded.kind(), collection.kind());
            let limits = crate::rdb::EncodingLimits::default();
            assert_eq!(decoded.encoding(&limits), collection.encoding(&limits));
            assert_eq!(decoded.is_empty(), collection.is_empty());
            assert_eq!(encoded(&decoded), bytes);
            for len in 0..bytes.len() {
                assert!(Collection::decode(collection.kind(), &bytes[..len]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(
                Collection::decode(collection.kind(), &longer).map(|_| ()),
                Err(DecodeError::TrailingBytes(1))
            );
        }
        // Decoded values account their bytes as built ones do; hashes, sets and lists also count their
        // spare slots, and a decoded one has no more than the value built by commands.
        for collection in one_of_each() {
            let decoded = Collection::decode(collection.kind(), &encoded(&collection)).unwrap();
            match collection.kind() {
                Kind::Hash | Kind::Set | Kind::List => {
                    assert!(decoded.memory_bytes() <= collection.memory_bytes())
                }
                _ => assert_eq!(decoded.memory_bytes(), collection.memory_bytes()),
            }
        }
    }

    #[test]
    fn strings_and_wrong_kinds_do_not_decode() {
        assert_eq!(
            Collection::decode(Kind::String, &[1, 0]).map(|_| ()),
            Err(DecodeError::BadKind(Kind::String))
        );
        let hash = encoded(&one_of_each()[0]);
        assert!(Collection::decode(Kind::List, &hash).is_err());
        assert!(Collection::decode(Kind::ZSet, &hash).is_err());
        assert!(Collection::decode(Kind::Bag, &hash).is_err());
    }

    proptest::proptest! {
        /// Arbitrary bytes, as any kind, give an error or a value (never a panic), and a value only
        /// when the bytes are exactly its encoding.
        #[test]
        fn arbitrary_bytes_never_panic(
            kind in 2u8..=8,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let kind = Kind::from_u8(kind);
            let mut versioned = vec![1];
            versioned.extend(&bytes);
            for input in [bytes, versioned] {
                if let Ok(collection) = Collection::decode(kind, &input) {
                    proptest::prop_assert_eq!(collection.kind(), kind);
                    proptest::prop_assert_eq!(encoded(&collection), input);
                }
            }
        }
    }
}
