//! Wire protocol codecs for fallow (no I/O, no storage logic).
pub mod memcache;
