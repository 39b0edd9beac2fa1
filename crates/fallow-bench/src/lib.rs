//! fallow-bench: a multi-threaded load generator for RESP and memcached servers, a null server that gives
//! the request/response ceiling of this machine, and bulk load / sorted export of record files.
//!
//! The load generator is a library first: [`run`] takes [`RunOptions`] (the flags of `fallow-bench run`)
//! and returns [`RunResults`], so experiments and the null-server probe drive it without a subprocess.
pub mod bulk;
pub mod clock;
pub mod experiments;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
pub mod net;
pub mod nullserver;
pub mod options;
pub mod plot;
pub mod protocol;
pub mod report;
pub mod runner;
pub mod transports;
pub mod txn;
pub mod workload;

pub use options::RunOptions;
pub use report::RunResults;
pub use runner::run;
