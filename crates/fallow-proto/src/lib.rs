//! Protocol codecs for fallow. Each codec turns bytes into requests and replies into bytes; none does I/O
//! or knows about storage, so they can be fuzzed and benchmarked alone. `socket_path` names the default Unix
//! socket, the one rule the server and every tool and client share.
#[cfg(test)]
mod fuzz_replay;
#[doc(hidden)]
pub mod fuzzing;
pub mod memcache;
pub mod reply;
pub mod reply_value;
pub mod resp;
pub mod socket_path;

pub use reply::ReplyWriter;
pub use resp::{parse_request, Parsed, RespLimits};
