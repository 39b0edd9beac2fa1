//! Bulk load (`fallow load FILE`) and sorted export (`fallow dump --sorted FILE`) of record files.

/// `fallow load`: stream a record file into a running fallow.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {}

/// `fallow dump`: export every string key and its value.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {}

pub fn run_load(_args: &LoadArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}

pub fn run_dump(_args: &DumpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}

/// `fallow-bench gensort`: write sort-benchmark records (100 bytes: 10-byte key, 90-byte value).
#[derive(clap::Args, Debug)]
pub struct GensortArgs {}

pub fn run_gensort(_args: &GensortArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
