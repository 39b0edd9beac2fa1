//! STREAM-like memory bandwidth: copy (`c = a`) and triad (`a = b + s·c`) over arrays far larger than the
//! last-level cache, best of N trials, on one thread and on all threads.
//!
//! Bytes are counted the STREAM way: copy moves 2 × array bytes (read + write), triad 3 ×. A `memcpy` of B
//! bytes therefore costs 2B of the copy figure (see `MemoryCalibration::memcpy_bytes_per_sec`).
use std::hint::black_box;
use std::time::Instant;

/// Fallback when sysfs says nothing about caches.
pub const FALLBACK_LLC_BYTES: u64 = 32 << 20;
/// Arrays are at least this many times the last-level cache, so every pass goes to DRAM.
const LLC_MULTIPLE: u64 = 4;

/// One kernel's best times, for a thread count.
pub struct StreamResult {
    pub copy_bytes_per_sec: f64,
    pub triad_bytes_per_sec: f64,
}

/// The largest cache of cpu0 (the highest `level` under /sys/devices/system/cpu/cpu0/cache), or None.
pub fn last_level_cache_bytes() -> Option<u64> {
    let entries = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, u64)> = None;
    for entry in entries.flatten() {
        let dir = entry.path();
        let level = std::fs::read_to_string(dir.join("level"))
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        let size = std::fs::read_to_string(dir.join("size"))
            .ok()
            .and_then(|text| parse_cache_size(&text));
        if let (Some(level), Some(size)) = (level, size) {
            best = best.max(Some((level, size)));
        }
    }
    best.map(|(_, size)| size)
}

/// sysfs cache sizes: `36608K`, `1M`, or plain bytes.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, multiplier) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 1024),
        'M' | 'm' => (&text[..text.len() - 1], 1024 * 1024),
        'G' | 'g' => (&text[..text.len() - 1], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .map(|value| value * multiplier)
}

/// Array size for a cache: 4 × LLC, rounded up to whole MiB.
pub fn array_bytes_for(llc_bytes: u64) -> u64 {
    (llc_bytes * LLC_MULTIPLE).div_ceil(1 << 20) << 20
}

/// Runs copy and triad `trials` times each (values grow by 3× per trial: fine for any sane trial count) over three arrays of `array_bytes`, split across `threads`
/// threads, and keeps the best (shortest) time of each.
pub fn measure(array_bytes: u64, threads: usize, trials: u32) -> StreamResult {
    assert!(threads > 0, "a measurement runs on at least one thread");
    let elements = (array_bytes / 8).max(threads as u64) as usize;
    let mut a = vec![1.0f64; elements];
    let b = vec![2.0f64; elements];
    let mut c = vec![0.5f64; elements];
    let mut best_copy_s = f64::INFINITY;
    let mut best_triad_s = f64::INFINITY;
    for _ in 0..trials.max(1) {
        best_copy_s = best_copy_s.min(timed(|| copy_kernel(&a, &mut c, threads)));
        best_triad_s = best_triad_s.min(timed(|| triad_kernel(&mut a, &b, &c, threads)));
    }
    let bytes = (elements * 8) as f64;
    let result = StreamResult {
        copy_bytes_per_sec: 2.0 * bytes / best_copy_s,
        triad_bytes_per_sec: 3.0 * bytes / best_triad_s,
    };
    for rate in [result.copy_bytes_per_sec, result.triad_bytes_per_sec] {
        assert!(
            rate.is_finite() && rate > 0.0,
            "a calibrated rate is positive and finite: {rate} B/s"
        );
    }
    result
}

fn timed(kernel: impl FnOnce()) -> f64 {
    let start = Instant::now();
    kernel();
    start.elapsed().as_secs_f64().max(1e-9)
}

fn chunk_len(elements: usize, threads: usize) -> usize {
    elements.div_ceil(threads.max(1))
}

/// `c = a`, one contiguous chunk per thread.
fn copy_kernel(a: &[f64], c: &mut [f64], threads: usize) {
    // the threaded copy zips chunks, which would skip a longer array's tail and overstate the bandwidth
    assert_eq!(a.len(), c.len(), "copy runs over two arrays of one length");
    if threads <= 1 {
        c.copy_from_slice(a);
        black_box(c);
        return;
    }
    let chunk = chunk_len(a.len(), threads);
    std::thread::scope(|scope| {
        for (source, target) in a.chunks(chunk).zip(c.chunks_mut(chunk)) {
            scope.spawn(move || {
                target.copy_from_slice(source);
                black_box(target);
            });
        }
    });
}

/// `a = b + s·c`, one contiguous chunk per thread.
fn triad_kernel(a: &mut [f64], b: &[f64], c: &[f64], threads: usize) {
    const SCALAR: f64 = 3.0;
    // the loop zips the arrays, which would skip a longer array's tail and overstate the bandwidth
    assert!(
        a.len() == b.len() && b.len() == c.len(),
        "triad runs over three arrays of one length: {}, {}, {}",
        a.len(),
        b.len(),
        c.len()
    );
    let triad = |a: &mut [f64], b: &[f64], c: &[f64]| {
        for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
            *x = y + SCALAR * z;
        }
        black_box(a);
    };
    if threads <= 1 {
        triad(a, b, c);
        return;
    }
    let chunk = chunk_len(a.len(), threads);
    std::thread::scope(|scope| {
        for ((a, b), c) in a
            .chunks_mut(chunk)
            .zip(b.chunks(chunk))
            .zip(c.chunks(chunk))
        {
            scope.spawn(move || triad(a, b, c));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("36608K\n"), Some(36608 * 1024));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("big"), None);
    }

    #[test]
    fn arrays_are_four_times_the_cache() {
        assert_eq!(array_bytes_for(36608 * 1024), 143 << 20);
        assert_eq!(array_bytes_for(FALLBACK_LLC_BYTES), 128 << 20);
    }

    #[test]
    fn small_arrays_give_positive_bandwidths() {
        for threads in [1, 2] {
            let result = measure(1 << 20, threads, 2);
            assert!(
                result.copy_bytes_per_sec > 1e6,
                "copy {}",
                result.copy_bytes_per_sec
            );
            assert!(
                result.triad_bytes_per_sec > 1e6,
                "triad {}",
                result.triad_bytes_per_sec
            );
        }
    }

    #[test]
    #[should_panic(expected = "triad runs over three arrays of one length")]
    fn triad_over_arrays_of_different_lengths_panics() {
        let mut a = vec![0.0; 8];
        triad_kernel(&mut a, &[1.0; 8], &[1.0; 4], 2);
    }

    #[test]
    #[should_panic(expected = "copy runs over two arrays of one length")]
    fn copy_into_a_shorter_array_panics() {
        let mut c = vec![0.0; 4];
        copy_kernel(&[1.0; 8], &mut c, 2);
    }

    #[test]
    #[should_panic(expected = "a measurement runs on at least one thread")]
    fn measuring_on_no_threads_panics() {
        measure(1 << 20, 0, 1);
    }
}
