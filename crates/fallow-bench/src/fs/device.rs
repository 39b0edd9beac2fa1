//! The emulated slow device: the host's virtual disk is itself cached by the host, so reads from it are
//! far faster than any real disk. The benchmark makes its own: a loop device (`losetup --direct-io=on`, so
//! the image file bypasses this machine's page cache) over a sparse image file, ext4 on it, and the cgroup v1
//! `blkio` throttle on the loop device's major:minor (read bytes/s, read IOPS, write bytes/s) for every
//! process the benchmark starts in its group. A `memory` cgroup of the same name limits the page cache those
//! processes may hold: the small "VM" of Mortar, whose first-level cache is the kernel's page cache.
//!
//! Everything is undone on drop (also after an error or Ctrl-C): processes are moved out of the groups, the
//! groups removed, the file system unmounted, the loop device detached and the image deleted.
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

const BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";
const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// The throttle and the "VM" memory of the device's group.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceSpec {
    pub read_bytes_per_s: u64,
    pub read_iops: u64,
    pub write_bytes_per_s: u64,
    /// Size of the sparse image (only what is written takes disk space).
    pub image_bytes: u64,
}

/// The loop device, its ext4 mount and the cgroups; all undone on drop.
pub struct Device {
    pub spec: DeviceSpec,
    /// Scratch directory holding the image and the mount points.
    pub dir: PathBuf,
    /// Where the ext4 file system is mounted: the backing directory of the FUSE mounts.
    pub mnt: PathBuf,
    image: PathBuf,
    loop_dev: Option<String>,
    mounted: bool,
    /// "major:minor" of the loop device.
    pub major_minor: String,
    /// The blkio and memory cgroup directories (created ones only).
    groups: Vec<PathBuf>,
    blkio: PathBuf,
    memory: PathBuf,
}

/// Runs a command, failing with its stderr when it fails.
pub fn run_checked(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (is it installed?)"))?;
    if !output.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// What the device emulation needs; the first missing piece, as an error.
pub fn check_prerequisites() -> anyhow::Result<()> {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the emulated device needs root (losetup, mount, cgroups)");
    }
    for dir in [BLKIO_ROOT, MEMORY_ROOT] {
        if !Path::new(dir).join("cgroup.procs").exists() {
            bail!("no cgroup v1 controller at {dir}");
        }
    }
    for program in ["losetup", "mkfs.ext4", "mount", "umount"] {
        if !crate::txn::server::on_path(program) {
            bail!("{program} is not installed");
        }
    }
    Ok(())
}

impl Device {
    /// Builds the device under `parent` (a scratch directory named after this process).
    pub fn create(parent: &Path, spec: DeviceSpec) -> anyhow::Result<Device> {
        check_prerequisites()?;
        let mut cleaned = clean_stale();
        cleaned.extend(clean_stale_dirs(parent));
        for what in cleaned {
            eprintln!("fallow-bench fs: removed what a killed run left: {what}");
        }
        let name = format!("fallow-fsbench-{}", std::process::id());
        let dir = parent.join(&name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut device = Device {
            spec,
            mnt: dir.join("disk"),
            image: dir.join("disk.img"),
            dir,
            loop_dev: None,
            mounted: false,
            major_minor: String::new(),
            groups: Vec::new(),
            blkio: Path::new(BLKIO_ROOT).join(&name),
            memory: Path::new(MEMORY_ROOT).join(&name),
        };
        device.build()?;
        Ok(device)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        File::create(&self.image)?.set_len(self.spec.image_bytes)?;
        let image = self.image.to_string_lossy().to_string();
        let loop_dev = run_checked("losetup", &["-f", "--show", "--direct-io=on", &image])?;
        self.loop_dev = Some(loop_dev.clone());
        run_checked(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                &loop_dev,
            ],
        )?;
        std::fs::create_dir_all(&self.mnt)?;
        run_checked("mount", &[&loop_dev, &self.mnt.to_string_lossy()])?;
        self.mounted = true;
        let name = loop_dev.trim_start_matches("/dev/");
        self.major_minor = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
            .with_context(|| format!("reading the device number of {loop_dev}"))?
            .trim()
            .to_string();
        self.make_groups()
    }

    fn make_groups(&mut self) -> anyhow::Result<()> {
        for group in [self.blkio.clone(), self.memory.clone()] {
            std::fs::create_dir(&group).with_context(|| format!("creating {}", group.display()))?;
            self.groups.push(group);
        }
        let mm = &self.major_minor;
        let s = &self.spec;
        write_knob(
            &self.blkio,
            "blkio.throttle.read_bps_device",
            &format!("{mm} {}", s.read_bytes_per_s),
        )?;
        write_knob(
            &self.blkio,
            "blkio.throttle.read_iops_device",
            &format!("{mm} {}", s.read_iops),
        )?;
        write_knob(
            &self.blkio,
            "blkio.throttle.write_bps_device",
            &format!("{mm} {}", s.write_bytes_per_s),
        )?;
        self.set_memory_limit(None)
    }

    /// The page cache (and all memory) the group's processes may hold; None = no limit.
    pub fn set_memory_limit(&self, bytes: Option<u64>) -> anyhow::Result<()> {
        let value = bytes.map_or_else(|| "-1".to_string(), |b| b.to_string());
        write_knob(&self.memory, "memory.limit_in_bytes", &value)
    }

    /// `program args` started inside both groups: a shell moves itself in, then execs the program, so every
    /// thread the program starts is throttled from its first I/O.
    pub fn command(&self, program: &Path, args: &[String]) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && echo $$ > "$2/cgroup.procs" && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(&self.blkio)
            .arg(&self.memory)
            .arg(program)
            .args(args);
        // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal, which survives
        // the exec: if the benchmark is killed outright, fio stops and fallow fs unmounts (SIGTERM).
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command
    }

    /// Bytes the group has read from and written to the loop device so far.
    pub fn io_bytes(&self) -> anyhow::Result<IoBytes> {
        let path = self.blkio.join("blkio.throttle.io_service_bytes");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(parse_io_service_bytes(&text, &self.major_minor))
    }

    /// The loop device's name (e.g. /dev/loop3).
    pub fn loop_device(&self) -> &str {
        self.loop_dev.as_deref().unwrap_or("?")
    }

    fn teardown(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for group in self.groups.drain(..).rev() {
            if let Err(error) = remove_group(&group) {
                errors.push(format!("{error:#}"));
            }
        }
        if self.mounted {
            match unmount(&self.mnt) {
                Ok(()) => self.mounted = false,
                Err(error) => errors.push(format!("{error:#}")),
            }
        }
        if let Some(loop_dev) = self.loop_dev.take() {
            if let Err(error) = run_checked("losetup", &["-d", &loop_dev]) {
                errors.push(format!("{error:#}"));
            }
        }
        if !self.mounted {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        errors
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        for error in self.teardown() {
            eprintln!("fallow-bench fs: cleanup: {error}");
        }
    }
}

/// Undoes what an earlier run killed without its cleanup (SIGKILL, a crash) left: the cgroups, mounts, loop
/// devices and scratch directories named `fallow-fsbench-PID` whose PID no longer runs. Returns what it
/// removed.
pub fn clean_stale() -> Vec<String> {
    let mut cleaned = Vec::new();
    let dead = dead_run;
    // Mounts first (FUSE mounts over the ext4 before the ext4 itself: the deepest paths first).
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_string))
        .filter(|path| path.split('/').any(dead))
        .collect();
    mounts.sort_by_key(|path| std::cmp::Reverse(path.len()));
    for path in mounts {
        if run_checked("umount", &["-l", &path]).is_ok() {
            cleaned.push(format!("mount {path}"));
        }
    }
    let loops = run_checked("losetup", &["-a"]).unwrap_or_default();
    for line in loops.lines().filter(|line| line.split('/').any(dead)) {
        if let Some((device, _)) = line.split_once(':') {
            if run_checked("losetup", &["-d", device]).is_ok() {
                cleaned.push(format!("loop device {device}"));
            }
        }
    }
    for root in [BLKIO_ROOT, MEMORY_ROOT] {
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if dead(&name) && remove_group(&entry.path()).is_ok() {
                cleaned.push(format!("cgroup {}", entry.path().display()));
            }
        }
    }
    cleaned
}

/// Removes the scratch directories of dead runs under `parent` (after [`clean_stale`] unmounted them).
pub fn clean_stale_dirs(parent: &Path) -> Vec<String> {
    let mut cleaned = Vec::new();
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let path = entry.path();
        let stale = dead_run(&entry.file_name().to_string_lossy())
            && path.join("disk.img").exists()
            && !super::mount::is_mounted(&path.join("disk"));
        if stale && std::fs::remove_dir_all(&path).is_ok() {
            cleaned.push(format!("directory {}", path.display()));
        }
    }
    cleaned
}

/// Whether `name` is `fallow-fsbench-PID` of a process that no longer runs.
fn dead_run(name: &str) -> bool {
    name.strip_prefix("fallow-fsbench-")
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Bytes moved through the throttled device.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, PartialEq, Eq)]
pub struct IoBytes {
    pub read: u64,
    pub write: u64,
}

impl IoBytes {
    pub fn since(self, earlier: IoBytes) -> IoBytes {
        IoBytes {
            read: self.read.saturating_sub(earlier.read),
            write: self.write.saturating_sub(earlier.write),
        }
    }
}

/// The Read and Write lines of `blkio.throttle.io_service_bytes` for one device.
pub fn parse_io_service_bytes(text: &str, major_minor: &str) -> IoBytes {
    let mut bytes = IoBytes::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [device, kind, value] = fields[..] {
            let value: u64 = value.parse().unwrap_or(0);
            match (device == major_minor, kind) {
                (true, "Read") => bytes.read = value,
                (true, "Write") => bytes.write = value,
                _ => {}
            }
        }
    }
    bytes
}

fn write_knob(group: &Path, knob: &str, value: &str) -> anyhow::Result<()> {
    let path = group.join(knob);
    std::fs::write(&path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

/// Moves any process left in the group to the root group, then removes the group.
fn remove_group(group: &Path) -> anyhow::Result<()> {
    let root = group.parent().expect("a cgroup has a parent");
    for _ in 0..50 {
        let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = std::fs::write(root.join("cgroup.procs"), pid);
        }
        if std::fs::remove_dir(group).is_ok() || !group.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("could not remove cgroup {}", group.display())
}

/// Unmounts, retrying while the mount is busy, finally lazily.
pub fn unmount(path: &Path) -> anyhow::Result<()> {
    let text = path.to_string_lossy().to_string();
    for _ in 0..20 {
        if run_checked("umount", &[&text]).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    run_checked("umount", &["-l", &text]).map(|_| ())
}

/// Removes one file's pages from the page cache (after writing back its dirty pages): the per-file
/// `drop_caches`, which leaves the rest of the machine's cache (the other engineers' builds) alone.
pub fn evict(path: &Path) -> anyhow::Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.sync_all()
        .with_context(|| format!("syncing {}", path.display()))?;
    // SAFETY: a valid descriptor; the advice only drops clean cached pages.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        bail!("posix_fadvise({}): error {rc}", path.display());
    }
    Ok(())
}

/// Bytes of the file in the page cache (mincore over a read-only mapping); None when it cannot be mapped.
pub fn resident_bytes(path: &Path) -> Option<u64> {
    let file = File::open(path).ok()?;
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len == 0 {
        return Some(0);
    }
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh shared read-only mapping of a file we hold open; unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let mut pages = vec![0u8; len.div_ceil(page)];
    // SAFETY: `pages` has one byte per page of the mapping.
    let rc = unsafe { libc::mincore(map, len, pages.as_mut_ptr()) };
    // SAFETY: the mapping made above, with its length.
    unsafe { libc::munmap(map, len) };
    (rc == 0).then(|| pages.iter().filter(|&&p| p & 1 == 1).count() as u64 * page as u64)
}

/// Evicts every regular file under `dir` and checks that the backing files left the page cache.
pub fn evict_tree(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut left = BTreeMap::new();
    evict_into(dir, &mut left)?;
    Ok(left)
}

/// Evicts the files under `dir` and its subdirectories (a database's data directory), recording those left.
fn evict_into(dir: &Path, left: &mut BTreeMap<String, u64>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            evict_into(&path, left)?;
        } else if kind.is_file() {
            evict(&path)?;
            if let Some(bytes) = resident_bytes(&path).filter(|&b| b > 0) {
                left.insert(path.display().to_string(), bytes);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runs_whose_process_is_gone_are_stale() {
        assert!(!dead_run(&format!("fallow-fsbench-{}", std::process::id())));
        assert!(!dead_run("fallow-fsbench-x"));
        assert!(!dead_run("other-1"));
        // Above the kernel's pid_max (at most 2^22): never a running process.
        assert!(dead_run("fallow-fsbench-4294967295"));
    }

    #[test]
    fn io_service_bytes_of_one_device() {
        let text = "7:0 Read 4096\n7:0 Write 8192\n7:0 Sync 0\n7:1 Read 99\nTotal 12288\n";
        assert_eq!(
            parse_io_service_bytes(text, "7:0"),
            IoBytes {
                read: 4096,
                write: 8192
            }
        );
        assert_eq!(parse_io_service_bytes(text, "7:1").read, 99);
        assert_eq!(parse_io_service_bytes("", "7:0"), IoBytes::default());
    }

    #[test]
    fn evicted_files_leave_the_page_cache() {
        let path =
            std::env::temp_dir().join(format!("fallow-fsbench-evict-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        std::fs::read(&path).unwrap();
        let on_tmpfs = is_tmpfs(&path);
        evict(&path).unwrap();
        let left = resident_bytes(&path);
        std::fs::remove_file(&path).unwrap();
        // tmpfs pages are the file itself: the advice cannot drop them.
        if !on_tmpfs {
            assert_eq!(left, Some(0));
        }
    }

    fn is_tmpfs(path: &Path) -> bool {
        const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
        let text = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: statfs fills the plain struct given.
        let mut info: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and struct pointer.
        let rc = unsafe { libc::statfs(text.as_ptr(), &mut info) };
        rc == 0 && info.f_type as libc::c_long == TMPFS_MAGIC
    }
}
