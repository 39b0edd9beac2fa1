//! Host-memory sources: what the controller learns about the machine on each step. `HostMemory` is one
//! sample; `ProcSource` reads /proc/meminfo, the per-CPU page lists in /proc/zoneinfo, memory PSI and,
//! inside a limited cgroup v2, the cgroup's memory.max/high/current/stat/events.
//!
//! Why zoneinfo: pages freed by munmap first go to per-CPU free lists, which MemFree and MemAvailable do not
//! count; since Linux 6.7 those lists grow on their own to hundreds of MiB per CPU (on the 2-CPU development
//! VM: 860 MiB on one CPU) and drain over minutes. Without them a release would not show as available
//! memory, and the controller would read its own release as new pressure and shrink again and again. Every
//! such page is free for any allocation (the kernel drains the lists before reclaiming), so available =
//! MemAvailable + the per-CPU list pages: that sum moves by exactly what a process allocates or frees. Both roots are fields so tests point them at fake files (the
//! development machine has only cgroup v1, so cgroup v2 is exercised with fake files only).
use fallow_model::calibrate::machine::kib_field_bytes;
use std::path::{Path, PathBuf};

/// One look at the host's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostMemory {
    /// Host RAM, or the cgroup's limit when that is lower.
    pub total_bytes: u64,
    /// Memory the pool could still take: MemAvailable, or the cgroup's headroom when that is lower.
    pub available_bytes: u64,
    pub psi_some_avg10: f64,
    pub psi_full_avg10: f64,
    /// Present when fallow runs in a cgroup v2 with a memory limit.
    pub cgroup: Option<CgroupMemory>,
}

/// The figures of the cgroup v2 whose memory limit binds (the one with the least headroom).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CgroupMemory {
    /// memory.max; None when "max".
    pub max_bytes: Option<u64>,
    /// memory.high; None when "max".
    pub high_bytes: Option<u64>,
    pub current_bytes: u64,
    /// inactive_file from memory.stat: page cache the kernel drops before it touches anyone's memory.
    pub inactive_file_bytes: u64,
    pub events_high: u64,
    pub events_max: u64,
    pub events_oom: u64,
}

impl CgroupMemory {
    /// The lower of memory.max and memory.high; None when neither is set.
    pub fn limit_bytes(&self) -> Option<u64> {
        match (self.max_bytes, self.high_bytes) {
            (Some(max), Some(high)) => Some(max.min(high)),
            (limit, None) | (None, limit) => limit,
        }
    }

    /// Bytes the cgroup may still grow by before it hits its limit (reclaimable page cache counts as free).
    pub fn headroom_bytes(&self) -> Option<u64> {
        let used = self.current_bytes.saturating_sub(self.inactive_file_bytes);
        self.limit_bytes().map(|limit| limit.saturating_sub(used))
    }
}

/// Where the controller's view of the host comes from.
pub trait HostSource: Send {
    /// Samples the host. `pool_resident_bytes` is what fallow's pool holds now (a replayed trace needs it
    /// to report what MemAvailable would read; the real host already shows it).
    fn sample(&mut self, pool_resident_bytes: u64) -> std::io::Result<HostMemory>;
    /// `proc`, `cgroup2` or `trace` (INFO elastic `host_source`).
    fn kind(&self) -> &'static str;
    /// The PSI file to arm a pressure trigger on; None when the source is not the real host.
    fn pressure_file(&self) -> Option<PathBuf>;
}

/// Reads the real host: /proc and, when it applies, cgroup v2.
pub struct ProcSource {
    proc_root: PathBuf,
    /// The cgroup directories with memory files, leaf first, up to the cgroup2 mount.
    cgroup_dirs: Vec<PathBuf>,
}

impl ProcSource {
    /// The real host: /proc and /sys/fs/cgroup.
    pub fn new() -> ProcSource {
        ProcSource::with_roots(Path::new("/proc"), Path::new("/sys/fs/cgroup"))
    }

    /// A source reading `proc_root` (instead of /proc) and a cgroup2 hierarchy at `cgroup_root`.
    pub fn with_roots(proc_root: &Path, cgroup_root: &Path) -> ProcSource {
        ProcSource {
            proc_root: proc_root.to_path_buf(),
            cgroup_dirs: cgroup_dirs(proc_root, cgroup_root),
        }
    }

    /// The limiting cgroup now, if any of fallow's cgroups (or their ancestors) has a memory limit.
    fn binding_cgroup(&self) -> Option<(PathBuf, CgroupMemory)> {
        self.cgroup_dirs
            .iter()
            .filter_map(|dir| read_cgroup(dir).map(|memory| (dir.clone(), memory)))
            .filter(|(_, memory)| memory.limit_bytes().is_some())
            .min_by_key(|(_, memory)| memory.headroom_bytes())
    }
}

impl Default for ProcSource {
    fn default() -> Self {
        ProcSource::new()
    }
}

impl HostSource for ProcSource {
    fn sample(&mut self, _pool_resident_bytes: u64) -> std::io::Result<HostMemory> {
        let meminfo = std::fs::read_to_string(self.proc_root.join("meminfo"))?;
        let (mut total_bytes, mem_available_bytes) = parse_meminfo(&meminfo).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "meminfo lacks MemTotal/MemAvailable",
            )
        })?;
        let percpu_free_bytes = std::fs::read_to_string(self.proc_root.join("zoneinfo"))
            .map_or(0, |zoneinfo| percpu_free_pages(&zoneinfo) * page_bytes());
        let mut available_bytes = mem_available_bytes
            .saturating_add(percpu_free_bytes)
            .min(total_bytes);
        let cgroup = self.binding_cgroup().map(|(_, memory)| memory);
        if let Some(memory) = &cgroup {
            total_bytes = total_bytes.min(memory.limit_bytes().unwrap_or(u64::MAX));
            available_bytes = available_bytes.min(memory.headroom_bytes().unwrap_or(u64::MAX));
        }
        let pressure = self
            .pressure_file()
            .and_then(|path| std::fs::read_to_string(path).ok());
        let (psi_some_avg10, psi_full_avg10) = pressure.as_deref().map_or((0.0, 0.0), parse_psi);
        Ok(HostMemory {
            total_bytes,
            available_bytes,
            psi_some_avg10,
            psi_full_avg10,
            cgroup,
        })
    }

    fn kind(&self) -> &'static str {
        if self.binding_cgroup().is_some() {
            "cgroup2"
        } else {
            "proc"
        }
    }

    /// The limiting cgroup's memory.pressure when there is one, else the host's /proc/pressure/memory.
    fn pressure_file(&self) -> Option<PathBuf> {
        let cgroup_file = self
            .binding_cgroup()
            .map(|(dir, _)| dir.join("memory.pressure"))
            .filter(|path| path.exists());
        Some(cgroup_file.unwrap_or_else(|| self.proc_root.join("pressure/memory")))
    }
}

/// fallow's cgroup v2 directory and its ancestors up to the mount, when /proc/self/cgroup names a v2
/// path (`0::/path`) and `cgroup_root` is a cgroup2 mount (it has cgroup.controllers).
fn cgroup_dirs(proc_root: &Path, cgroup_root: &Path) -> Vec<PathBuf> {
    let Ok(membership) = std::fs::read_to_string(proc_root.join("self/cgroup")) else {
        return Vec::new();
    };
    let Some(relative) = membership.lines().find_map(|line| line.strip_prefix("0::")) else {
        return Vec::new();
    };
    if !cgroup_root.join("cgroup.controllers").exists() {
        return Vec::new();
    }
    let leaf = cgroup_root.join(relative.trim().trim_start_matches('/'));
    leaf.ancestors()
        .take_while(|dir| dir.starts_with(cgroup_root))
        .map(Path::to_path_buf)
        .collect()
}

/// A cgroup's memory files; None where it has no memory.max (the root, or memory not enabled).
fn read_cgroup(dir: &Path) -> Option<CgroupMemory> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let max_bytes = parse_limit(&read("memory.max")?)?;
    let high_bytes = read("memory.high")
        .and_then(|text| parse_limit(&text))
        .flatten();
    let current_bytes = read("memory.current")?.trim().parse().ok()?;
    let stat = read("memory.stat").unwrap_or_default();
    let events = read("memory.events").unwrap_or_default();
    Some(CgroupMemory {
        max_bytes,
        high_bytes,
        current_bytes,
        inactive_file_bytes: keyed_value(&stat, "inactive_file").unwrap_or(0),
        events_high: keyed_value(&events, "high").unwrap_or(0),
        events_max: keyed_value(&events, "max").unwrap_or(0),
        events_oom: keyed_value(&events, "oom").unwrap_or(0),
    })
}

/// A memory.max / memory.high value: Some(None) for "max", Some(Some(bytes)) for a number.
fn parse_limit(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        number => number.parse().ok().map(Some),
    }
}

/// `key value` lines (memory.stat, memory.events).
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// The host's RAM (MemTotal), 0 when unknown.
pub fn host_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo(&text))
        .map_or(0, |(total, _)| total)
}

/// (MemTotal, MemAvailable) in bytes from /proc/meminfo.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    Some((
        kib_field_bytes(text, "MemTotal")?,
        kib_field_bytes(text, "MemAvailable")?,
    ))
}

/// Free pages held on per-CPU lists: the sum of the `count:` lines of /proc/zoneinfo's pagesets.
pub fn percpu_free_pages(zoneinfo: &str) -> u64 {
    zoneinfo
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("count:"))
        .filter_map(|count| count.trim().parse::<u64>().ok())
        .sum()
}

fn page_bytes() -> u64 {
    fallow_store::memory::segment::page_bytes() as u64
}

/// (some avg10, full avg10) from a PSI file; 0 for a missing line.
pub fn parse_psi(text: &str) -> (f64, f64) {
    let avg10 = |kind: &str| {
        text.lines()
            .find(|line| line.starts_with(kind))
            .and_then(|line| {
                line.split_whitespace()
                    .find_map(|word| word.strip_prefix("avg10="))
            })
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0)
    };
    (avg10("some "), avg10("full "))
}

/// This process's resident set (VmRSS) from `<proc_root>/self/status`; 0 where unreadable.
pub fn process_rss_bytes(proc_root: &Path) -> u64 {
    std::fs::read_to_string(proc_root.join("self/status"))
        .ok()
        .and_then(|status| kib_field_bytes(&status, "VmRSS"))
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A temporary directory removed on drop.
    pub struct TempDir(pub PathBuf);

    impl TempDir {
        pub fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "fallow-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub fn write(&self, relative: &str, text: &str) {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MEMINFO: &str =
        "MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8192000 kB\n";
    const PSI: &str = "some avg10=1.50 avg60=0.20 avg300=0.00 total=123\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=45\n";

    const ZONEINFO: &str = "Node 0, zone   Normal\n  pagesets\n    cpu: 0\n              count:    100\n              high:     200\n    cpu: 1\n              count:    156\n              high:     300\n";

    fn fake_proc(dir: &TempDir, cgroup_line: &str) {
        dir.write("proc/meminfo", MEMINFO);
        dir.write("proc/zoneinfo", ZONEINFO);
        dir.write("proc/pressure/memory", PSI);
        dir.write("proc/self/cgroup", cgroup_line);
        dir.write("proc/self/status", "Name: fallow\nVmRSS:\t  2048 kB\n");
    }

    fn fake_cgroup(dir: &TempDir, path: &str, max: &str, high: &str, current: u64) {
        let prefix = format!("cg/{path}");
        dir.write(&format!("{prefix}/memory.max"), &format!("{max}\n"));
        dir.write(&format!("{prefix}/memory.high"), &format!("{high}\n"));
        dir.write(&format!("{prefix}/memory.current"), &format!("{current}\n"));
        dir.write(
            &format!("{prefix}/memory.stat"),
            "anon 100\ninactive_file 1000000\n",
        );
        dir.write(
            &format!("{prefix}/memory.events"),
            "low 0\nhigh 7\nmax 3\noom 1\noom_kill 1\n",
        );
        dir.write(&format!("{prefix}/memory.pressure"), PSI);
    }

    #[test]
    fn meminfo_and_psi_parse() {
        assert_eq!(
            parse_meminfo(MEMINFO),
            Some((16_384_000 * 1024, 8_192_000 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_psi(PSI), (1.5, 0.25));
        assert_eq!(parse_psi(""), (0.0, 0.0));
        assert_eq!(percpu_free_pages(ZONEINFO), 256);
        assert_eq!(percpu_free_pages("Node 0, zone DMA\n"), 0);
    }

    #[test]
    fn proc_without_cgroup_v2() {
        let dir = TempDir::new("proc-v1");
        fake_proc(&dir, "12:memory:/user.slice\n");
        let mut source = ProcSource::with_roots(&dir.0.join("proc"), &dir.0.join("cg"));
        let sample = source.sample(0).unwrap();
        assert_eq!(source.kind(), "proc");
        assert_eq!(sample.total_bytes, 16_384_000 * 1024);
        assert_eq!(
            sample.available_bytes,
            8_192_000 * 1024 + 256 * page_bytes()
        );
        assert_eq!((sample.psi_some_avg10, sample.psi_full_avg10), (1.5, 0.25));
        assert!(sample.cgroup.is_none());
        assert_eq!(process_rss_bytes(&dir.0.join("proc")), 2048 * 1024);
    }

    #[test]
    fn cgroup_v2_limit_binds() {
        let dir = TempDir::new("proc-v2");
        fake_proc(&dir, "0::/fallow.slice/app\n");
        dir.write("cg/cgroup.controllers", "cpu memory\n");
        // The parent's memory.high (4 GB) binds more than the leaf's memory.max (6 GB).
        fake_cgroup(&dir, "fallow.slice/app", "6000000000", "max", 3_000_000_000);
        fake_cgroup(&dir, "fallow.slice", "max", "4000000000", 3_500_000_000);
        let mut source = ProcSource::with_roots(&dir.0.join("proc"), &dir.0.join("cg"));
        let sample = source.sample(0).unwrap();
        assert_eq!(source.kind(), "cgroup2");
        let cgroup = sample.cgroup.clone().unwrap();
        assert_eq!(cgroup.high_bytes, Some(4_000_000_000));
        assert_eq!(cgroup.max_bytes, None);
        assert_eq!(
            (cgroup.events_high, cgroup.events_max, cgroup.events_oom),
            (7, 3, 1)
        );
        // headroom = 4e9 - (3.5e9 - 1e6 inactive file)
        assert_eq!(sample.available_bytes, 4_000_000_000 - 3_499_000_000);
        assert_eq!(sample.total_bytes, 4_000_000_000);
        assert_eq!(
            source.pressure_file().unwrap(),
            dir.0.join("cg/fallow.slice/memory.pressure")
        );
    }

    #[test]
    fn cgroup_v2_without_limit_uses_meminfo() {
        let dir = TempDir::new("proc-v2-unlimited");
        fake_proc(&dir, "0::/app\n");
        dir.write("cg/cgroup.controllers", "memory\n");
        fake_cgroup(&dir, "app", "max", "max", 1_000);
        let mut source = ProcSource::with_roots(&dir.0.join("proc"), &dir.0.join("cg"));
        let sample = source.sample(0).unwrap();
        assert_eq!(source.kind(), "proc");
        assert!(sample.cgroup.is_none());
        assert_eq!(
            sample.available_bytes,
            8_192_000 * 1024 + 256 * page_bytes()
        );
        assert_eq!(
            source.pressure_file().unwrap(),
            dir.0.join("proc/pressure/memory")
        );
    }

    #[test]
    fn cgroup_v1_mount_is_ignored() {
        let dir = TempDir::new("proc-v1-mount");
        fake_proc(&dir, "0::/app\n");
        // No cgroup.controllers: not a cgroup2 mount.
        fake_cgroup(&dir, "app", "1000", "max", 10);
        let mut source = ProcSource::with_roots(&dir.0.join("proc"), &dir.0.join("cg"));
        assert!(source.sample(0).unwrap().cgroup.is_none());
    }

    #[test]
    fn limits_and_headroom() {
        let memory = CgroupMemory {
            max_bytes: Some(100),
            high_bytes: Some(80),
            current_bytes: 90,
            inactive_file_bytes: 20,
            ..CgroupMemory::default()
        };
        assert_eq!(memory.limit_bytes(), Some(80));
        assert_eq!(memory.headroom_bytes(), Some(10));
        let unlimited = CgroupMemory::default();
        assert_eq!(unlimited.headroom_bytes(), None);
    }

    #[test]
    fn real_proc_is_readable() {
        if !Path::new("/proc/meminfo").exists() {
            return;
        }
        let sample = ProcSource::new().sample(0).unwrap();
        assert!(sample.total_bytes > 0 && sample.available_bytes <= sample.total_bytes);
        assert!(process_rss_bytes(Path::new("/proc")) > 0);
    }
}
