//! The fallow server: configuration, networking, connections and the command table on top of
//! `fallow-store` (data) and `fallow-proto` (codecs).
pub mod acl;
pub mod atomic_file;
pub mod clients;
pub mod command;
pub mod config;
pub mod connection;
pub mod durability;
pub mod elastic;
pub mod fdlimit;
pub mod fscache;
#[cfg(test)]
mod fuzz_replay;
#[doc(hidden)]
pub mod fuzzing;
pub mod latency;
pub mod log_limit;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod notify;
pub mod pubsub;
pub mod scripting;
pub mod server;
pub mod slowlog;
pub mod stats;
pub mod tenants;
pub mod tracking;
pub mod txn;
pub mod units;
