//! `fallow fs`'s command line: where to mount, what to pass through, how to reach fallow and how to cache.
use std::path::PathBuf;

/// Mount a passthrough filesystem over a backing directory; file blocks are cached in fallow's pool.
#[derive(clap::Args, Debug, Clone)]
pub struct FsArgs {
    /// Where to mount (an empty directory). With --stats: the mount whose counters to print.
    pub mountpoint: PathBuf,
    /// The directory whose files the mount shows (required unless --stats or --null-bytes).
    #[arg(long)]
    pub backing: Option<PathBuf>,
    /// The fallow server: `unix:PATH`, `unix:` (the local server's socket, as `fallow socket-path` prints it)
    /// or `tcp://HOST:PORT`.
    #[arg(long, default_value = "unix:")]
    pub server: String,
    /// A file holding the password for AUTH (first line; the file should be readable only by its owner).
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// The ACL user to AUTH as with --password-file.
    #[arg(long, default_value = "default")]
    pub user: String,
    /// The tenant (and ACL user of the same name) the blocks are stored under.
    #[arg(long, default_value = "fs")]
    pub tenant: String,
    /// The tenant's weight (1..1000000): its share of the pool against other tenants.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub weight: u32,
    /// Let the tenant's blocks go to tier 2 when they leave RAM (off: they are evicted; caching a disk's
    /// blocks on the same disk rarely pays, see docs/fs.md).
    #[arg(long)]
    pub tier2: bool,
    /// Cache block size in bytes (4096..16 MiB, a multiple of 4096).
    #[arg(long, alias = "fs-block-bytes", env = "FALLOW_FS_BLOCK_BYTES", default_value_t = 128 << 10)]
    pub block_bytes: u32,
    /// Read-ahead: `feedback` (depth follows use and the pool's room), `fixed:N` (N blocks ahead) or `off`.
    #[arg(long, env = "FALLOW_FS_PREFETCH", default_value = "feedback")]
    pub prefetch: String,
    /// Feedback read-ahead's largest depth per stream, in blocks.
    #[arg(long, default_value_t = 64)]
    pub prefetch_depth_max: u32,
    /// How often an open file is checked against its backing file (mtime, size, ctime), in milliseconds;
    /// also the kernel's attribute timeout. Opens always check (close-to-open consistency).
    #[arg(
        long,
        alias = "fs-revalidate-ms",
        env = "FALLOW_FS_REVALIDATE_MS",
        default_value_t = 1000
    )]
    pub revalidate_ms: u64,
    /// Store every block read for a reader, also when the pool is full. By default a full pool stores such a
    /// block only at its second miss within the last pool's worth of misses (TinyLFU's doorkeeper: blocks
    /// read once do not evict blocks read again; read-ahead blocks are always stored).
    #[arg(long)]
    pub no_admission: bool,
    /// Plain passthrough: fallow is not used (a baseline for benchmarks).
    #[arg(long)]
    pub no_cache: bool,
    /// Open files with direct_io: the kernel page cache is bypassed and every read reaches this process.
    #[arg(long)]
    pub direct_io: bool,
    /// Let other users use the mount (needs root or user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    pub allow_other: bool,
    /// Threads reading the backing files for misses and read-ahead.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub io_threads: u32,
    /// Most bytes of backing reads queued at once; read-ahead beyond it is skipped (counted).
    #[arg(long, default_value_t = 64 << 20)]
    pub io_queue_bytes: u64,
    /// Threads serving FUSE requests.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// Print the counters of the `fallow fs` serving MOUNTPOINT as JSON and exit.
    #[arg(long)]
    pub stats: bool,
    /// Mount a null filesystem instead: one file `null` of this many bytes whose reads return zeros from
    /// memory (the FUSE round-trip ceiling for benchmarks).
    #[arg(long)]
    pub null_bytes: Option<u64>,
}

/// The read-ahead policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    Off,
    /// Always this many blocks ahead of a sequential stream.
    Fixed(u32),
    /// Depth per stream adapted to use, waste and the pool's room, up to a maximum.
    Feedback {
        depth_max: u32,
    },
}

pub const BLOCK_BYTES_MIN: u32 = 4096;
pub const BLOCK_BYTES_MAX: u32 = 16 << 20;
pub const PREFETCH_DEPTH_MAX: u32 = 4096;

impl FsArgs {
    pub fn prefetch_policy(&self) -> Result<Prefetch, String> {
        let depth_max = self.prefetch_depth_max;
        if depth_max == 0 || depth_max > PREFETCH_DEPTH_MAX {
            return Err(format!(
                "--prefetch-depth-max must be 1..{PREFETCH_DEPTH_MAX}, got {depth_max}"
            ));
        }
        match self.prefetch.as_str() {
            "off" => Ok(Prefetch::Off),
            "feedback" => Ok(Prefetch::Feedback { depth_max }),
            other => match other.strip_prefix("fixed:").map(str::parse::<u32>) {
                Some(Ok(depth)) if (1..=PREFETCH_DEPTH_MAX).contains(&depth) => Ok(Prefetch::Fixed(depth)),
                _ => Err(format!(
                    "--prefetch must be feedback, off or fixed:N with N 1..{PREFETCH_DEPTH_MAX}, got '{other}'"
                )),
            },
        }
    }

    /// Checks what clap cannot: the block size, the read-ahead policy, the backing directory.
    pub fn validate(&self) -> Result<Prefetch, String> {
        let bytes = self.block_bytes;
        if !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&bytes) || !bytes.is_multiple_of(4096) {
            return Err(format!(
                "--block-bytes must be a multiple of 4096 in {BLOCK_BYTES_MIN}..{BLOCK_BYTES_MAX}, got {bytes}"
            ));
        }
        if self.revalidate_ms == 0 {
            return Err("--revalidate-ms must be at least 1".into());
        }
        if self.io_queue_bytes < u64::from(bytes) {
            return Err(format!(
                "--io-queue-bytes must hold one block ({bytes}), got {}",
                self.io_queue_bytes
            ));
        }
        if self.null_bytes.is_none() && !self.stats {
            match &self.backing {
                None => return Err("--backing DIR is required".into()),
                Some(dir) if !dir.is_dir() => {
                    return Err(format!("--backing {}: not a directory", dir.display()))
                }
                Some(_) => {}
            }
        }
        self.prefetch_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        fs: FsArgs,
    }

    fn parse(args: &[&str]) -> FsArgs {
        Cli::parse_from(std::iter::once("fs").chain(args.iter().copied())).fs
    }

    #[test]
    fn prefetch_policies_parse_and_bad_ones_are_refused() {
        let args = |p: &str| parse(&["/m", "--backing", "/", "--prefetch", p]);
        assert_eq!(args("off").validate(), Ok(Prefetch::Off));
        assert_eq!(args("fixed:8").validate(), Ok(Prefetch::Fixed(8)));
        assert_eq!(
            args("feedback").validate(),
            Ok(Prefetch::Feedback { depth_max: 64 })
        );
        for bad in ["fixed:0", "fixed:x", "fixed:99999", "sometimes"] {
            assert!(
                args(bad).validate().unwrap_err().contains("--prefetch"),
                "{bad}"
            );
        }
    }

    #[test]
    fn block_size_and_backing_are_checked() {
        let bad = parse(&["/m", "--backing", "/", "--block-bytes", "5000"]);
        assert!(bad.validate().unwrap_err().contains("--block-bytes"));
        let missing = parse(&["/m"]);
        assert!(missing.validate().unwrap_err().contains("--backing"));
        let stats = parse(&["/m", "--stats"]);
        assert!(stats.validate().is_ok());
    }
}
