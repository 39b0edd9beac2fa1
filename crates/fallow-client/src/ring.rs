//! Consistent hashing: each node owns `VIRTUAL_NODES_PER_NODE` points on a 64-bit ring and a key goes to
//! the first point at or after its hash. Adding a node to n moves about 1/(n+1) of the keys, all of them to
//! the new node; the points depend only on the node's name, so every client agrees without talking.
//!
//! A key with a hash tag (`{user1}:cart`, as in Redis Cluster) is placed by the tag alone, so keys that a
//! transaction or a multi-key command uses together can be kept on one node.

/// Points per node. More points spread keys more evenly (the spread shrinks as 1/sqrt(points)).
pub const VIRTUAL_NODES_PER_NODE: usize = 160;

#[derive(Clone, Debug)]
pub struct HashRing {
    /// (point, node index), sorted by point.
    points: Vec<(u64, usize)>,
}

impl HashRing {
    pub fn new(nodes: &[String]) -> HashRing {
        let mut points = Vec::with_capacity(nodes.len() * VIRTUAL_NODES_PER_NODE);
        for (index, name) in nodes.iter().enumerate() {
            for replica in 0..VIRTUAL_NODES_PER_NODE {
                let label = format!("{name}#{replica}");
                points.push((hash(label.as_bytes()), index));
            }
        }
        // Ties (two names hashing alike) go to the smaller index on every client.
        points.sort_unstable();
        HashRing { points }
    }

    /// The node of `key`; 0 when the ring is empty.
    pub fn node_for(&self, key: &[u8]) -> usize {
        if self.points.is_empty() {
            return 0;
        }
        let point = hash(hash_tag(key));
        let at = self.points.partition_point(|&(p, _)| p < point);
        self.points[at % self.points.len()].1
    }
}

/// The part of the key that is hashed: the text inside the first non-empty `{...}`, else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = memchr::memchr(b'{', key) else {
        return key;
    };
    match memchr::memchr(b'}', &key[open + 1..]) {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// FNV-1a, then the splitmix64 finaliser: FNV alone leaves similar keys (`key:1`, `key:2`) close on the ring.
fn hash(bytes: &[u8]) -> u64 {
    let mut state: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        state ^= byte as u64;
        state = state.wrapping_mul(0x0100_0000_01b3);
    }
    state ^= state >> 30;
    state = state.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    state ^= state >> 27;
    state = state.wrapping_mul(0x94d0_49bb_1331_11eb);
    state ^ (state >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("10.0.0.{i}:6379")).collect()
    }

    const KEYS: usize = 20_000;

    fn owners(ring: &HashRing) -> Vec<usize> {
        (0..KEYS)
            .map(|i| ring.node_for(format!("key:{i}").as_bytes()))
            .collect()
    }

    #[test]
    fn adding_a_node_moves_about_one_nth_of_the_keys_all_to_it() {
        for count in [2, 4, 8] {
            let before = owners(&HashRing::new(&nodes(count)));
            let after = owners(&HashRing::new(&nodes(count + 1)));
            let moved: Vec<_> = (0..KEYS).filter(|&i| before[i] != after[i]).collect();
            assert!(
                moved.iter().all(|&i| after[i] == count),
                "a key moved between old nodes"
            );
            let share = moved.len() as f64 / KEYS as f64;
            let ideal = 1.0 / (count + 1) as f64;
            assert!(
                (share - ideal).abs() < ideal * 0.35,
                "{count}->{}: moved {share:.3}, ideal {ideal:.3}",
                count + 1
            );
        }
    }

    /// The Python client (python/fallow/cluster.py) pins the same placements: both must route alike.
    #[test]
    fn placements_match_the_python_client() {
        let ring = HashRing::new(&nodes(3));
        let placed: Vec<usize> = (0..16)
            .map(|i| ring.node_for(format!("key:{i}").as_bytes()))
            .collect();
        assert_eq!(placed, [0, 1, 2, 0, 2, 0, 1, 2, 0, 2, 2, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn keys_spread_evenly() {
        let count = 4;
        let owned = owners(&HashRing::new(&nodes(count)));
        for node in 0..count {
            let share = owned.iter().filter(|&&n| n == node).count() as f64 / KEYS as f64;
            assert!((share - 0.25).abs() < 0.08, "node {node} owns {share:.3}");
        }
    }

    #[test]
    fn routing_is_stable_and_follows_hash_tags() {
        let ring = HashRing::new(&nodes(5));
        assert_eq!(
            ring.node_for(b"abc"),
            HashRing::new(&nodes(5)).node_for(b"abc")
        );
        for i in 0..100 {
            let a = format!("{{user{i}}}:cart");
            let b = format!("{{user{i}}}:orders");
            assert_eq!(ring.node_for(a.as_bytes()), ring.node_for(b.as_bytes()));
        }
        assert_eq!(hash_tag(b"{}x"), b"{}x");
        assert_eq!(hash_tag(b"a{b"), b"a{b");
        assert_eq!(HashRing::new(&[]).node_for(b"k"), 0);
    }
}
