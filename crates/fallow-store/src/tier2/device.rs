//! The device under tier 2: a file opened with O_DIRECT where the filesystem allows it (so the page cache
//! neither hides the device's latency nor holds a second copy of what was demoted out of RAM), block-aligned
//! buffers for it, and a fault injector in front of it for tests (EIO on writes, reads or syncs, a device
//! that vanished).
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// Alignment and granularity of every direct I/O (the logical block size of the devices here is 512 B;
/// 4 KiB also matches the page size, so reads are page-granular).
pub const BLOCK_BYTES: usize = 4096;

/// A zeroed buffer aligned to `BLOCK_BYTES`, its length a multiple of it. Buffers of `MAPPED_MIN_BYTES`
/// or more (regions, the writer's copies, recovery's reads) are mapped from the kernel, so dropping one
/// gives its pages back at once: heap memory freed by the allocator may stay resident, which the RSS
/// bound under `maxmemory` would count.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    mapped: bool,
}

const MAPPED_MIN_BYTES: usize = 64 << 10;

// The buffer owns its allocation; access goes through `&`/`&mut`.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let len = len.max(BLOCK_BYTES).next_multiple_of(BLOCK_BYTES);
        if len >= MAPPED_MIN_BYTES {
            return Self::mapped(len);
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            mapped: false,
        }
    }

    /// Anonymous pages: zeroed, page-aligned (a multiple of `BLOCK_BYTES`).
    fn mapped(len: usize) -> AlignedBuf {
        let Some(ptr) = crate::memory::segment::map_anonymous(len) else {
            std::alloc::handle_alloc_error(Self::layout(len));
        };
        AlignedBuf {
            ptr: std::ptr::NonNull::new(ptr.cast()).expect("mmap returns a non-null address"),
            len,
            mapped: true,
        }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, BLOCK_BYTES).expect("block-aligned layout")
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` to `offset` through the raw pointer, so no reference to the whole buffer is made
    /// while the tier-2 writer reads the bytes below `offset` (`raw_range`).
    pub fn write_bytes(&mut self, offset: usize, bytes: &[u8]) {
        assert!(
            offset <= self.len && bytes.len() <= self.len - offset,
            "{} bytes at {offset} overflow a {}-byte buffer",
            bytes.len(),
            self.len
        );
        // SAFETY: the range lies inside the allocation (asserted); `bytes` is a different allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(offset),
                bytes.len(),
            )
        };
    }

    /// Where the bytes `[from, to)` lie, to be read after the lock guarding the buffer is released
    /// (the tier-2 writer reads region buffers that appenders keep filling past `to`).
    pub fn raw_range(&self, from: usize, to: usize) -> RawRange {
        assert!(
            from <= to && to <= self.len,
            "range {from}..{to} of {}",
            self.len
        );
        RawRange {
            // SAFETY: `from` is inside the allocation or one past its end (asserted).
            ptr: unsafe { self.ptr.as_ptr().add(from) },
            len: to - from,
        }
    }
}

/// A range of an `AlignedBuf`'s bytes taken by `raw_range`.
pub struct RawRange {
    ptr: *const u8,
    len: usize,
}

impl RawRange {
    /// # Safety
    /// Nothing writes the range, and its buffer is neither dropped nor reused, while the slice lives.
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the range lay inside a live buffer (raw_range); the caller keeps it so.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes were allocated at `ptr` and stay valid until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: mapped in `mapped` with this length, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            return;
        }
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

/// Faults a test can inject (`Faults::set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None = 0,
    /// Writes and syncs fail with EIO.
    WriteError = 1,
    /// Reads fail with EIO.
    ReadError = 2,
    /// Everything fails with ENODEV, as when the device was pulled.
    Vanished = 3,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::WriteError => "write-error",
            Fault::ReadError => "read-error",
            Fault::Vanished => "vanished",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        [
            Fault::None,
            Fault::WriteError,
            Fault::ReadError,
            Fault::Vanished,
        ]
        .into_iter()
        .find(|fault| fault.name().eq_ignore_ascii_case(name))
    }
}

/// The tier-2 file with its fault injector.
pub struct Device {
    file: File,
    /// Opened with O_DIRECT (false where the filesystem refuses it, e.g. tmpfs).
    pub direct: bool,
    fault: AtomicU8,
}

impl Device {
    /// Opens (creating) the file at `path`, with O_DIRECT when the filesystem supports it.
    pub fn open(path: &Path) -> io::Result<Device> {
        let open = |direct: bool| {
            let mut options = std::fs::OpenOptions::new();
            options.read(true).write(true).create(true).truncate(false);
            if direct {
                options.custom_flags(libc::O_DIRECT);
            }
            options.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(file) => (file, true),
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => (open(false)?, false),
            Err(error) => return Err(error),
        };
        Ok(Device {
            file,
            direct,
            fault: AtomicU8::new(Fault::None as u8),
        })
    }

    pub fn set_fault(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::Relaxed);
    }

    pub fn fault(&self) -> Fault {
        match self.fault.load(Ordering::Relaxed) {
            1 => Fault::WriteError,
            2 => Fault::ReadError,
            3 => Fault::Vanished,
            _ => Fault::None,
        }
    }

    /// The descriptor, for reads submitted through io_uring (`uring`).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// The injected fault a read would meet now (reads submitted elsewhere check it first).
    pub fn read_fault(&self) -> io::Result<()> {
        self.injected(false)
    }

    fn injected(&self, writing: bool) -> io::Result<()> {
        match (self.fault(), writing) {
            (Fault::Vanished, _) => Err(io::Error::from_raw_os_error(libc::ENODEV)),
            (Fault::WriteError, true) | (Fault::ReadError, false) => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            _ => Ok(()),
        }
    }

    /// Writes block-aligned `bytes` at block-aligned `position`.
    pub fn write_at(&self, bytes: &[u8], position: u64) -> io::Result<()> {
        debug_assert!(
            position.is_multiple_of(BLOCK_BYTES as u64) && bytes.len().is_multiple_of(BLOCK_BYTES),
            "direct writes are block-aligned"
        );
        self.injected(true)?;
        self.file.write_all_at(bytes, position)
    }

    /// Fills block-aligned `bytes` from block-aligned `position`; bytes past the end of the file read as
    /// zeros.
    pub fn read_at(&self, bytes: &mut [u8], position: u64) -> io::Result<()> {
        self.injected(false)?;
        let mut done = 0;
        while done < bytes.len() {
            match self
                .file
                .read_at(&mut bytes[done..], position + done as u64)
            {
                Ok(0) => {
                    bytes[done..].fill(0);
                    break;
                }
                Ok(read) => done += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.injected(true)?;
        self.file.sync_data()
    }

    pub fn file_bytes(&self) -> u64 {
        self.file.metadata().map_or(0, |metadata| metadata.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_aligned_and_zeroed() {
        let buf = AlignedBuf::zeroed(5000);
        assert_eq!(buf.len(), 8192);
        assert_eq!(buf.as_ptr() as usize % BLOCK_BYTES, 0);
        assert!(buf.iter().all(|&byte| byte == 0));
    }

    #[test]
    fn injected_faults_fail_the_io_they_name() {
        let dir = std::env::temp_dir().join(format!("fallow-device-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let device = Device::open(&dir.join("t2")).unwrap();
        let mut buf = AlignedBuf::zeroed(BLOCK_BYTES);
        buf[0] = 7;
        device.write_at(&buf, 0).unwrap();
        device.set_fault(Fault::WriteError);
        assert!(device.write_at(&buf, 0).is_err());
        assert!(device.read_at(&mut buf, 0).is_ok());
        device.set_fault(Fault::Vanished);
        assert_eq!(
            device.read_at(&mut buf, 0).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
        device.set_fault(Fault::None);
        let mut back = AlignedBuf::zeroed(2 * BLOCK_BYTES);
        device.read_at(&mut back, 0).unwrap();
        assert_eq!((back[0], back[BLOCK_BYTES]), (7, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
