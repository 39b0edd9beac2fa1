//! Sequential disk bandwidth through the filesystem: write a file in large blocks with fsync, drop its
//! cached pages, read it back.
//!
//! Dropping pages: `posix_fadvise(POSIX_FADV_DONTNEED)` on the fsynced (so clean) file drops exactly this
//! file's pages without root and without disturbing anyone else's cache on a shared machine; `mincore`
//! then tells whether it worked. Only if pages are still resident is `/proc/sys/vm/drop_caches` tried
//! (root only, and machine-wide). If neither works the read figure is reported with a note saying it
//! measured the page cache, not the disk.
use super::CacheDrop;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Above this fraction of the file still in the page cache, the read figure is not a disk figure.
const RESIDENT_LIMIT: f64 = 0.05;

#[derive(Debug)]
pub struct DiskResult {
    pub seq_write_bytes_per_sec: f64,
    pub seq_read_bytes_per_sec: f64,
    pub cache_drop: CacheDrop,
    /// Fraction of the file's pages resident when the read began (None if it could not be checked).
    pub resident_fraction_before_read: Option<f64>,
    pub note: String,
}

/// Removes the test file however the measurement ends.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `file_bytes` to a fresh file in `dir` in `block_bytes` blocks (timed up to the end of fsync),
/// drops its pages, reads it back (timed), and deletes it.
pub fn measure(dir: &Path, file_bytes: u64, block_bytes: usize) -> Result<DiskResult> {
    assert!(file_bytes > 0, "the disk test writes at least one byte");
    let path = dir.join(format!(".fallow-calibrate-{}.tmp", std::process::id()));
    let guard = TempFile(path.clone());
    let block = pattern_block(block_bytes);
    let seq_write_bytes_per_sec = write_file(&path, file_bytes, &block)?;
    let (cache_drop, resident) = drop_pages(&path)?;
    let seq_read_bytes_per_sec = read_file(&path, block_bytes)?;
    drop(guard);
    let note = describe(cache_drop, resident);
    Ok(DiskResult {
        seq_write_bytes_per_sec,
        seq_read_bytes_per_sec,
        cache_drop,
        resident_fraction_before_read: resident,
        note,
    })
}

/// Non-repeating bytes, so nothing below the filesystem can shortcut zeroes.
fn pattern_block(block_bytes: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..block_bytes.max(1))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn write_file(path: &Path, file_bytes: u64, block: &[u8]) -> Result<f64> {
    assert!(
        !block.is_empty(),
        "a block holds at least one byte, or the write loop never ends"
    );
    let start = Instant::now();
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating the disk test file {}", path.display()))?;
    let mut left = file_bytes;
    while left > 0 {
        let chunk = left.min(block.len() as u64) as usize;
        file.write_all(&block[..chunk])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= chunk as u64;
    }
    file.sync_all()
        .with_context(|| format!("fsync of {}", path.display()))?;
    Ok(file_bytes as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

fn read_file(path: &Path, block_bytes: usize) -> Result<f64> {
    let mut buffer = vec![0u8; block_bytes.max(1)];
    let start = Instant::now();
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut total: u64 = 0;
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            break;
        }
        total += read as u64;
    }
    std::hint::black_box(&buffer);
    Ok(total as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Tries fadvise, then drop_caches; returns the method that left (almost) nothing resident, or `None`.
fn drop_pages(path: &Path) -> Result<(CacheDrop, Option<f64>)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: a plain syscall on an open descriptor; offset 0 and length 0 mean the whole file.
    let advised =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } == 0;
    let resident = resident_fraction(&file);
    if advised && resident.is_some_and(|fraction| fraction <= RESIDENT_LIMIT) {
        return Ok((CacheDrop::FadviseDontneed, resident));
    }
    if std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok() {
        let resident = resident_fraction(&file);
        if resident.is_none_or(|fraction| fraction <= RESIDENT_LIMIT) {
            return Ok((CacheDrop::DropCaches, resident));
        }
    }
    Ok((CacheDrop::None, resident))
}

/// The fraction of the file's pages in the page cache, from mincore over a read-only mapping.
fn resident_fraction(file: &File) -> Option<f64> {
    let length = file.metadata().ok()?.len() as usize;
    if length == 0 {
        return Some(0.0);
    }
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    let pages = length.div_ceil(page);
    let mut flags = vec![0u8; pages];
    // SAFETY: maps `length` bytes of a file we hold open, read-only and shared; nothing reads the mapping,
    // mincore only writes `pages` bytes into `flags`, and the mapping is unmapped before returning.
    unsafe {
        let address = libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        if address == libc::MAP_FAILED {
            return None;
        }
        let status = libc::mincore(address, length, flags.as_mut_ptr());
        libc::munmap(address, length);
        if status != 0 {
            return None;
        }
    }
    let resident = flags.iter().filter(|&&flag| flag & 1 == 1).count();
    let fraction = resident as f64 / pages as f64;
    assert!(
        (0.0..=1.0).contains(&fraction),
        "a resident fraction is within [0, 1]: {resident} of {pages} pages"
    );
    Some(fraction)
}

fn describe(cache_drop: CacheDrop, resident: Option<f64>) -> String {
    let resident_text = resident.map_or_else(
        || "residency unknown (mincore failed)".to_string(),
        |fraction| {
            format!(
                "{:.1}% of the file resident when the read began",
                fraction * 100.0
            )
        },
    );
    match cache_drop {
        CacheDrop::FadviseDontneed => format!("pages dropped with posix_fadvise(DONTNEED) after fsync; {resident_text}"),
        CacheDrop::DropCaches => format!("pages dropped with /proc/sys/vm/drop_caches after fsync; {resident_text}"),
        CacheDrop::None => format!(
            "caches could NOT be dropped ({resident_text}): the read figure is page-cache bandwidth, not the disk's"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_file_round_trips_and_is_deleted() {
        let dir = std::env::temp_dir().join(format!("fallow-model-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let result = measure(&dir, 4 << 20, 1 << 20).unwrap();
        assert!(
            result.seq_write_bytes_per_sec > 1e5,
            "{}",
            result.seq_write_bytes_per_sec
        );
        assert!(
            result.seq_read_bytes_per_sec > 1e5,
            "{}",
            result.seq_read_bytes_per_sec
        );
        assert!(!result.note.is_empty());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the test file is deleted"
        );
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_dir_is_a_clear_error() {
        let error = measure(Path::new("/nonexistent/fallow"), 1 << 20, 1 << 20).unwrap_err();
        assert!(
            format!("{error:#}").contains("creating the disk test file"),
            "{error:#}"
        );
    }

    #[test]
    #[should_panic(expected = "a block holds at least one byte")]
    fn writing_in_empty_blocks_panics() {
        let _ = write_file(Path::new("/nonexistent/fallow"), 1, &[]);
    }

    #[test]
    #[should_panic(expected = "the disk test writes at least one byte")]
    fn an_empty_disk_test_panics() {
        let _ = measure(Path::new("/nonexistent/fallow"), 0, 1 << 20);
    }
}
