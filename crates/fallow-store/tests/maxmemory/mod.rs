//! The memory cap holds per write: `would_exceed_maxmemory` tells a write its known growth would pass the
//! limit before it allocates, and `make_room_for` evicts (as the policy allows) until that growth fits.
use fallow_store::{now_ms, EvictionPolicy, Store, StoreConfig};

const MIB: usize = 1 << 20;

fn store(policy: EvictionPolicy) -> Store {
    Store::new(&StoreConfig {
        shards: 2,
        maxmemory_bytes: 4 * MIB,
        policy,
        ..StoreConfig::default()
    })
}

fn fill(store: &Store, count: usize, value: &[u8]) {
    for index in 0..count {
        let key = format!("k{index}").into_bytes();
        let mut guards = store.lock_key(&key);
        guards
            .shard(&key)
            .set_string(0, &key, value, 0, 0, now_ms());
    }
}

#[test]
fn growth_past_the_cap_is_seen_before_allocating() {
    let store = store(EvictionPolicy::NoEviction);
    fill(&store, 2000, &[1u8; 1000]); // ~2 MB
    let used = store.used_bytes();
    assert!(used < 4 * MIB && !store.over_maxmemory());
    assert!(!store.would_exceed_maxmemory(4 * MIB - used));
    assert!(store.would_exceed_maxmemory(4 * MIB - used + 1));
    assert!(store.exceeds_memory_limit_alone(4 * MIB + 1));
    let mut guards = store.lock_key(b"new");
    assert!(
        guards.make_room_for(3 * MIB).is_err(),
        "noeviction evicts nothing"
    );
    assert_eq!(store.used_bytes(), used);
    assert!(guards.make_room_for(MIB).is_ok(), "fits without evicting");
    store.set_maxmemory_bytes(0);
    assert!(
        !store.would_exceed_maxmemory(usize::MAX),
        "no limit, no refusal"
    );
}

#[test]
fn eviction_makes_room_for_the_growth_unless_it_can_never_fit() {
    let store = store(EvictionPolicy::AllKeysRandom);
    fill(&store, 3000, &[1u8; 1000]); // ~3 MB
    let used_before = store.used_bytes();
    let mut guards = store.lock_key(b"new");
    assert!(
        guards.make_room_for(5 * MIB).is_err(),
        "larger than the whole cap"
    );
    assert_eq!(
        store.used_bytes(),
        used_before,
        "and nothing was evicted for it"
    );
    guards.make_room_for(2 * MIB).unwrap();
    assert!(store.used_bytes() + 2 * MIB <= 4 * MIB);
    assert!(store.used_bytes() < used_before);
}
