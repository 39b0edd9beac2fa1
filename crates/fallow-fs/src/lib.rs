//! `fallow fs`: a FUSE passthrough filesystem over a backing directory whose file blocks are cached in
//! fallow's pool, as the second level under the kernel's page cache (Mortar's MortarLoad, §4.3), with
//! feedback-directed read-ahead. See docs/fs.md.
//!
//! Layers: `passthrough` (FUSE operations on the backing directory, `inodes` holding O_PATH
//! descriptors) → `cache` (blocks, consistency, `io_queue`, `prefetch`, `remote` connection to fallow) →
//! fallow-client. `mount` runs it all; `null` is the benchmark's null filesystem; `stats` the counters.
pub mod cache;
pub mod inodes;
pub mod mount;
pub mod null;
pub mod options;
pub mod passthrough;
pub mod stats;
pub mod sys;

pub use mount::run;
pub use options::FsArgs;
