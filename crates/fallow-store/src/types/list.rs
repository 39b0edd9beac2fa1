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

    /// Removes up to `count` items equal to `item` (LREM): from the head when `count > 0`, from the
    /// tail when `count < 0`, all of them when 0. Returns how many were removed.
    pub fn remove_matching(&mut self, item: &[u8], count: i64) -> usize {
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs().min(usize::MAX as u64) as usize
        };
        let matching = |(_, candidate): &(usize, &[u8])| *candidate == item;
        let doomed: std::collections::HashSet<usize> = if count >= 0 {
            self.iter()
                .enumerate()
                .filter(matching)
                .take(limit)
                .map(|(index, _)| index)
                .collect()
        } else {
            self.iter()
                .enumerate()
                .rev()
                .filter(matching)
                .take(limit)
                .map(|(index, _)| index)
                .collect()
        };
        if doomed.is_empty() {
            return 0;
        }
        let mut index = 0;
        self.items.retain(|_| {
            index += 1;
            !doomed.contains(&(index - 1))
        });
        self.bytes -= doomed.len() * element_bytes(item.len());
        doomed.len()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.items.iter().map(|item| &**item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> ListValue {
        let mut list = ListValue::default();
        for item in items {
            list.push_back(item.as_bytes());
        }
        list
    }

    fn contents(list: &ListValue) -> Vec<&[u8]> {
        list.iter().collect()
    }

    #[test]
    fn remove_matching_by_direction() {
        let mut from_head = list(&["a", "b", "a", "c", "a"]);
        assert_eq!(from_head.remove_matching(b"a", 2), 2);
        assert_eq!(contents(&from_head), vec![&b"b"[..], b"c", b"a"]);
        let mut from_tail = list(&["a", "b", "a", "c", "a"]);
        assert_eq!(from_tail.remove_matching(b"a", -2), 2);
        assert_eq!(contents(&from_tail), vec![&b"a"[..], b"b", b"c"]);
        let mut all = list(&["a", "b", "a"]);
        assert_eq!(all.remove_matching(b"a", 0), 2);
        assert_eq!(all.remove_matching(b"zz", 0), 0);
        assert_eq!(contents(&all), vec![&b"b"[..]]);
    }

    #[test]
    fn bytes_track_contents() {
        let mut items = list(&["a", "bb", "a"]);
        items.remove_matching(b"a", 0);
        let fresh = list(&["bb"]);
        assert_eq!(items.bytes, fresh.bytes);
        items.retain_range(0, 0);
        assert_eq!(items.bytes, 0);
    }
}
