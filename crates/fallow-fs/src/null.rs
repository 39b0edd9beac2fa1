//! A null filesystem for benchmarks: one file, `null`, whose reads return zeros from memory. Reading it
//! through FUSE measures the FUSE round trip alone (the ceiling any FUSE cache can reach).
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry,
    ReplyOpen, Request,
};
use std::ffi::OsStr;
use std::time::{Duration, UNIX_EPOCH};

const FILE_INO: u64 = 2;
const TTL: Duration = Duration::from_secs(3600);
/// Largest read the kernel sends (max_pages of 1 MiB).
const READ_BYTES_MAX: usize = 1 << 20;

pub struct NullFs {
    size_bytes: u64,
    zeros: Vec<u8>,
    direct_io: bool,
}

impl NullFs {
    pub fn new(size_bytes: u64, direct_io: bool) -> NullFs {
        NullFs {
            size_bytes,
            zeros: vec![0; READ_BYTES_MAX],
            direct_io,
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let directory = ino != FILE_INO;
        FileAttr {
            ino: INodeNo(ino),
            size: if directory { 0 } else { self.size_bytes },
            blocks: self.size_bytes.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: if directory {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if directory { 0o755 } else { 0o444 },
            nlink: if directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == "null" {
            reply.entry(&TTL, &self.attr(FILE_INO), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.attr(&TTL, &self.attr(ino.0));
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let flags = if self.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        };
        reply.opened(FileHandle(0), flags);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let len = (size as usize)
            .min(READ_BYTES_MAX)
            .min(self.size_bytes.saturating_sub(offset) as usize);
        reply.data(&self.zeros[..len]);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = [
            (ino.0, FileType::Directory, "."),
            (ino.0, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, "null"),
        ];
        for (index, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), index as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
