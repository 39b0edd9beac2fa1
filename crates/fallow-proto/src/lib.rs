//! Protocol codecs for fallow. Each codec turns bytes into requests and replies into bytes; none does I/O
//! or knows about storage, so they can be fuzzed and benchmarked alone.
pub mod memcache;
pub mod reply;
pub mod resp;

pub use reply::ReplyWriter;
pub use resp::{parse_request, Parsed, RespLimits};
