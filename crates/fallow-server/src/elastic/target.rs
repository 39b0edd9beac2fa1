//! The pool-target arithmetic, kept pure so it is tested on its own:
//! desired = max(floor, clamp(resident + available − reserve, min, max)), max 0 = host total, min ≤ max;
//! the next target takes the desired one at once when it is lower by more than the dead band (shrink) and
//! approaches it by at most grow-rate × elapsed when it is higher (grow).
use std::time::Duration;

/// Shrinks smaller than this wait until the gap is larger (MemAvailable moves by a few hundred KiB between
/// polls; reacting to that would release a segment per poll). Also the excess a full pool may carry
/// before the controller reclaims instead of leaving it to the writes' make-room.
pub const DEAD_BAND_BYTES: u64 = 4 << 20;

/// What the desired target depends on, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetInputs {
    pub pool_resident_bytes: u64,
    pub host_available_bytes: u64,
    pub host_total_bytes: u64,
    pub reserve_bytes: u64,
    pub min_bytes: u64,
    /// 0 = the host's total.
    pub max_bytes: u64,
    /// Persistent bytes: a target below them could only be met by dropping persistent data.
    pub floor_bytes: u64,
}

/// The effective (min, max) bounds: max 0 means the host total, and min never exceeds max.
pub fn bounds(inputs: &TargetInputs) -> (u64, u64) {
    let max = if inputs.max_bytes == 0 {
        inputs.host_total_bytes
    } else {
        inputs.max_bytes
    };
    (inputs.min_bytes.min(max), max)
}

/// Where the pool should be now, ignoring the grow rate.
pub fn desired_target(inputs: &TargetInputs) -> u64 {
    let (min, max) = bounds(inputs);
    let room = inputs
        .pool_resident_bytes
        .saturating_add(inputs.host_available_bytes)
        .saturating_sub(inputs.reserve_bytes);
    room.clamp(min, max).max(inputs.floor_bytes)
}

/// The target after a step: the desired one at once when lower by more than `DEAD_BAND_BYTES` (or on the
/// first step), the previous one when lower by less, else the previous one grown by at most
/// `grow_bytes_per_sec` × `elapsed`.
pub fn next_target(
    previous: Option<u64>,
    desired: u64,
    grow_bytes_per_sec: u64,
    elapsed: Duration,
) -> u64 {
    match previous {
        Some(previous) if desired > previous => {
            let step = (grow_bytes_per_sec as f64 * elapsed.as_secs_f64()) as u64;
            desired.min(previous.saturating_add(step))
        }
        Some(previous) if previous - desired <= DEAD_BAND_BYTES => previous,
        _ => desired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    fn inputs() -> TargetInputs {
        TargetInputs {
            pool_resident_bytes: 2 * GB,
            host_available_bytes: 6 * GB,
            host_total_bytes: 16 * GB,
            reserve_bytes: GB,
            ..TargetInputs::default()
        }
    }

    #[test]
    fn pool_plus_available_minus_reserve() {
        assert_eq!(desired_target(&inputs()), 7 * GB);
        // Reserve larger than everything: nothing left but min.
        let starved = TargetInputs {
            reserve_bytes: 20 * GB,
            min_bytes: GB / 2,
            ..inputs()
        };
        assert_eq!(desired_target(&starved), GB / 2);
    }

    #[test]
    fn clamped_to_min_and_max() {
        let capped = TargetInputs {
            max_bytes: 3 * GB,
            ..inputs()
        };
        assert_eq!(desired_target(&capped), 3 * GB);
        let raised = TargetInputs {
            min_bytes: 10 * GB,
            ..inputs()
        };
        assert_eq!(desired_target(&raised), 10 * GB);
        // max 0 = host total; min above max is cut to max.
        let whole_host = TargetInputs {
            host_available_bytes: 100 * GB,
            min_bytes: 40 * GB,
            ..inputs()
        };
        assert_eq!(bounds(&whole_host), (16 * GB, 16 * GB));
        assert_eq!(desired_target(&whole_host), 16 * GB);
    }

    #[test]
    fn reserve_as_percent_of_total() {
        let reserve = crate::elastic::settings::Reserve::Percent(25.0);
        let quarter = TargetInputs {
            reserve_bytes: reserve.bytes_of(16 * GB),
            ..inputs()
        };
        assert_eq!(desired_target(&quarter), 4 * GB);
    }

    #[test]
    fn never_below_the_persistent_floor() {
        let floored = TargetInputs {
            host_available_bytes: 0,
            reserve_bytes: 4 * GB,
            max_bytes: GB,
            floor_bytes: 3 * GB,
            ..inputs()
        };
        assert_eq!(desired_target(&floored), 3 * GB);
    }

    #[test]
    fn shrink_is_immediate() {
        let elapsed = Duration::from_millis(1);
        assert_eq!(next_target(Some(8 * GB), GB, 1, elapsed), GB);
        assert_eq!(next_target(None, 5 * GB, 1, elapsed), 5 * GB, "first step");
        assert_eq!(
            next_target(Some(GB), GB - DEAD_BAND_BYTES, 1, elapsed),
            GB,
            "noise inside the dead band is ignored"
        );
        assert_eq!(
            next_target(Some(GB), GB - DEAD_BAND_BYTES - 1, 1, elapsed),
            GB - DEAD_BAND_BYTES - 1
        );
    }

    #[test]
    fn grow_is_rate_limited() {
        let rate = 256 << 20;
        let half_second = Duration::from_millis(500);
        assert_eq!(
            next_target(Some(GB), 4 * GB, rate, half_second),
            GB + (128 << 20)
        );
        // Close to the desired target it stops there.
        assert_eq!(next_target(Some(GB), GB + 1, rate, half_second), GB + 1);
        // Repeated steps converge at the rate.
        let mut target = GB;
        for _ in 0..40 {
            target = next_target(Some(target), 4 * GB, rate, Duration::from_millis(100));
        }
        assert_eq!(target, GB + 40 * (rate / 10));
    }
}
