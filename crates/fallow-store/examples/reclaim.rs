//! Fills a store with 50 KB values and times one reclaim, reading VmRSS before and after:
//! `cargo run --release -p fallow-store --example reclaim -- <fill MiB> <release MiB> careful|fast
//! [value bytes, default 50000]`.
use fallow_model::calibrate::machine::kib_field_bytes;
use fallow_store::{now_ms, ReclaimPath, Store, StoreConfig};

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    kib_field_bytes(&status, "VmRSS").unwrap_or(0) as usize
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let fill_mib: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let release_mib: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(512);
    let path = match args.get(3).map(String::as_str) {
        Some("careful") => ReclaimPath::Careful,
        _ => ReclaimPath::Fast,
    };
    let store = Store::new(&StoreConfig {
        shards: 8,
        ..StoreConfig::default()
    });
    let value_bytes: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let value = vec![0x5au8; value_bytes];
    let count = fill_mib * (1 << 20) / value_bytes;
    let started = std::time::Instant::now();
    for index in 0..count {
        let key = format!("object:{index}");
        let mut guards = store.lock_key(key.as_bytes());
        guards
            .shard(key.as_bytes())
            .set_string(0, key.as_bytes(), &value, 0, 0, now_ms());
    }
    let rss_before = rss_bytes();
    println!(
        "filled {count} objects in {:.1} s; resident {} MiB, VmRSS {} MiB",
        started.elapsed().as_secs_f64(),
        store.resident_bytes() >> 20,
        rss_before >> 20
    );
    // FALLOW_RECLAIM_PAUSE_S lets a profiler attach between the fill and the reclaim.
    if let Some(pause_s) = std::env::var("FALLOW_RECLAIM_PAUSE_S")
        .ok()
        .and_then(|text| text.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_secs(pause_s));
    }
    let report = store.reclaim(release_mib << 20, path);
    let rss_after = rss_bytes();
    println!(
        "{} release of {release_mib} MiB: {} MiB in {:.1} ms, {} objects, longest lock hold {} µs; \
         VmRSS fell {} MiB",
        path.name(),
        report.released_bytes >> 20,
        report.duration.as_secs_f64() * 1e3,
        report.objects,
        report.longest_hold.as_micros(),
        rss_before.saturating_sub(rss_after) >> 20
    );
}
