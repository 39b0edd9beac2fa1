//! A transaction's queued writes: each command with its arguments, the arguments back to back in one
//! buffer. A write costs no allocation of its own, and the connection keeps the buffers for its next
//! transaction (`Spare`).
use crate::command::info::CommandInfo;
use crate::txn::LockKey;
use std::ops::Range;

/// The writes a transaction queued, in order.
#[derive(Default)]
pub struct QueuedWrites {
    /// Every argument of every write, back to back.
    bytes: Vec<u8>,
    /// Each argument's end in `bytes`.
    arg_ends: Vec<usize>,
    /// Each write: its command (looked up once, at dispatch) and the end of its arguments in `arg_ends`.
    writes: Vec<(&'static CommandInfo, usize)>,
}

impl QueuedWrites {
    pub fn push(&mut self, spec: &'static CommandInfo, args: &[&[u8]]) {
        for arg in args {
            self.bytes.extend_from_slice(arg);
            self.arg_ends.push(self.bytes.len());
        }
        self.writes.push((spec, self.arg_ends.len()));
    }

    pub fn len(&self) -> usize {
        self.writes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Bytes of all queued arguments.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Every queued argument, in order; `writes` gives each write's range of them.
    pub fn args(&self) -> Vec<&[u8]> {
        let starts = std::iter::once(0).chain(self.arg_ends.iter().copied());
        starts
            .zip(&self.arg_ends)
            .map(|(start, &end)| &self.bytes[start..end])
            .collect()
    }

    /// Each write's command and the range of its arguments in `args()`.
    pub fn writes(&self) -> impl Iterator<Item = (&'static CommandInfo, Range<usize>)> + '_ {
        let starts = std::iter::once(0).chain(self.writes.iter().map(|&(_, end)| end));
        starts
            .zip(&self.writes)
            .map(|(start, &(spec, end))| (spec, start..end))
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.arg_ends.clear();
        self.writes.clear();
    }

    fn capacity_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.arg_ends.capacity() * size_of::<usize>()
            + self.writes.capacity() * size_of::<(&CommandInfo, usize)>()
    }
}

/// Most bytes of buffers a connection keeps between transactions; a bigger transaction's are freed.
pub const SPARE_BYTES_MAX: usize = 64 << 10;

/// A finished transaction's buffers, emptied, kept by its connection for the next TXN.BEGIN.
#[derive(Default)]
pub struct Spare {
    pub held: Vec<LockKey>,
    pub writes: QueuedWrites,
}

impl Spare {
    /// Empties the buffers and keeps them, unless they grew past `SPARE_BYTES_MAX`.
    pub fn recycle(mut held: Vec<LockKey>, mut writes: QueuedWrites) -> Spare {
        held.clear();
        writes.clear();
        let bytes = held.capacity() * size_of::<LockKey>() + writes.capacity_bytes();
        if bytes > SPARE_BYTES_MAX {
            return Spare::default();
        }
        Spare { held, writes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::info::lookup;

    #[test]
    fn writes_come_back_with_their_own_arguments() {
        let (_, sadd) = lookup(b"sadd").expect("known");
        let (_, set) = lookup(b"set").expect("known");
        let mut queued = QueuedWrites::default();
        queued.push(sadd, &[b"sadd", b"s", b"x", b"y"]);
        queued.push(set, &[b"set", b"k", b""]);
        assert_eq!((queued.len(), queued.bytes()), (2, 11));
        let args = queued.args();
        let writes: Vec<_> = queued.writes().collect();
        assert_eq!(writes[0].0.name, "sadd");
        assert_eq!(args[writes[0].1.clone()], [&b"sadd"[..], b"s", b"x", b"y"]);
        assert_eq!(args[writes[1].1.clone()], [&b"set"[..], b"k", b""]);
    }

    #[test]
    fn spare_buffers_are_empty_and_big_ones_are_dropped() {
        let (_, set) = lookup(b"set").expect("known");
        let mut queued = QueuedWrites::default();
        queued.push(set, &[b"set", b"k", b"v"]);
        let spare = Spare::recycle(vec![(0, b"k"[..].into())], queued);
        assert!(spare.held.is_empty() && spare.writes.is_empty() && spare.writes.bytes() == 0);
        assert!(spare.held.capacity() > 0, "kept for the next transaction");
        let mut big = QueuedWrites::default();
        big.push(set, &[b"set", b"k", &vec![b'v'; SPARE_BYTES_MAX]]);
        assert_eq!(Spare::recycle(Vec::new(), big).writes.capacity_bytes(), 0);
    }
}
