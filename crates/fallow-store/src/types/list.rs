//! List of byte strings: a ring buffer, O(1) at both ends.
use super::element_bytes;
use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub struct ListValue {
    items: VecDeque<Box<[u8]>>,
    bytes: usize,
}

impl ListValue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.items.capacity() * 16
    }

    pub fn push_front(&mut self, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.push_front(item.into());
    }

    pub fn push_back(&mut self, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.push_back(item.into());
    }

    pub fn pop_front(&mut self) -> Option<Box<[u8]>> {
        let item = self.items.pop_front()?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    pub fn pop_back(&mut self) -> Option<Box<[u8]>> {
        let item = self.items.pop_back()?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    pub fn get(&self, index: usize) -> Option<&[u8]> {
        self.items.get(index).map(|item| &**item)
    }

    pub fn set(&mut self, index: usize, item: &[u8]) -> bool {
        let Some(slot) = self.items.get_mut(index) else {
            return false;
        };
        self.bytes = self.bytes - element_bytes(slot.len()) + element_bytes(item.len());
        *slot = item.into();
        true
    }

    pub fn insert(&mut self, index: usize, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.insert(index, item.into());
    }

    pub fn remove(&mut self, index: usize) -> Option<Box<[u8]>> {
        let item = self.items.remove(index)?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    /// Keeps only `start..end` (already clamped by the caller).
    pub fn retain_range(&mut self, start: usize, end: usize) {
        assert!(start <= end && end <= self.items.len());
        self.items.truncate(end);
        self.items.drain(..start);
        self.bytes = self
            .items
            .iter()
            .map(|item| element_bytes(item.len()))
            .sum();
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.items.iter().map(|item| &**item)
    }
}
