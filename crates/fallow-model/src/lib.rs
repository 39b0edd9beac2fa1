//! The performance model of Krevat et al. (CMU-PDL-10-108): optimal runtimes of data-intensive jobs from the
//! application-level bandwidths of the bottleneck resource, and the calibration of this machine.
pub mod calibrate;
pub mod cli;
