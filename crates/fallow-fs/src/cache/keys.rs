//! The keys file data lives under in fallow, and the per-file record that says which blocks are valid.
//!
//! A block's key names the file's identity and the *epoch* its blocks belong to:
//!
//! ```text
//! block key:  'b' dev:u64 ino:u64 igen:u32 epoch:u64 block:u64      (37 bytes, big-endian)
//! file key:   'm' dev:u64 ino:u64 igen:u32                           (21 bytes)
//! file value: epoch:u64 size:u64 mtime_s:i64 mtime_ns:u32 ctime_s:i64 ctime_ns:u32   (40 bytes)
//! ```
//!
//! `igen` is the inode's generation (FS_IOC_GETVERSION; 0 where the backing has none), so a reused inode
//! number is another file. A file changed behind the mount gets a new random epoch: its old blocks become
//! unreachable at once (and are deleted in the background or evicted), so no stale block is ever served.
//! The file record lets a restarted `fallow fs` reuse the blocks of files unchanged since.

/// What identifies a backing file's contents at one moment (the close-to-open check compares these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stamp {
    pub size: u64,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    pub ctime_s: i64,
    pub ctime_ns: u32,
}

impl Stamp {
    pub fn of(stat: &libc::stat) -> Stamp {
        Stamp {
            size: stat.st_size as u64,
            mtime_s: stat.st_mtime,
            mtime_ns: stat.st_mtime_nsec as u32,
            ctime_s: stat.st_ctime,
            ctime_ns: stat.st_ctime_nsec as u32,
        }
    }
}

/// A backing file's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub igen: u32,
}

pub const BLOCK_KEY_BYTES: usize = 37;
pub const FILE_KEY_BYTES: usize = 21;
pub const FILE_VALUE_BYTES: usize = 40;

fn id_bytes(tag: u8, id: FileId, out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&id.dev.to_be_bytes());
    out.extend_from_slice(&id.ino.to_be_bytes());
    out.extend_from_slice(&id.igen.to_be_bytes());
}

pub fn block_key(id: FileId, epoch: u64, block: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(BLOCK_KEY_BYTES);
    id_bytes(b'b', id, &mut key);
    key.extend_from_slice(&epoch.to_be_bytes());
    key.extend_from_slice(&block.to_be_bytes());
    debug_assert_eq!(key.len(), BLOCK_KEY_BYTES);
    key
}

pub fn file_key(id: FileId) -> Vec<u8> {
    let mut key = Vec::with_capacity(FILE_KEY_BYTES);
    id_bytes(b'm', id, &mut key);
    key
}

pub fn file_value(epoch: u64, stamp: Stamp) -> Vec<u8> {
    let mut value = Vec::with_capacity(FILE_VALUE_BYTES);
    value.extend_from_slice(&epoch.to_be_bytes());
    value.extend_from_slice(&stamp.size.to_be_bytes());
    value.extend_from_slice(&stamp.mtime_s.to_be_bytes());
    value.extend_from_slice(&stamp.mtime_ns.to_be_bytes());
    value.extend_from_slice(&stamp.ctime_s.to_be_bytes());
    value.extend_from_slice(&stamp.ctime_ns.to_be_bytes());
    debug_assert_eq!(value.len(), FILE_VALUE_BYTES);
    value
}

/// The epoch and stamp a file record holds; None for anything that is not one (never trusted then).
pub fn parse_file_value(value: &[u8]) -> Option<(u64, Stamp)> {
    if value.len() != FILE_VALUE_BYTES {
        return None;
    }
    let u64_at = |at: usize| u64::from_be_bytes(value[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_be_bytes(value[at..at + 4].try_into().unwrap());
    let stamp = Stamp {
        size: u64_at(8),
        mtime_s: u64_at(16) as i64,
        mtime_ns: u32_at(24),
        ctime_s: u64_at(28) as i64,
        ctime_ns: u32_at(36),
    };
    Some((u64_at(0), stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_their_documented_sizes_and_differ_by_every_field() {
        let id = FileId {
            dev: 1,
            ino: 2,
            igen: 3,
        };
        let key = block_key(id, 4, 5);
        assert_eq!(key.len(), BLOCK_KEY_BYTES);
        assert_ne!(key, block_key(FileId { igen: 4, ..id }, 4, 5));
        assert_ne!(key, block_key(id, 5, 5));
        assert_ne!(key, block_key(id, 4, 6));
        assert_eq!(file_key(id).len(), FILE_KEY_BYTES);
        assert_ne!(&file_key(id)[..], &key[..FILE_KEY_BYTES]);
    }

    #[test]
    fn file_records_round_trip_and_bad_ones_are_refused() {
        let stamp = Stamp {
            size: 9,
            mtime_s: -1,
            mtime_ns: 999_999_999,
            ctime_s: 7,
            ctime_ns: 1,
        };
        assert_eq!(parse_file_value(&file_value(42, stamp)), Some((42, stamp)));
        assert_eq!(parse_file_value(b"short"), None);
    }
}
