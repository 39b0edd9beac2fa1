//! Set of byte strings. An index set, so SPOP and SRANDMEMBER pick a random member in O(1).
use super::element_bytes;
use indexmap::IndexSet;

type Members = IndexSet<Box<[u8]>, foldhash::fast::RandomState>;

#[derive(Clone, Debug, Default)]
pub struct SetValue {
    members: Members,
    bytes: usize,
}

const ENTRY_OVERHEAD_BYTES: usize = 16;

fn member_bytes(member: &[u8]) -> usize {
    element_bytes(member.len()) + ENTRY_OVERHEAD_BYTES
}

impl SetValue {
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.members.capacity() * 8
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.members.contains(member)
    }

    /// Adds a member; true when it was not there.
    pub fn insert(&mut self, member: &[u8]) -> bool {
        let added = self.members.insert(member.into());
        if added {
            self.bytes += member_bytes(member);
        }
        added
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        let removed = self.members.swap_remove(member);
        if removed {
            self.bytes -= member_bytes(member);
        }
        removed
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.members.iter().map(|member| &**member)
    }

    pub fn get_index(&self, index: usize) -> Option<&[u8]> {
        self.members.get_index(index).map(|member| &**member)
    }

    /// Gives back spare capacity (a set built by filtering a copy of a bigger one).
    pub fn shrink_to_fit(&mut self) {
        self.members.shrink_to_fit();
    }

    /// Removes and returns the member at `index`.
    pub fn remove_index(&mut self, index: usize) -> Option<Box<[u8]>> {
        let member = self.members.swap_remove_index(index)?;
        self.bytes -= member_bytes(&member);
        Some(member)
    }
}
