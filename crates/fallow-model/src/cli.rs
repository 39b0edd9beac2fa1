//! `fallow model ...`: the subcommands and their flags.

/// `fallow model`: the Krevat performance model and this machine's calibration.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {}

/// Runs a `fallow model` subcommand; `null_probe` measures a null server's rate during calibration.
pub fn run(_args: &ModelArgs, _null_probe: &crate::calibrate::NullProbe) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
