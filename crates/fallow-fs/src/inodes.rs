//! The inode table: FUSE inode numbers ↔ backing files, each held by an O_PATH descriptor (as libfuse's
//! passthrough_hp does), so renames and unlinks in the backing directory never confuse the mapping.
use crate::cache::FileState;
use crate::sys;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

pub const ROOT_INO: u64 = 1;

pub struct Inode {
    pub fuse_ino: u64,
    pub dev: u64,
    pub ino: u64,
    pub state: Arc<FileState>,
    /// Lookups the kernel holds (FUSE forget brings them back); the root is never forgotten.
    lookups: Mutex<u64>,
}

impl Inode {
    pub fn fd(&self) -> RawFd {
        self.state.opath.as_raw_fd()
    }
}

#[derive(Default)]
struct Table {
    by_fuse: HashMap<u64, Arc<Inode>>,
    by_backing: HashMap<(u64, u64), u64>,
    next: u64,
}

pub struct Inodes {
    table: Mutex<Table>,
}

impl Inodes {
    pub fn new(root: OwnedFd) -> Result<Inodes, i32> {
        let stat = sys::fstat(root.as_raw_fd())?;
        let inode = Arc::new(Inode {
            fuse_ino: ROOT_INO,
            dev: stat.st_dev,
            ino: stat.st_ino,
            state: Arc::new(FileState::new(root)),
            lookups: Mutex::new(1),
        });
        let mut table = Table {
            next: ROOT_INO + 1,
            ..Table::default()
        };
        table.by_backing.insert((inode.dev, inode.ino), ROOT_INO);
        table.by_fuse.insert(ROOT_INO, inode);
        Ok(Inodes {
            table: Mutex::new(table),
        })
    }

    pub fn get(&self, fuse_ino: u64) -> Result<Arc<Inode>, i32> {
        self.table
            .lock()
            .by_fuse
            .get(&fuse_ino)
            .cloned()
            .ok_or(libc::ESTALE)
    }

    /// Registers one kernel lookup of the file `opath` names (stat `stat`): the existing inode when the
    /// backing file is known (the new descriptor is dropped), else a new one.
    pub fn remember(&self, opath: OwnedFd, stat: &libc::stat) -> Arc<Inode> {
        let mut table = self.table.lock();
        if let Some(inode) = table
            .by_backing
            .get(&(stat.st_dev, stat.st_ino))
            .and_then(|fuse| table.by_fuse.get(fuse))
        {
            *inode.lookups.lock() += 1;
            return inode.clone();
        }
        let fuse_ino = table.next;
        table.next += 1;
        let inode = Arc::new(Inode {
            fuse_ino,
            dev: stat.st_dev,
            ino: stat.st_ino,
            state: Arc::new(FileState::new(opath)),
            lookups: Mutex::new(1),
        });
        table
            .by_backing
            .insert((stat.st_dev, stat.st_ino), fuse_ino);
        table.by_fuse.insert(fuse_ino, inode.clone());
        inode
    }

    /// The kernel dropped `count` lookups; the inode (and its descriptor) goes at zero.
    pub fn forget(&self, fuse_ino: u64, count: u64) {
        if fuse_ino == ROOT_INO {
            return;
        }
        let mut table = self.table.lock();
        let Some(inode) = table.by_fuse.get(&fuse_ino).cloned() else {
            return;
        };
        let mut lookups = inode.lookups.lock();
        *lookups = lookups.saturating_sub(count);
        if *lookups == 0 {
            table.by_fuse.remove(&fuse_ino);
            if table.by_backing.get(&(inode.dev, inode.ino)) == Some(&fuse_ino) {
                table.by_backing.remove(&(inode.dev, inode.ino));
            }
        }
    }

    /// Inodes with open files (the revalidation and record-flush ticks visit them).
    pub fn open_files(&self) -> Vec<Arc<Inode>> {
        let table = self.table.lock();
        table
            .by_fuse
            .values()
            .filter(|inode| {
                inode
                    .state
                    .open_handles
                    .load(std::sync::atomic::Ordering::Relaxed)
                    > 0
            })
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.table.lock().by_fuse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
