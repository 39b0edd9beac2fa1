//! The performance model of Krevat et al. (CMU-PDL-10-108): optimal runtimes of data-intensive jobs from the
//! application-level bandwidths of the bottleneck resource, and the calibration of this machine.
//!
//! - [`mapreduce`]: the paper's Table 3, eq. (1) and (2), efficiency and "nodes an optimal system needs";
//! - [`kv`]: the ceiling of a key-value workload on this machine (null server, loopback, memory);
//! - [`bulk`]: the optimum of a bulk load or sorted dump (disk, loopback, memory, pipelined);
//! - [`calibrate`]: measuring this machine's bandwidths into a JSON file the others read.
//!
//! Units are decimal throughout (1 MB = 10^6 bytes), as the paper's figures require.
pub mod bulk;
pub mod calibrate;
pub mod cli;
pub mod kv;
pub mod mapreduce;
pub mod units;

#[cfg(test)]
mod test_support;
