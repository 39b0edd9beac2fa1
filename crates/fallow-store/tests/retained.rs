//! Dropped huge-page segments give their pages back at once (RSS falls) while their address range is kept
//! for the next segment of the same size; `unmap_retained` gives the ranges back too. Its own test binary:
//! the kept ranges are process-wide, so no other test may map or trim meanwhile.
use fallow_model::calibrate::machine::kib_field_bytes;
use fallow_store::memory::segment::{retained, ItemHeader, Segment, HUGE_PAGE_BYTES};

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    kib_field_bytes(&status, "VmRSS").expect("VmRSS") as usize
}

/// Fills a segment with items of `value_bytes` until it is full.
fn fill(segment: &mut Segment, value_bytes: usize) {
    let value = vec![0xa5u8; value_bytes];
    let header = ItemHeader::new(1, 0, 8, value_bytes);
    let mut index = 0u64;
    while segment
        .append(&header, &index.to_le_bytes(), &value)
        .is_some()
    {
        index += 1;
    }
}

#[test]
fn dropped_segments_leave_rss_and_their_ranges_are_reused_then_unmapped() {
    const BYTES: usize = 32 * HUGE_PAGE_BYTES;
    let before = rss_bytes();
    let mut segment = Segment::map(BYTES, 1).expect("mmap");
    fill(&mut segment, 60_000);
    let filled = rss_bytes();
    assert!(filled >= before + BYTES * 9 / 10, "{before} -> {filled}");

    drop(segment);
    assert_eq!(retained::retained_count(), 1, "the range is kept");
    let dropped = rss_bytes();
    assert!(
        dropped + BYTES * 9 / 10 <= filled,
        "RSS fell at once: {filled} -> {dropped}"
    );

    let mut reused = Segment::map(BYTES, 2).expect("mmap");
    assert_eq!(retained::retained_count(), 0, "the kept range was taken");
    assert_eq!(reused.used_bytes(), 0);
    fill(&mut reused, 60_000);
    let first = reused.first_offset().expect("filled");
    assert!(reused.value(first).iter().all(|&byte| byte == 0xa5));
    drop(reused);

    assert_eq!(retained::retained_count(), 1);
    assert_eq!(retained::unmap_retained(0), 1);
    assert_eq!(retained::retained_count(), 0);
}
