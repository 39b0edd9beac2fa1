//! The data types a key can hold. Strings live inline in segment items; collections live in a per-shard
//! table and the segment item holds their handle. Each collection type keeps an exact running estimate of
//! its heap bytes (`memory_bytes`) so the shard can account every stored byte.
pub mod hash;
pub mod list;
pub mod set;
pub mod zset;

pub use hash::HashValue;
pub use list::ListValue;
pub use set::SetValue;
pub use zset::ZSetValue;

/// Estimated heap bytes for one owned byte string element: the bytes, the boxed slice and the allocator's
/// minimum chunk.
pub fn element_bytes(len: usize) -> usize {
    len.max(8).next_multiple_of(16) + 16
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
}

impl Kind {
    pub fn from_u8(value: u8) -> Kind {
        match value {
            1 => Kind::String,
            2 => Kind::Hash,
            3 => Kind::Set,
            4 => Kind::ZSet,
            5 => Kind::List,
            other => panic!("corrupt item kind {other}"),
        }
    }

    /// The name TYPE reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Kind> {
        let name = name.to_ascii_lowercase();
        [Kind::String, Kind::Hash, Kind::Set, Kind::ZSet, Kind::List]
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
}

impl Collection {
    pub fn kind(&self) -> Kind {
        match self {
            Collection::Hash(_) => Kind::Hash,
            Collection::Set(_) => Kind::Set,
            Collection::ZSet(_) => Kind::ZSet,
            Collection::List(_) => Kind::List,
        }
    }

    pub fn memory_bytes(&self) -> usize {
        match self {
            Collection::Hash(value) => value.memory_bytes(),
            Collection::Set(value) => value.memory_bytes(),
            Collection::ZSet(value) => value.memory_bytes(),
            Collection::List(value) => value.memory_bytes(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Collection::Hash(value) => value.len() == 0,
            Collection::Set(value) => value.len() == 0,
            Collection::ZSet(value) => value.len() == 0,
            Collection::List(value) => value.len() == 0,
        }
    }

    /// The encoding OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        match self {
            Collection::Hash(_) => "hashtable",
            Collection::Set(_) => "hashtable",
            Collection::ZSet(_) => "skiplist",
            Collection::List(_) => "quicklist",
        }
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
