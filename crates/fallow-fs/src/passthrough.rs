//! The FUSE filesystem: every operation passes through to the backing directory; file reads and writes
//! go through the block cache (`cache`) unless the mount runs with `--no-cache`.
use crate::cache::{BlockCache, OpenFile};
use crate::inodes::{Inode, Inodes, ROOT_INO};
use crate::options::Prefetch;
use crate::stats::Counters;
use crate::sys::{self, check, cstring, proc_path};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An open file.
pub struct Handle {
    pub inode: Arc<Inode>,
    pub file: File,
    append: bool,
    pub open: OpenFile,
}

/// An open directory: its entries, read at opendir (offsets index into them).
struct DirHandle {
    entries: Vec<(u64, FileType, OsString)>,
}

pub struct Passthrough {
    pub inodes: Arc<Inodes>,
    pub handles: Arc<Mutex<HashMap<u64, Arc<Handle>>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_handle: AtomicU64,
    pub cache: Option<Arc<BlockCache>>,
    /// Set once the session exists (it is made from this filesystem).
    pub notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    prefetch: Prefetch,
    ttl: Duration,
    direct_io: bool,
    counters: Arc<Counters>,
}

fn errno(code: i32) -> Errno {
    Errno::from_i32(code)
}

fn time_of(seconds: i64, nanos: i64) -> SystemTime {
    if seconds >= 0 {
        UNIX_EPOCH + Duration::new(seconds as u64, nanos as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
            + Duration::from_nanos(nanos as u64)
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub fn attr_of(fuse_ino: u64, stat: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(fuse_ino),
        size: stat.st_size as u64,
        blocks: stat.st_blocks as u64,
        atime: time_of(stat.st_atime, stat.st_atime_nsec),
        mtime: time_of(stat.st_mtime, stat.st_mtime_nsec),
        ctime: time_of(stat.st_ctime, stat.st_ctime_nsec),
        crtime: time_of(stat.st_ctime, stat.st_ctime_nsec),
        kind: kind_of(stat.st_mode),
        perm: (stat.st_mode & 0o7777) as u16,
        nlink: stat.st_nlink as u32,
        uid: stat.st_uid,
        gid: stat.st_gid,
        rdev: stat.st_rdev as u32,
        blksize: stat.st_blksize as u32,
        flags: 0,
    }
}

fn timespec_of(time: Option<TimeOrNow>) -> libc::timespec {
    match time {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(time)) => {
            let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: since.as_secs() as i64,
                tv_nsec: i64::from(since.subsec_nanos()),
            }
        }
    }
}

impl Passthrough {
    pub fn new(
        inodes: Arc<Inodes>,
        cache: Option<Arc<BlockCache>>,
        prefetch: Prefetch,
        ttl: Duration,
        direct_io: bool,
        counters: Arc<Counters>,
    ) -> Passthrough {
        Passthrough {
            inodes,
            handles: Arc::new(Mutex::new(HashMap::new())),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            cache,
            notifier: Arc::new(std::sync::OnceLock::new()),
            prefetch,
            ttl,
            direct_io,
            counters,
        }
    }

    fn failed(&self, code: i32) -> Errno {
        self.counters.meta_errors.fetch_add(1, Relaxed);
        errno(code)
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<Handle>, i32> {
        self.handles.lock().get(&fh.0).cloned().ok_or(libc::EBADF)
    }

    /// Looks `name` up in `parent` and registers the kernel's reference.
    fn lookup_entry(&self, parent: &Inode, name: &OsStr) -> Result<(Arc<Inode>, libc::stat), i32> {
        let name = cstring(name)?;
        let opath = sys::open_path(parent.fd(), &name)?;
        let stat = sys::fstat(opath.as_raw_fd())?;
        Ok((self.inodes.remember(opath, &stat), stat))
    }

    /// A new entry made by this request: owned by the caller (when running as root), then looked up.
    fn made_entry(
        &self,
        req: &Request,
        parent: &Inode,
        name: &OsStr,
    ) -> Result<(Arc<Inode>, libc::stat), i32> {
        if unsafe { libc::geteuid() } == 0 && (req.uid() != 0 || req.gid() != 0) {
            let cname = cstring(name)?;
            // SAFETY: a valid C string; AT_SYMLINK_NOFOLLOW chowns a new symlink itself.
            check(unsafe {
                libc::fchownat(
                    parent.fd(),
                    cname.as_ptr(),
                    req.uid(),
                    req.gid(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        self.lookup_entry(parent, name)
    }

    /// Makes a directory entry with `make(parent's descriptor, name)` (mknod, mkdir, symlink), gives it
    /// to the caller, and replies with it.
    fn make_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        make: impl FnOnce(RawFd, &CStr) -> libc::c_int,
        reply: ReplyEntry,
    ) {
        let result = self.inodes.get(parent.0).and_then(|parent| {
            check(make(parent.fd(), &cstring(name)?))?;
            self.made_entry(req, &parent, name)
        });
        self.reply_entry(result, reply);
    }

    fn reply_entry(&self, result: Result<(Arc<Inode>, libc::stat), i32>, reply: ReplyEntry) {
        match result {
            Ok((inode, stat)) => {
                reply.entry(&self.ttl, &attr_of(inode.fuse_ino, &stat), Generation(0))
            }
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn stat_reply(&self, inode: &Inode, reply: ReplyAttr) {
        match sys::fstat(inode.fd()) {
            Ok(stat) => reply.attr(&self.ttl, &attr_of(inode.fuse_ino, &stat)),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    /// Opens the backing file for a kernel open; returns the handle number and the open flags.
    fn open_file(&self, inode: &Arc<Inode>, flags: i32) -> Result<(u64, FopenFlags), i32> {
        let strip = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT;
        let file = sys::reopen(inode.fd(), flags & !strip)?;
        let mut fopen = FopenFlags::empty();
        if let Some(cache) = &self.cache {
            let unchanged = cache.open(&inode.state, &file)?;
            if unchanged && !self.direct_io {
                fopen |= FopenFlags::FOPEN_KEEP_CACHE;
            }
            if !unchanged {
                // Changed behind the mount: the kernel must not go on with the size it cached (it would
                // read up to an old, larger size). Attributes only (offset -1): safe inside a request.
                if let Some(notifier) = self.notifier.get() {
                    let _ = notifier.inval_inode(INodeNo(inode.fuse_ino), -1, 0);
                }
            }
            if flags & libc::O_TRUNC != 0 {
                cache.new_epoch(&inode.state);
            }
        }
        if self.direct_io {
            fopen |= FopenFlags::FOPEN_DIRECT_IO;
        }
        let handle = Arc::new(Handle {
            inode: inode.clone(),
            file,
            append: flags & libc::O_APPEND != 0,
            open: OpenFile::new(self.prefetch),
        });
        let number = self.next_handle.fetch_add(1, Relaxed);
        self.handles.lock().insert(number, handle);
        Ok((number, fopen))
    }

    fn set_size(&self, inode: &Inode, fh: Option<FileHandle>, size: u64) -> Result<(), i32> {
        let handle = fh.and_then(|fh| self.handle(fh).ok());
        match &handle {
            Some(handle) => handle
                .file
                .set_len(size)
                .map_err(|error| error.raw_os_error().unwrap_or(libc::EIO))?,
            None => {
                let path = proc_path(inode.fd());
                // SAFETY: a valid C string.
                check(unsafe { libc::truncate(path.as_ptr(), size as i64) })?;
            }
        }
        if let Some(cache) = &self.cache {
            cache.new_epoch(&inode.state);
        }
        Ok(())
    }

    fn set_attributes(
        &self,
        inode: &Inode,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        times: (Option<TimeOrNow>, Option<TimeOrNow>),
    ) -> Result<(), i32> {
        let path = proc_path(inode.fd());
        if let Some(mode) = mode {
            // SAFETY: a valid C string.
            check(unsafe { libc::chmod(path.as_ptr(), mode & 0o7777) })?;
        }
        if owner.0.is_some() || owner.1.is_some() {
            let (uid, gid) = (owner.0.unwrap_or(u32::MAX), owner.1.unwrap_or(u32::MAX));
            // SAFETY: the empty path with AT_EMPTY_PATH names the descriptor itself.
            check(unsafe {
                libc::fchownat(
                    inode.fd(),
                    c"".as_ptr(),
                    uid,
                    gid,
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if times.0.is_some() || times.1.is_some() {
            let spec = [timespec_of(times.0), timespec_of(times.1)];
            // SAFETY: a valid C string and two timespecs.
            check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), spec.as_ptr(), 0) })?;
        }
        if let Some(cache) = &self.cache {
            cache.restamp(&inode.state);
        }
        Ok(())
    }

    fn read_dir_entries(&self, inode: &Inode) -> Result<Vec<(u64, FileType, OsString)>, i32> {
        let path = format!("/proc/self/fd/{}", inode.fd());
        let mut entries = vec![
            (inode.ino, FileType::Directory, OsString::from(".")),
            (1, FileType::Directory, OsString::from("..")),
        ];
        let reader =
            std::fs::read_dir(path).map_err(|error| error.raw_os_error().unwrap_or(libc::EIO))?;
        for entry in reader {
            let entry = entry.map_err(|error| error.raw_os_error().unwrap_or(libc::EIO))?;
            use std::os::unix::fs::{DirEntryExt, FileTypeExt};
            let kind = match entry.file_type() {
                Ok(kind) if kind.is_dir() => FileType::Directory,
                Ok(kind) if kind.is_symlink() => FileType::Symlink,
                Ok(kind) if kind.is_fifo() => FileType::NamedPipe,
                Ok(kind) if kind.is_socket() => FileType::Socket,
                Ok(kind) if kind.is_char_device() => FileType::CharDevice,
                Ok(kind) if kind.is_block_device() => FileType::BlockDevice,
                _ => FileType::RegularFile,
            };
            entries.push((entry.ino(), kind, entry.file_name()));
        }
        Ok(entries)
    }

    fn xattr_reply(&self, result: Result<Vec<u8>, i32>, size: u32, reply: ReplyXattr) {
        match result {
            Ok(bytes) if size == 0 => reply.size(bytes.len() as u32),
            Ok(bytes) if bytes.len() <= size as usize => reply.data(&bytes),
            Ok(_) => reply.error(errno(libc::ERANGE)),
            Err(code) => reply.error(errno(code)),
        }
    }
}

/// Calls a get/listxattr-style function twice: for the size, then for the bytes.
fn xattr_bytes(call: impl Fn(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>, i32> {
    let size = call(std::ptr::null_mut(), 0);
    if size < 0 {
        return Err(sys::errno());
    }
    let mut bytes = vec![0u8; size as usize];
    let read = call(bytes.as_mut_ptr().cast(), bytes.len());
    if read < 0 {
        return Err(sys::errno());
    }
    bytes.truncate(read as usize);
    Ok(bytes)
}

fn rename_flags(flags: RenameFlags) -> u32 {
    flags.bits()
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The kernel drops a file's pages when its mtime or size changes at a getattr (changes behind the
        // mount reach level 1 too); requests up to 1 MiB; read-ahead as large as the kernel allows.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // mmap of --direct-io files (the kernel refuses it with ENODEV otherwise; Linux 6.6+).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = self
            .inodes
            .get(parent.0)
            .and_then(|parent| self.lookup_entry(&parent, name));
        match result {
            Err(libc::ENOENT) => reply.error(errno(libc::ENOENT)),
            result => self.reply_entry(result, reply),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.inodes.get(ino.0) {
            Ok(inode) => self.stat_reply(&inode, reply),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = self.inodes.get(ino.0).and_then(|inode| {
            if let Some(size) = size {
                self.set_size(&inode, fh, size)?;
            }
            self.set_attributes(&inode, mode, (uid, gid), (atime, mtime))?;
            Ok(inode)
        });
        match result {
            Ok(inode) => self.stat_reply(&inode, reply),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let result = self.inodes.get(ino.0).and_then(|inode| {
            let mut buffer = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: the buffer is writable for its length; "" with an O_PATH symlink reads the link.
            let len = unsafe {
                libc::readlinkat(
                    inode.fd(),
                    c"".as_ptr(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if len < 0 {
                return Err(sys::errno());
            }
            buffer.truncate(len as usize);
            Ok(buffer)
        });
        match result {
            Ok(target) => reply.data(&target),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        // SAFETY (of each maker below): a valid C string and a directory descriptor.
        let make =
            |dir, name: &CStr| unsafe { libc::mknodat(dir, name.as_ptr(), mode, u64::from(rdev)) };
        self.make_entry(req, parent, name, make, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let make = |dir, name: &CStr| unsafe { libc::mkdirat(dir, name.as_ptr(), mode) };
        self.make_entry(req, parent, name, make, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, 0, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, libc::AT_REMOVEDIR, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let Ok(ctarget) = cstring(target.as_os_str()) else {
            return reply.error(errno(libc::EINVAL));
        };
        let make =
            |dir, name: &CStr| unsafe { libc::symlinkat(ctarget.as_ptr(), dir, name.as_ptr()) };
        self.make_entry(req, parent, link_name, make, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let (from, to) = (self.inodes.get(parent.0)?, self.inodes.get(newparent.0)?);
            let (cname, cnew) = (cstring(name)?, cstring(newname)?);
            // SAFETY: valid C strings and directory descriptors.
            check(unsafe {
                libc::renameat2(
                    from.fd(),
                    cname.as_ptr(),
                    to.fd(),
                    cnew.as_ptr(),
                    rename_flags(flags),
                )
            })
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let result = (|| {
            let (inode, parent) = (self.inodes.get(ino.0)?, self.inodes.get(newparent.0)?);
            let (source, cnew) = (proc_path(inode.fd()), cstring(newname)?);
            // SAFETY: valid C strings; AT_SYMLINK_FOLLOW resolves the /proc link to the file itself.
            check(unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    source.as_ptr(),
                    parent.fd(),
                    cnew.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            })?;
            self.lookup_entry(&parent, newname)
        })();
        self.reply_entry(result, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self
            .inodes
            .get(ino.0)
            .and_then(|inode| self.open_file(&inode, flags.0))
        {
            Ok((number, fopen)) => reply.opened(FileHandle(number), fopen),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.handle(fh).and_then(|handle| match &self.cache {
            Some(cache) => cache.read(
                &handle.inode.state,
                &handle.file,
                &handle.open,
                offset,
                size,
            ),
            None => {
                self.counters.reads.fetch_add(1, Relaxed);
                let bytes = sys::pread_full(&handle.file, offset, size as usize)?;
                self.counters
                    .read_bytes
                    .fetch_add(bytes.len() as u64, Relaxed);
                self.counters.backing_reads.fetch_add(1, Relaxed);
                self.counters
                    .backing_read_bytes
                    .fetch_add(bytes.len() as u64, Relaxed);
                Ok(bytes)
            }
        });
        match result {
            Ok(bytes) => reply.data(&bytes),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.handle(fh).and_then(|handle| match &self.cache {
            Some(cache) => cache.write(
                &handle.inode.state,
                &handle.file,
                handle.append,
                offset,
                data,
            ),
            None => {
                self.counters.writes.fetch_add(1, Relaxed);
                self.counters
                    .write_bytes
                    .fetch_add(data.len() as u64, Relaxed);
                sys::pwrite_all(&handle.file, data, offset)
            }
        });
        match result {
            Ok(written) => reply.written(written as u32),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes went through already: nothing is buffered here.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(handle) = self.handles.lock().remove(&fh.0) {
            if let Some(cache) = &self.cache {
                cache.release(&handle.inode.state, &handle.open);
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.handle(fh).and_then(|handle| {
            let fd = handle.file.as_raw_fd();
            // SAFETY: a valid descriptor.
            check(unsafe {
                if datasync {
                    libc::fdatasync(fd)
                } else {
                    libc::fsync(fd)
                }
            })
        });
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self
            .inodes
            .get(ino.0)
            .and_then(|inode| self.read_dir_entries(&inode))
        {
            Ok(entries) => {
                let number = self.next_handle.fetch_add(1, Relaxed);
                self.dirs
                    .lock()
                    .insert(number, Arc::new(DirHandle { entries }));
                reply.opened(FileHandle(number), FopenFlags::empty());
            }
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(dir) = self.dirs.lock().get(&fh.0).cloned() else {
            return reply.error(errno(libc::EBADF));
        };
        for (index, (ino, kind, name)) in dir.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), index as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.inodes.get(ino.0).and_then(|inode| {
            let dir = sys::reopen(inode.fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
            dir.sync_all()
                .map_err(|error| error.raw_os_error().unwrap_or(libc::EIO))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let result = self.inodes.get(ROOT_INO).and_then(|root| {
            let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: a valid out-pointer.
            check(unsafe { libc::fstatvfs(root.fd(), &mut stat) })?;
            Ok(stat)
        });
        match result {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let (inode, cname) = (self.inodes.get(ino.0)?, cstring(name)?);
            let path = proc_path(inode.fd());
            // SAFETY: valid C strings and a value buffer of its length.
            check(unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    cname.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                )
            })
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let result = (|| {
            let (inode, cname) = (self.inodes.get(ino.0)?, cstring(name)?);
            let path = proc_path(inode.fd());
            // SAFETY: valid C strings; the buffer pointer and length come from xattr_bytes.
            xattr_bytes(|buffer, len| unsafe {
                libc::getxattr(path.as_ptr(), cname.as_ptr(), buffer, len)
            })
        })();
        self.xattr_reply(result, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let result = self.inodes.get(ino.0).and_then(|inode| {
            let path = proc_path(inode.fd());
            // SAFETY: a valid C string; the buffer pointer and length come from xattr_bytes.
            xattr_bytes(|buffer, len| unsafe { libc::listxattr(path.as_ptr(), buffer.cast(), len) })
        });
        self.xattr_reply(result, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = (|| {
            let (inode, cname) = (self.inodes.get(ino.0)?, cstring(name)?);
            let path = proc_path(inode.fd());
            // SAFETY: valid C strings.
            check(unsafe { libc::removexattr(path.as_ptr(), cname.as_ptr()) })
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let result = self.inodes.get(ino.0).and_then(|inode| {
            let path = proc_path(inode.fd());
            // SAFETY: a valid C string.
            check(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), mask.bits(), 0) })
        });
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| {
            let parent = self.inodes.get(parent.0)?;
            let cname = cstring(name)?;
            // SAFETY: a valid C string; the descriptor is closed at once (the handle reopens it).
            let fd = check(unsafe {
                libc::openat(
                    parent.fd(),
                    cname.as_ptr(),
                    (flags | libc::O_CREAT | libc::O_CLOEXEC) & !libc::O_DIRECT,
                    mode,
                )
            })?;
            unsafe { libc::close(fd) };
            let (inode, _) = self.made_entry(req, &parent, name)?;
            let (number, fopen) = self.open_file(
                &inode,
                flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC),
            )?;
            let stat = sys::fstat(inode.fd())?;
            Ok((inode, stat, number, fopen))
        })();
        match result {
            Ok((inode, stat, number, fopen)) => reply.created(
                &self.ttl,
                &attr_of(inode.fuse_ino, &stat),
                Generation(0),
                FileHandle(number),
                fopen,
            ),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let result = self.handle(fh).and_then(|handle| {
            // SAFETY: a valid descriptor.
            check(unsafe {
                libc::fallocate(handle.file.as_raw_fd(), mode, offset as i64, length as i64)
            })?;
            if let Some(cache) = &self.cache {
                cache.restamp(&handle.inode.state);
                cache.invalidate(&handle.inode.state, offset, length, None);
            }
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(code) => reply.error(self.failed(code)),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let result = self.handle(fh).and_then(|handle| {
            // SAFETY: a valid descriptor.
            let at = unsafe { libc::lseek(handle.file.as_raw_fd(), offset, whence) };
            if at < 0 {
                Err(sys::errno())
            } else {
                Ok(at)
            }
        });
        match result {
            Ok(at) => reply.offset(at),
            Err(code) => reply.error(errno(code)),
        }
    }
}

impl Passthrough {
    fn remove(&self, parent: INodeNo, name: &OsStr, flags: i32, reply: ReplyEmpty) {
        let result = self.inodes.get(parent.0).and_then(|parent| {
            let cname = cstring(name)?;
            // SAFETY: a valid C string.
            check(unsafe { libc::unlinkat(parent.fd(), cname.as_ptr(), flags) })
        });
        match result {
            Ok(_) => reply.ok(),
            Err(code) => reply.error(self.failed(code)),
        }
    }
}
