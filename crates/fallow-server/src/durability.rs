//! What fallow keeps in its data directory (`--dir`, as Redis's `dir`): a lock file (one server per
//! directory), the tenants and users as defined (so persistent tenants and their credentials outlive a
//! restart), and tier 2 (the log file, its recovery at start and its durability waits).
//!
//! Files: `fallow.lock` (flock held for the process's life), `tenants.conf` (one declaration
//! `name:weight:kind:shared:tier2` per line, in id order, so ids and the keyspace addresses in tier 2's records
//! stay the same), `users.acl` (ACL LIST lines; the default user comes from the configuration),
//! `functions.rdb` (the Redis 7 function libraries as a FUNCTION DUMP payload, with its checksum), and the
//! tier-2 file (`tier2.dat` unless `--tier2-path` puts it elsewhere). Files are replaced atomically
//! (written beside, fsynced, renamed).
use crate::config::Config;
use fallow_store::admission::{Admission, AdmissionRule};
use fallow_store::tier2::{FsyncPolicy, Tier2, Tier2Config};
use fallow_store::{RecoveryReport, Store, TenantSpec};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const LOCK_FILE: &str = "fallow.lock";
pub const TENANTS_FILE: &str = "tenants.conf";
pub const USERS_FILE: &str = "users.acl";
/// The function libraries, as a FUNCTION DUMP payload.
pub const FUNCTIONS_FILE: &str = "functions.rdb";
pub const TIER2_FILE: &str = "tier2.dat";
/// Written by a clean shutdown: the clean (ephemeral) records live then, so a warm restart keeps them.
pub const CLEAN_MANIFEST_FILE: &str = "tier2.clean";
const CLEAN_MANIFEST_MAGIC: &[u8; 8] = b"FALLOWCM";
/// How tier-2 reads wait for the device now: `io-uring`, `threads`, or `threads` with why io_uring
/// stopped.
fn tier2_read_path(tier2: &Tier2) -> String {
    match (tier2.async_reads_fd(), tier2.async_reads_failure()) {
        (Some(_), None) => "io-uring".into(),
        (Some(_), Some(error)) => format!("threads (io_uring failed: {error})"),
        (None, _) => "threads".into(),
    }
}

/// Share of the free disk space that the default tier-2 size may take.
const TIER2_DISK_SHARE_PERCENT: u64 = 50;
/// Regions `tier2-size auto` gives tier 2 at least (a small maxmemory still gets a workable log).
const AUTO_REGIONS_MIN: u64 = 16;

/// The locked data directory and what lives in it.
pub struct Durability {
    pub dir: PathBuf,
    /// Holds the flock; closing it (at exit, whatever the cause) releases the directory.
    _lock: File,
    pub tier2: Option<Arc<Tier2>>,
    /// Tier 2's admission rule and its frequency sketch.
    pub admission: Option<Arc<Admission>>,
    pub recovery: Option<RecoveryReport>,
    /// Newest durable lsn (u64::MAX once the device failed); writers under `tier2-fsync always` wait on it.
    durable: tokio::sync::watch::Sender<u64>,
}

impl Durability {
    /// Creates and locks the directory. Err when another process holds it.
    pub fn lock(dir: &Path) -> Result<(PathBuf, File), String> {
        std::fs::create_dir_all(dir)
            .map_err(|error| format!("cannot create --dir {}: {error}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .map_err(|error| format!("--dir {}: {error}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(format!(
                "--dir {} is in use by another fallow (pid {}); give each server its own --dir",
                dir.display(),
                holder.trim()
            ));
        }
        file.set_len(0).ok();
        let _ = writeln!(file, "{}", std::process::id());
        Ok((dir, file))
    }

    /// Opens tier 2 (unless its size is 0), replays it into `store` and attaches it. Listeners open
    /// only after this returns.
    pub fn open(
        config: &Config,
        dir: PathBuf,
        lock: File,
        store: &Store,
    ) -> Result<Durability, String> {
        let (durable, _) = tokio::sync::watch::channel(0);
        let mut durability = Durability {
            dir,
            _lock: lock,
            tier2: None,
            admission: None,
            recovery: None,
            durable,
        };
        let Some(tier2_config) = durability.tier2_config(config)? else {
            tracing::info!("tier 2 is off (tier2-size 0)");
            return Ok(durability);
        };
        let path = tier2_config.path.clone();
        let opened = Tier2::open(tier2_config)?;
        let started = std::time::Instant::now();
        let total = opened.regions.len();
        // The manifest is good for this one start: gone before anything new is written.
        let clean_slots = take_clean_manifest(&durability.dir);
        let report = store
            .recover_tier2(
                &opened.tier2,
                &opened.regions,
                clean_slots.as_ref(),
                |done, total| {
                    if done % 64 == 0 || done == total {
                        tracing::info!(done, total, "recovering tier 2");
                    }
                },
            )
            .map_err(|error| format!("cannot recover {}: {error}", path.display()))?;
        tracing::info!(
            path = %path.display(),
            regions = total,
            records = report.records,
            keys = report.keys,
            warm = clean_slots.is_some(),
            clean_skipped = report.clean_skipped,
            corrupt_records = report.corrupt_records,
            ms = started.elapsed().as_millis() as u64,
            direct_io = opened.tier2.is_direct(),
            "tier 2 ready"
        );
        if report.corrupt_records > 0 {
            tracing::warn!(
                corrupt_records = report.corrupt_records,
                "tier 2 held corrupt or torn records: they were skipped"
            );
        }
        opened.tier2.start(report.next_lsn);
        let sender = durability.durable.clone();
        opened.tier2.on_durable(Box::new(move |lsn| {
            sender.send_replace(lsn);
        }));
        let admission = Arc::new(admission(config, &opened.tier2));
        store.attach_tier2(fallow_store::shard::TierLink {
            tier2: opened.tier2.clone(),
            admission: admission.clone(),
        });
        durability.admission = Some(admission);
        durability.tier2 = Some(opened.tier2);
        durability.recovery = Some(report);
        Ok(durability)
    }

    /// The tier-2 settings: `tier2-size` auto is 2× the RAM pool's maximum (maxmemory in fixed mode,
    /// elastic-max or host RAM in elastic mode), capped by half the free disk space; None when off.
    fn tier2_config(&self, config: &Config) -> Result<Option<Tier2Config>, String> {
        let path = match config.tier2_path.as_str() {
            "" => self.dir.join(TIER2_FILE),
            path => PathBuf::from(path),
        };
        let fsync = FsyncPolicy::from_name(&config.tier2_fsync).ok_or_else(|| {
            format!(
                "tier2-fsync must be always, everysec or no, not '{}'",
                config.tier2_fsync
            )
        })?;
        let size_bytes = match config.tier2_size.as_str() {
            "auto" => {
                let bytes = default_tier2_bytes(config, path.parent().unwrap_or(&self.dir));
                // A small pool still gets a workable log; a disk without room for one gets none.
                let floor = AUTO_REGIONS_MIN * config.tier2_region_size_bytes + 4096;
                match bytes.max(floor) {
                    bytes if bytes <= free_disk_bytes(&self.dir).unwrap_or(0) / 2 => bytes,
                    _ => {
                        tracing::warn!("too little free disk for tier 2: it is off");
                        0
                    }
                }
            }
            text => {
                crate::units::parse_bytes(text).map_err(|error| format!("tier2-size: {error}"))?
            }
        };
        if size_bytes == 0 {
            return Ok(None);
        }
        Ok(Some(Tier2Config {
            path,
            size_bytes,
            region_bytes: config.tier2_region_size_bytes as usize,
            fsync,
        }))
    }

    /// Before replies to persistent writes that reached `lsn` leave: under `tier2-fsync always`, waits
    /// until it is durable (Err when the device failed first); otherwise at once.
    pub async fn before_reply(&self, lsn: u64) -> Result<(), String> {
        if lsn == 0 || !self.waits_for_sync() {
            return Ok(());
        }
        self.wait_durable(lsn).await
    }

    /// Waits until `lsn` is durable; Err when the device failed first.
    pub async fn wait_durable(&self, lsn: u64) -> Result<(), String> {
        let mut receiver = self.durable.subscribe();
        let result = receiver.wait_for(|&durable| durable >= lsn).await;
        match result.as_deref() {
            Ok(&u64::MAX) | Err(_) => Err(self
                .tier2
                .as_ref()
                .and_then(|tier2| tier2.failure())
                .unwrap_or_else(|| "tier 2 stopped".into())),
            Ok(_) => Ok(()),
        }
    }

    /// True under `tier2-fsync always`: replies to persistent writes wait for their records' fdatasync.
    pub fn waits_for_sync(&self) -> bool {
        self.tier2
            .as_ref()
            .is_some_and(|tier2| tier2.config.fsync == FsyncPolicy::Always)
    }

    /// Tier 2's durable lsn.
    pub fn durable_lsn(&self) -> u64 {
        *self.durable.borrow()
    }

    /// Cleans tier 2 when its free regions run low, or when its oldest region is mostly dead while the
    /// admission rule refuses values (the housekeeping task calls this every tick).
    pub fn maintain(&self, store: &Store) {
        let Some(tier2) = &self.tier2 else {
            return;
        };
        let (_, total) = tier2.regions_free_total();
        let keep_free = fallow_store::admission::regions_kept_free(total);
        if let Err(error) = store.tier2_maintain(keep_free, 8) {
            tracing::warn!(%error, "tier-2 cleaning failed");
        }
        if let Err(error) = store.tier2_probe_dead(fallow_store::now_ms()) {
            tracing::warn!(%error, "tier-2 dead-record probe failed");
        }
    }

    /// Clean shutdown (connections are closed): writes and syncs tier 2, then the manifest of the clean
    /// records RAM still refers to, so the next start is warm.
    pub fn shutdown(&self, store: &Store) {
        let Some(tier2) = &self.tier2 else {
            return;
        };
        let slots = store.live_clean_slots();
        if let Err(error) = tier2.shutdown() {
            tracing::error!(%error, "tier 2 could not be synced at shutdown; the next start is cold");
            return;
        }
        let mut bytes = CLEAN_MANIFEST_MAGIC.to_vec();
        bytes.extend_from_slice(&(slots.len() as u64).to_le_bytes());
        for slot in &slots {
            bytes.extend_from_slice(&slot.to_le_bytes());
        }
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        self.replace_file(CLEAN_MANIFEST_FILE, &bytes);
        tracing::info!(
            clean_records = slots.len(),
            "tier 2 synced; clean records kept for a warm restart"
        );
    }

    /// INFO's `tier2` section: the tier's size and state, hits by tier, promotions and demotions,
    /// admissions refused, bytes written (with write amplification and the device writes per day at the
    /// rate since start) and read, the read latency histogram, recovery and corrupt records.
    pub fn info_fields(&self, keyspace_hits: u64, uptime_s: u64) -> Vec<(&'static str, String)> {
        let Some(tier2) = &self.tier2 else {
            return vec![("tier2_enabled", "0".into())];
        };
        let load = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        let stats = &tier2.stats;
        let shards = &stats.shards;
        let (free, total) = tier2.regions_free_total();
        let record_bytes = load(&stats.record_bytes_written);
        let device_bytes = load(&stats.device_bytes_written);
        let new_bytes = record_bytes
            .saturating_sub(load(&stats.cleaned_bytes))
            .max(1);
        let per_day = device_bytes as f64 * 86_400.0 / uptime_s.max(1) as f64;
        let histogram: Vec<String> = stats
            .read_latency_us
            .iter()
            .enumerate()
            .map(|(bucket, count)| format!("le_{}={}", 1u64 << bucket, load(count)))
            .collect();
        let recovery = self.recovery.unwrap_or_default();
        let mut fields = vec![
            ("tier2_enabled", "1".to_string()),
            ("tier2_path", tier2.config.path.display().to_string()),
            ("tier2_direct_io", (tier2.is_direct() as u8).to_string()),
            ("tier2_fsync", tier2.config.fsync.name().into()),
            ("tier2_read_path", tier2_read_path(tier2)),
            (
                "tier2_status",
                tier2
                    .failure()
                    .map_or("ok".into(), |error| format!("failed: {error}")),
            ),
            ("tier2_size_bytes", tier2.config.size_bytes.to_string()),
            ("tier2_file_bytes", tier2.file_bytes().to_string()),
            ("tier2_used_bytes", tier2.used_bytes().to_string()),
            ("tier2_region_bytes", tier2.config.region_bytes.to_string()),
            ("tier2_regions", total.to_string()),
            ("tier2_regions_free", free.to_string()),
            (
                "tier2_durable_lsn",
                self.durable_lsn().min(tier2.durable_lsn()).to_string(),
            ),
            (
                "ram_hits",
                keyspace_hits
                    .saturating_sub(load(&shards.tier2_hits))
                    .to_string(),
            ),
            ("tier2_hits", load(&shards.tier2_hits).to_string()),
            (
                "tier2_served_without_promotion",
                load(&shards.served_from_tier2).to_string(),
            ),
            (
                "tier2_promotions_declined",
                load(&shards.promotions_declined).to_string(),
            ),
            ("tier2_async_reads", load(&shards.async_reads).to_string()),
            ("tier2_sync_reads", load(&shards.sync_reads).to_string()),
            ("tier2_promotions", load(&shards.promoted_keys).to_string()),
            ("tier2_demotions", load(&shards.demoted_keys).to_string()),
            (
                "tier2_demoted_bytes",
                load(&shards.demoted_bytes).to_string(),
            ),
            (
                "tier2_demotion_writes",
                load(&shards.demotion_writes).to_string(),
            ),
            (
                "tier2_clean_ahead_bytes",
                load(&shards.clean_ahead_bytes).to_string(),
            ),
            (
                "tier2_admissions_refused",
                load(&shards.admissions_refused).to_string(),
            ),
            (
                "tier2_admission",
                self.admission
                    .as_ref()
                    .map_or("", |admission| admission.rule.name())
                    .into(),
            ),
            (
                "tier2_admission_sketch_bytes",
                self.admission
                    .as_ref()
                    .map_or(0, |admission| admission.sketch.bytes())
                    .to_string(),
            ),
            (
                "tier2_cleaned_dead_permille",
                load(&stats.cleaned_dead_permille).to_string(),
            ),
            ("tier2_dead_probes", load(&stats.dead_probes).to_string()),
            (
                "tier2_doorkeeper",
                self.admission
                    .as_ref()
                    .map_or("", |admission| match admission.doorkeeper.is_on() {
                        true => "on",
                        false => "off",
                    })
                    .into(),
            ),
            (
                "tier2_doorkeeper_switched_off",
                self.admission
                    .as_ref()
                    .map_or(0, |admission| load(&admission.doorkeeper.switched_off))
                    .to_string(),
            ),
            (
                "tier2_doorkeeper_passed_while_off",
                self.admission
                    .as_ref()
                    .map_or(0, |admission| load(&admission.doorkeeper.passed_while_off))
                    .to_string(),
            ),
            (
                "tier2_persistent_records",
                load(&shards.persistent_records).to_string(),
            ),
            ("tier2_log_errors", load(&shards.log_errors).to_string()),
            (
                "tier2_records_written",
                load(&stats.records_written).to_string(),
            ),
            ("tier2_record_bytes_written", record_bytes.to_string()),
            ("tier2_device_bytes_written", device_bytes.to_string()),
            (
                "tier2_device_writes",
                load(&stats.device_writes).to_string(),
            ),
            (
                "tier2_write_amplification",
                format!("{:.2}", device_bytes as f64 / new_bytes as f64),
            ),
            ("tier2_device_bytes_per_day", format!("{per_day:.0}")),
            (
                "tier2_drive_writes_per_day",
                format!("{:.4}", per_day / tier2.config.size_bytes as f64),
            ),
            ("tier2_syncs", load(&stats.syncs).to_string()),
            ("tier2_reads", load(&stats.reads).to_string()),
            ("tier2_read_bytes", load(&stats.read_bytes).to_string()),
            ("tier2_read_errors", load(&stats.read_errors).to_string()),
            ("tier2_write_errors", load(&stats.write_errors).to_string()),
            (
                "tier2_corrupt_records",
                load(&stats.corrupt_records).to_string(),
            ),
            ("tier2_lost_keys", load(&shards.lost_keys).to_string()),
            (
                "tier2_regions_cleaned",
                load(&stats.regions_cleaned).to_string(),
            ),
            (
                "tier2_cleaned_records",
                load(&stats.cleaned_records).to_string(),
            ),
            (
                "tier2_cleaned_bytes",
                load(&stats.cleaned_bytes).to_string(),
            ),
            (
                "tier2_clean_discarded",
                load(&stats.clean_discarded).to_string(),
            ),
            ("tier2_read_latency_usec", histogram.join(",")),
        ];
        fields.extend([
            (
                "tier2_recovery_ms",
                recovery.duration.as_millis().to_string(),
            ),
            ("tier2_recovery_records", recovery.records.to_string()),
            ("tier2_recovery_keys", recovery.keys.to_string()),
            (
                "tier2_recovery_corrupt_records",
                recovery.corrupt_records.to_string(),
            ),
            ("tier2_recovery_bytes_read", recovery.bytes_read.to_string()),
        ]);
        fields
    }

    pub fn save_tenants(&self, specs: &[TenantSpec]) {
        let text: String = specs
            .iter()
            .skip(1) // the default tenant is built in
            .map(|spec| {
                format!(
                    "{}:{}:{}:{}:{}\n",
                    spec.name,
                    spec.weight,
                    spec.kind.name(),
                    crate::units::yes_no(spec.shared),
                    crate::units::yes_no(spec.tier2)
                )
            })
            .collect();
        self.replace_file(TENANTS_FILE, text.as_bytes());
    }

    pub fn save_users(&self, acl: &crate::acl::Acl) {
        let text: String = acl
            .users
            .values()
            .filter(|user| user.name != "default")
            .map(|user| user.describe() + "\n")
            .collect();
        self.replace_file(USERS_FILE, text.as_bytes());
    }

    /// Saves the function libraries (a FUNCTION DUMP payload).
    pub fn save_functions(&self, payload: &[u8]) {
        self.replace_file(FUNCTIONS_FILE, payload);
    }

    /// The saved function libraries' payload, if any.
    pub fn saved_functions(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(FUNCTIONS_FILE)).ok()
    }

    /// Renames the saved libraries aside (they do not load), so the next save does not overwrite them.
    pub fn set_functions_aside(&self) -> PathBuf {
        let aside = self.dir.join(format!("{FUNCTIONS_FILE}.damaged"));
        if let Err(error) = std::fs::rename(self.dir.join(FUNCTIONS_FILE), &aside) {
            tracing::error!(%error, "cannot set the saved function libraries aside");
        }
        aside
    }

    fn replace_file(&self, name: &str, bytes: &[u8]) {
        if let Err(error) = crate::atomic_file::replace(&self.dir.join(name), bytes) {
            tracing::error!(file = name, %error, "cannot save to --dir");
        }
    }
}

/// Reads and removes the clean-record manifest; None when there is none or it is damaged (a cold start).
fn take_clean_manifest(dir: &Path) -> Option<std::collections::HashSet<u64>> {
    let path = dir.join(CLEAN_MANIFEST_FILE);
    let bytes = std::fs::read(&path).ok()?;
    if let Err(error) = std::fs::remove_file(&path).and_then(|()| File::open(dir)?.sync_all()) {
        tracing::warn!(%error, "cannot remove the clean-record manifest: starting cold");
        return None;
    }
    let body_bytes = bytes.len().checked_sub(4)?;
    let (body, crc) = bytes.split_at(body_bytes);
    let count = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?) as usize;
    let valid = body.starts_with(CLEAN_MANIFEST_MAGIC)
        && crc32fast::hash(body).to_le_bytes() == crc
        && body.len() == 16 + count.checked_mul(8)?;
    if !valid {
        tracing::warn!("the clean-record manifest is damaged: starting cold");
        return None;
    }
    Some(
        body[16..]
            .chunks_exact(8)
            .map(|slot| u64::from_le_bytes(slot.try_into().expect("8 bytes")))
            .collect(),
    )
}

/// The tenant declarations saved in `dir`, in id order.
pub fn saved_tenants(dir: &Path) -> Vec<String> {
    saved_lines(&dir.join(TENANTS_FILE))
}

/// The users saved in `dir`, as ACL LIST lines.
pub fn saved_users(dir: &Path) -> Vec<String> {
    saved_lines(&dir.join(USERS_FILE))
}

fn saved_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Bytes per key the admission sketch is sized for: RAM pool and tier 2 together hold about
/// (pool + tier 2) / this many keys (smaller values share counters; the sketch still ranks them).
const SKETCH_SIZING_BYTES_PER_KEY: u64 = 4096;

/// The admission rule and its state for tier 2 as configured (the rule was checked at start).
fn admission(config: &Config, tier2: &Tier2) -> Admission {
    let rule =
        AdmissionRule::from_name(&config.tier2_admission).unwrap_or(AdmissionRule::Frequency);
    let expected_keys =
        (pool_max_bytes(config) + tier2.config.size_bytes) / SKETCH_SIZING_BYTES_PER_KEY;
    Admission::new(
        rule,
        config.tier2_admit_hits,
        expected_keys,
        tier2.config.regions(),
        tier2.config.size_bytes,
    )
}

/// The RAM pool's maximum: maxmemory in fixed mode, elastic-max or host RAM in elastic mode.
fn pool_max_bytes(config: &Config) -> u64 {
    match config.memory_mode {
        crate::elastic::settings::MemoryMode::Fixed if config.maxmemory_bytes > 0 => {
            config.maxmemory_bytes
        }
        crate::elastic::settings::MemoryMode::Elastic if config.elastic_max_bytes > 0 => {
            config.elastic_max_bytes
        }
        _ => crate::elastic::source::host_memory_bytes(),
    }
}

/// 2× the RAM pool's maximum, capped by a share of the free space where the file goes.
pub fn default_tier2_bytes(config: &Config, dir: &Path) -> u64 {
    let pool_max = pool_max_bytes(config);
    let free = free_disk_bytes(dir).unwrap_or(0);
    (2 * pool_max).min(free / 100 * TIER2_DISK_SHARE_PERCENT)
}

fn free_disk_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill.
    (unsafe { libc::statvfs(path.as_ptr(), &mut stats) } == 0)
        .then(|| stats.f_bavail as u64 * stats.f_frsize as u64)
}
