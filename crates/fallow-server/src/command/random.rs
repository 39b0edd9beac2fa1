//! Count arguments of the random-member commands (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER). Which elements
//! a count picks is the store's (`fallow_store::types::pick_indexes`, through each type's
//! `random_members`/`random_fields`). A leaf beside the families: any of them may use it without
//! depending on another family.
use super::{parse_int, NOT_INTEGER};

/// Most picks a negative count may ask for (HRANDFIELD, SRANDMEMBER): each pick is a reply element, and
/// Redis would try to build any size of reply. 16M elements is already hundreds of MB of output.
pub const RANDOM_PICKS_MAX: u64 = 1 << 24;

pub const OUT_OF_RANGE: &str = "ERR value is out of range";

/// Parses the count of HRANDFIELD/SRANDMEMBER: an integer in [-i64::MAX, i64::MAX] whose magnitude is
/// at most RANDOM_PICKS_MAX when negative.
pub fn parse_random_count(arg: &[u8]) -> Result<i64, &'static str> {
    let count = parse_int(arg).ok_or(NOT_INTEGER)?;
    if count == i64::MIN {
        return Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807");
    }
    if count < 0 && count.unsigned_abs() > RANDOM_PICKS_MAX {
        return Err(OUT_OF_RANGE);
    }
    Ok(count)
}

/// Parses the count of ZRANDMEMBER: any integer but i64::MIN (no bound on picks, unlike
/// `parse_random_count`; its error for i64::MIN is worded differently too).
pub fn parse_zrandmember_count(arg: &[u8]) -> Result<i64, &'static str> {
    match parse_int(arg) {
        None => Err(NOT_INTEGER),
        Some(i64::MIN) => Err(OUT_OF_RANGE),
        Some(count) => Ok(count),
    }
}

/// Checks a count whose picks come in pairs (WITHVALUES, WITHSCORES): Redis refuses counts whose doubled
/// reply length would overflow.
pub fn check_paired_count(count: i64) -> Result<i64, &'static str> {
    if count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return Err(OUT_OF_RANGE);
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_counts_are_bounded() {
        assert_eq!(parse_random_count(b"-3"), Ok(-3));
        assert_eq!(parse_random_count(b"9223372036854775807"), Ok(i64::MAX));
        assert!(parse_random_count(b"-9223372036854775808")
            .unwrap_err()
            .contains("must between"));
        assert_eq!(
            parse_random_count(b"-99999999"),
            Err("ERR value is out of range")
        );
        assert_eq!(parse_random_count(b"x"), Err(NOT_INTEGER));
    }

    #[test]
    fn zrandmember_counts_and_pairs() {
        assert_eq!(parse_zrandmember_count(b"-99999999"), Ok(-99999999));
        assert_eq!(
            parse_zrandmember_count(b"-9223372036854775808"),
            Err(OUT_OF_RANGE)
        );
        assert_eq!(parse_zrandmember_count(b"1.5"), Err(NOT_INTEGER));
        assert_eq!(check_paired_count(i64::MAX / 2), Ok(i64::MAX / 2));
        assert_eq!(check_paired_count(-(i64::MAX / 2) - 1), Err(OUT_OF_RANGE));
    }
}
