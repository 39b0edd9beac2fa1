//! Hash (field → value). An insertion-ordered index map, so HRANDFIELD and HSCAN can address fields by
//! position in O(1).
use super::element_bytes;
use indexmap::IndexMap;

type Map = IndexMap<Box<[u8]>, Box<[u8]>, foldhash::fast::RandomState>;

#[derive(Clone, Debug, Default)]
pub struct HashValue {
    map: Map,
    bytes: usize,
}

const ENTRY_OVERHEAD_BYTES: usize = 24;

fn pair_bytes(field: &[u8], value: &[u8]) -> usize {
    element_bytes(field.len()) + element_bytes(value.len()) + ENTRY_OVERHEAD_BYTES
}

impl HashValue {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.map.capacity() * 8
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.map.get(field).map(|value| &**value)
    }

    /// Sets a field; true when the field is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        self.bytes += pair_bytes(field, value);
        match self.map.insert(field.into(), value.into()) {
            Some(old) => {
                self.bytes -= pair_bytes(field, &old);
                false
            }
            None => true,
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self.map.swap_remove(field) {
            Some(old) => {
                self.bytes -= pair_bytes(field, &old);
                true
            }
            None => false,
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        self.map.iter().map(|(field, value)| (&**field, &**value))
    }

    /// The field and value at `index` (0..len), for random picks and cursors.
    pub fn get_index(&self, index: usize) -> Option<(&[u8], &[u8])> {
        self.map
            .get_index(index)
            .map(|(field, value)| (&**field, &**value))
    }
}
