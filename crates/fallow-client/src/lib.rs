//! fallow's Rust client: per-node connection pools, consistent-hash routing, interactive transactions
//! (`TXN.BEGIN` / `TXN.COMMIT`, see docs/transactions.md) with retry and backoff, and Claret's combining of
//! concurrent transactions' combinable operations (`combine`).
//!
//! ```no_run
//! use fallow_client::{Client, ClientConfig};
//! let client = Client::connect(ClientConfig { nodes: vec!["127.0.0.1:6379".into()], ..Default::default() })?;
//! let members = client.transaction(|txn| {
//!     let members = txn.call(&[b"SCARD", b"s"])?.as_int().unwrap_or(0);
//!     txn.call(&[b"SADD", b"s", b"x"])?;
//!     Ok(members)
//! })?;
//! # Ok::<(), fallow_client::ClientError>(())
//! ```
//!
//! Synchronous on purpose: a transaction's body runs on the caller's thread between its reads and writes,
//! and a thread per in-flight transaction is what benchmarks and applications of this kind use.
pub mod client;
pub mod combine;
pub mod commands;
pub mod connection;
pub mod error;
#[cfg(test)]
mod fuzz_replay;
#[doc(hidden)]
pub mod fuzzing;
pub mod reply;
pub mod ring;
pub mod stats;
pub mod txn;

pub use client::{Client, ClientConfig};
pub use error::{AbortCause, ClientError};
pub use reply::Reply;
pub use stats::{AbortCounts, ClientStats};
pub use txn::Txn;
