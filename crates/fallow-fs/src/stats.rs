//! The file cache's counters (memcached's habit: a counter for every event), their JSON form for
//! `fallow fs --stats`, the stats file that command reads, and the report fallow's INFO shows.
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// Event counters, updated with relaxed atomics from every thread.
        #[derive(Debug, Default)]
        pub struct Counters { $(#[doc = $doc] pub $name: AtomicU64,)* }

        /// One reading of the counters plus the derived figures.
        #[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
        pub struct Snapshot {
            $(#[doc = $doc] pub $name: u64,)*
            /// prefetch_used / (prefetch_used + prefetch_wasted); 1 when nothing was read ahead yet.
            pub prefetch_accuracy: f64,
            /// Mean read-ahead depth (blocks) over the sequential streams open now.
            pub prefetch_depth_mean: f64,
            pub streams_active: u64,
            pub fallow_connected: u64,
            pub io_queue_bytes: u64,
            /// 1 while the doorkeeper sees the pool full (blocks read for a reader need a second miss).
            pub admission_pool_full: u64,
        }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($name: self.$name.load(Relaxed),)* ..Snapshot::default() }
            }
        }

        impl Snapshot {
            /// (field, value) pairs in declaration order, derived figures last.
            pub fn fields(&self) -> Vec<(&'static str, String)> {
                let mut fields = vec![$((stringify!($name), self.$name.to_string()),)*];
                fields.push(("prefetch_accuracy", format!("{:.6}", self.prefetch_accuracy)));
                fields.push(("prefetch_depth_mean", format!("{:.3}", self.prefetch_depth_mean)));
                fields.push(("streams_active", self.streams_active.to_string()));
                fields.push(("fallow_connected", self.fallow_connected.to_string()));
                fields.push(("io_queue_bytes", self.io_queue_bytes.to_string()));
                fields.push(("admission_pool_full", self.admission_pool_full.to_string()));
                fields
            }
        }
    };
}

counters! {
    reads: "FUSE read requests served.",
    read_bytes: "Bytes returned by them.",
    cache_hits: "Blocks a read found in fallow (or in flight from the backing file).",
    cache_misses: "Blocks a read had to get from the backing file.",
    cache_hit_bytes: "Bytes of the blocks found in fallow.",
    memo_hits: "Reads served from the block the same handle read last (no request to fallow).",
    backing_reads: "Reads of backing files (misses, read-ahead, and reads while fallow is away).",
    backing_read_bytes: "Bytes read from backing files.",
    direct_reads: "Reads served straight from the backing file because fallow was away or refused.",
    prefetch_issued: "Blocks queued for read-ahead.",
    prefetch_skipped: "Read-ahead blocks not queued: the I/O queue was full or fallow away.",
    prefetch_used: "Read-ahead blocks later read from the cache.",
    prefetch_already_cached: "Read-ahead blocks fallow held already (a request, no backing read); feedback pauses a stream whose read-ahead keeps finding them, until it misses.",
    prefetch_wasted: "Read-ahead blocks never read: evicted first, or the stream jumped or closed.",
    prefetch_wasted_bytes: "Their bytes.",
    prefetch_depth_increases: "Feedback read-ahead depth doublings.",
    blocks_stored: "Blocks written to fallow.",
    blocks_stored_bytes: "Their bytes.",
    store_skipped_stale: "Blocks read but not stored: the file was written meanwhile.",
    store_refused: "Blocks fallow refused to store (OOM).",
    admission_skipped: "Blocks read for a reader but not stored: the pool was full and the block had not missed within the last pool's worth of misses (the doorkeeper).",
    admitted_seen_before: "Blocks read for a reader and stored although the pool was full: they had missed within the last pool's worth of misses.",
    writes: "FUSE write requests.",
    write_bytes: "Bytes written through to backing files.",
    invalidations: "Blocks deleted from fallow because a write or truncate changed them.",
    stale_detected: "Files found changed behind the mount (new epoch: their cached blocks dropped).",
    short_blocks_refetched: "Cached blocks shorter than the file says (a file grown behind the mount), read again.",
    fallow_errors: "Requests to fallow that failed (connection lost, refused, timed out).",
    fallow_reconnects: "Times the connection to fallow came back after failing.",
    opens: "Files opened.",
    meta_errors: "Metadata operations that returned an error to the caller.",
}

/// Where `fallow fs` writes its counters for the mount at `mountpoint` (read by `fallow fs --stats`).
pub fn stats_file(mountpoint: &Path) -> PathBuf {
    let canonical = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let dir = fallow_proto::socket_path::default_socket_path(6379)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("fallow-fs-{hash:016x}.json"))
}

/// The stats file's contents.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct StatsFile {
    pub mountpoint: PathBuf,
    pub backing: PathBuf,
    pub pid: u32,
    pub unix_time_ms: u64,
    pub block_bytes: u32,
    pub prefetch: String,
    pub counters: Snapshot,
}

/// Replaces the stats file atomically (a reader never sees half of one). Creates its directory (this
/// user's default socket directory, private as the server makes it) when no server made it yet.
pub fn write_stats_file(path: &Path, stats: &StatsFile) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.exists()) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let temporary = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&temporary, serde_json::to_vec_pretty(stats)?)?;
    std::fs::rename(&temporary, path)
}

/// `fallow fs --stats MOUNTPOINT`: the stats file of the live process serving it.
pub fn print_stats(mountpoint: &Path) -> anyhow::Result<()> {
    let path = stats_file(mountpoint);
    let text = std::fs::read_to_string(&path).map_err(|error| {
        anyhow::anyhow!(
            "no fallow fs serves {} ({}: {error})",
            mountpoint.display(),
            path.display()
        )
    })?;
    let stats: StatsFile = serde_json::from_str(&text)
        .map_err(|error| anyhow::anyhow!("{}: unreadable stats ({error})", path.display()))?;
    if !Path::new(&format!("/proc/{}", stats.pid)).exists() {
        anyhow::bail!(
            "no fallow fs serves {} (the last one, pid {}, is gone)",
            mountpoint.display(),
            stats.pid
        );
    }
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_list_every_counter_once_with_the_derived_figures() {
        let counters = Counters::default();
        counters.cache_hits.fetch_add(3, Relaxed);
        let fields = counters.snapshot().fields();
        assert!(fields.contains(&("cache_hits", "3".to_string())));
        let names: std::collections::HashSet<_> = fields.iter().map(|(name, _)| *name).collect();
        assert_eq!(names.len(), fields.len());
        assert!(names.contains("prefetch_accuracy") && names.contains("io_queue_bytes"));
        assert!(fields.iter().all(|(name, _)| name.len() <= 48
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')));
    }

    #[test]
    fn stats_files_differ_per_mountpoint_and_round_trip() {
        assert_ne!(stats_file(Path::new("/a")), stats_file(Path::new("/b")));
        let dir = std::env::temp_dir().join(format!("fallow-fs-stats-{}", std::process::id()));
        // The directory is made when missing (no server made its socket directory yet), private.
        let path = dir.join("socket-dir").join("s.json");
        let stats = StatsFile {
            mountpoint: "/m".into(),
            backing: "/b".into(),
            pid: std::process::id(),
            unix_time_ms: 1,
            block_bytes: 4096,
            prefetch: "off".into(),
            counters: Snapshot {
                reads: 5,
                ..Snapshot::default()
            },
        };
        write_stats_file(&path, &stats).unwrap();
        let back: StatsFile =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back.counters, stats.counters);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the directory is private: {mode:o}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
