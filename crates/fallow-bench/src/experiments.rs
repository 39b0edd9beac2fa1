//! `fallow-bench elastic <experiment> [ARGS]`: the elastic-memory experiments of issue 4. Each is a Python
//! driver in `scripts/bench/elastic/` (it starts servers, PostgreSQL, hogs and client processes, and plots);
//! this subcommand finds the driver and runs it with the arguments given, so the experiments are reached
//! from the benchmark binary like its other work.
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::Command;

/// The experiments, named as their scripts (`reclaim-latency` runs `reclaim_latency.py`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ElasticExperiment {
    /// Mortar Fig. 14a: release 0.5-8 GiB on the careful and fast paths; time until RSS falls; GET p99.
    ReclaimLatency,
    /// Mortar Fig. 14b: hit rate after a cut of more than half, careful vs fast.
    Rewarm,
    /// Mortar §6.5: a host's free-memory trace with a real hog; elastic vs fixed fallow and memcached.
    DynamicSizing,
    /// Mortar §6.6 with real servers: one host against five.
    Multihost,
    /// Mortar §6.6 by simulation: one host against five, 1-5 applications per host.
    MultihostSim,
    /// Elastic against fixed mode on the side-by-side KV benchmark.
    Overhead,
}

#[derive(Args, Debug)]
pub struct ElasticArgs {
    pub experiment: ElasticExperiment,
    /// Directory of the drivers (default: scripts/bench/elastic of the source tree this binary was built from).
    #[arg(long, value_name = "DIR")]
    pub scripts_dir: Option<PathBuf>,
    /// Python interpreter.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Arguments for the driver (see `fallow-bench elastic <experiment> -- --help`).
    #[arg(last = true)]
    pub driver_args: Vec<String>,
}

impl ElasticExperiment {
    fn script_name(self) -> String {
        let name = self
            .to_possible_value()
            .expect("every experiment has a name")
            .get_name()
            .replace('-', "_");
        format!("{name}.py")
    }
}

fn default_scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench/elastic")
}

pub fn run_elastic(args: &ElasticArgs) -> anyhow::Result<()> {
    let dir = args.scripts_dir.clone().unwrap_or_else(default_scripts_dir);
    let script = dir.join(args.experiment.script_name());
    if !script.is_file() {
        bail!("no driver at {} (give --scripts-dir)", script.display());
    }
    let status = Command::new(&args.python)
        .arg(&script)
        .args(&args.driver_args)
        .status()
        .with_context(|| format!("running {} {}", args.python, script.display()))?;
    if !status.success() {
        bail!("{} exited with {status}", script.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_has_its_driver() {
        for experiment in ElasticExperiment::value_variants() {
            let script = default_scripts_dir().join(experiment.script_name());
            assert!(script.is_file(), "{experiment:?}: {}", script.display());
        }
    }
}
