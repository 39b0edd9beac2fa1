//! The system calls the filesystem makes on backing files, with errors as errno values (what FUSE
//! replies carry).
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

/// The errno of the last failed call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn io_errno(error: std::io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

/// A path that reopens descriptor `fd` (works for O_PATH descriptors, which most calls refuse).
pub fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number")
}

pub fn cstring(name: &OsStr) -> Result<CString, i32> {
    CString::new(name.as_bytes()).map_err(|_| libc::EINVAL)
}

/// `ret` of a call that returns -1 on error.
pub fn check(ret: libc::c_int) -> Result<libc::c_int, i32> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

pub fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `stat` is a valid out-pointer; AT_EMPTY_PATH stats `fd` itself (O_PATH descriptors too).
    check(unsafe {
        libc::fstatat(
            fd,
            c"".as_ptr(),
            &mut stat,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(stat)
}

/// Opens `name` in directory `dir` as an O_PATH descriptor without following a final symlink.
pub fn open_path(dir: RawFd, name: &CStr) -> Result<OwnedFd, i32> {
    // SAFETY: a valid C string; the returned descriptor is owned here.
    let fd = check(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reopens an O_PATH descriptor for I/O with `flags`.
pub fn reopen(opath: RawFd, flags: libc::c_int) -> Result<File, i32> {
    let path = proc_path(opath);
    // SAFETY: a valid C string; the descriptor is owned by the File.
    let fd = check(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The descriptor block fills read from: O_DIRECT when the backing file system allows it, else a plain
/// one with the kernel's read-ahead off (fills choose what to read). None when the file is unreadable.
pub fn open_reader(opath: &OwnedFd) -> Option<(File, bool)> {
    if let Ok(file) = reopen(opath.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECT) {
        return Some((file, true));
    }
    let file = reopen(opath.as_raw_fd(), libc::O_RDONLY).ok()?;
    // SAFETY: plain advice on a valid descriptor.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    Some((file, false))
}

/// Reads up to `len` bytes at `offset`, fewer only at the end of the file.
pub fn pread_full(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut bytes = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut bytes[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(read) => done += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(io_errno(error)),
        }
    }
    bytes.truncate(done);
    Ok(bytes)
}

const DIRECT_ALIGN_BYTES: usize = 4096;

/// `pread_full` on an O_DIRECT descriptor: through a page-aligned buffer (offset and length are block
/// multiples, themselves multiples of 4096).
pub fn pread_direct(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, i32> {
    assert!(
        offset.is_multiple_of(DIRECT_ALIGN_BYTES as u64) && len.is_multiple_of(DIRECT_ALIGN_BYTES),
        "aligned direct read"
    );
    let layout =
        std::alloc::Layout::from_size_align(len, DIRECT_ALIGN_BYTES).expect("valid layout");
    // SAFETY: a non-zero layout; freed below on every path.
    let buffer = unsafe { std::alloc::alloc(layout) };
    assert!(!buffer.is_null(), "out of memory");
    let mut done = 0usize;
    let result = loop {
        if done == len {
            break Ok(());
        }
        // SAFETY: writes stay inside the allocation; offsets stay aligned (a short read ends the file).
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buffer.add(done).cast(),
                len - done,
                (offset + done as u64) as i64,
            )
        };
        match read {
            0 => break Ok(()),
            n if n > 0 => done += n as usize,
            _ if errno() == libc::EINTR => {}
            _ => break Err(errno()),
        }
        if !done.is_multiple_of(DIRECT_ALIGN_BYTES) {
            break Ok(());
        }
    };
    // SAFETY: `done` bytes were written by pread.
    let bytes = result.map(|()| unsafe { std::slice::from_raw_parts(buffer, done) }.to_vec());
    unsafe { std::alloc::dealloc(buffer, layout) };
    bytes
}

pub fn pwrite_all(file: &File, data: &[u8], offset: u64) -> Result<usize, i32> {
    file.write_all_at(data, offset).map_err(io_errno)?;
    Ok(data.len())
}

/// Drops the backing file's pages a buffered fill read (fallow holds them now).
pub fn drop_page_cache(file: &File, offset: u64, len: u64) {
    // SAFETY: plain advice on a valid descriptor.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

/// The inode's generation (FS_IOC_GETVERSION): a reused inode number then names another file. 0 where
/// the file system keeps none.
pub fn inode_generation(file: &File) -> u32 {
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut generation: libc::c_long = 0;
    // SAFETY: the ioctl writes one long.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETVERSION, &mut generation) };
    if ret < 0 {
        0
    } else {
        generation as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_and_plain_reads_agree_and_stop_at_the_end() {
        let dir = std::env::temp_dir().join(format!("fallow-fs-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let plain = File::open(&path).unwrap();
        assert_eq!(pread_full(&plain, 4096, 8192).unwrap(), &data[4096..]);
        let dir_fd = File::open(&dir).unwrap();
        let opath = open_path(dir_fd.as_raw_fd(), c"f").unwrap();
        let (reader, direct) = open_reader(&opath).unwrap();
        let read = if direct {
            pread_direct(&reader, 8192, 8192).unwrap()
        } else {
            pread_full(&reader, 8192, 8192).unwrap()
        };
        assert_eq!(read, &data[8192..]);
        assert_eq!(fstat(opath.as_raw_fd()).unwrap().st_size, 10_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
