//! Geo positions in sorted sets (Redis's geo.c, geohash.c and geohash_helper.c, ported line for line so
//! scores, searches, distances and tie orders are Redis 7.0's). A position is a member's score: a 52-bit
//! geohash held exactly in the f64 (integers up to 2^53 are exact).
//!
//! The 52-bit layout: longitude and latitude are each scaled to 26-bit cell numbers over the Web Mercator
//! limits (longitude -180..180, latitude -85.05112878..85.05112878: offset / range * 2^26, truncated), then
//! interleaved bit by bit, latitude in the even bits (bit 0, 2, ... 50) and longitude in the odd ones (bit
//! 1, 3, ... 51). Bits 51..50 are the coarsest split (the longitude half, then the latitude half), so a
//! prefix of `2 * step` bits is the cell of that step and a cell's positions are one score range. A
//! position reads back as the center of its cell (about 0.6 m by 0.3 m at the equator).
//!
//! A search (GEOSEARCH, GEORADIUS) picks the step at which the shape fits about one cell, takes the cell of
//! the center and its 8 neighbours (dropping those outside the shape's bounding box), scans each one's score
//! range in order and keeps the points whose exact haversine distance (Earth radius 6372797.560856 m) puts
//! them inside the shape. The commands then sort by distance with Redis's two sorts (`redis_sort`).
use super::redis_sort::{merge_sort, partial_quicksort};
use super::zset::ZSetValue;
use std::cmp::Ordering;
use std::ops::Bound;

/// Bits per coordinate in a stored score: 26 * 2 = 52.
pub const STEP_MAX: u8 = 26;
pub const LONGITUDE_MIN_DEG: f64 = -180.0;
pub const LONGITUDE_MAX_DEG: f64 = 180.0;
/// The Web Mercator limits (EPSG:900913): positions at the poles cannot be indexed.
pub const LATITUDE_MIN_DEG: f64 = -85.05112878;
pub const LATITUDE_MAX_DEG: f64 = 85.05112878;
/// Earth's quadratic mean radius for WGS-84, as Redis uses it.
pub const EARTH_RADIUS_M: f64 = 6372797.560856;
const MERCATOR_MAX_M: f64 = 20037726.37;
/// Redis's `D_R` (M_PI / 180.0), the same double.
const RADIANS_PER_DEGREE: f64 = std::f64::consts::PI / 180.0;

/// A geohash of `step` bits per coordinate (interleaved in the low `2 * step` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashBits {
    pub bits: u64,
    pub step: u8,
}

impl HashBits {
    /// No cell: a neighbour dropped from a search.
    const ZERO: HashBits = HashBits { bits: 0, step: 0 };

    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The cell's bits moved to the top of 52 bits: the lowest score of its positions.
    pub fn aligned_52(self) -> u64 {
        self.bits << (52 - u32::from(self.step) * 2)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// The ranges scores are encoded over.
const LONGITUDE_RANGE: Range = Range {
    min: LONGITUDE_MIN_DEG,
    max: LONGITUDE_MAX_DEG,
};
const LATITUDE_RANGE: Range = Range {
    min: LATITUDE_MIN_DEG,
    max: LATITUDE_MAX_DEG,
};
/// The ranges of the standard geohash (GEOHASH's strings), whose latitudes reach the poles.
const STANDARD_LATITUDE_RANGE: Range = Range {
    min: -90.0,
    max: 90.0,
};

/// A cell: its hash and its bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    pub hash: HashBits,
    pub longitude: Range,
    pub latitude: Range,
}

/// Interleaves the low 32 bits of x (even bits) and y (odd bits).
fn interleave64(x: u32, y: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let spread = |mut value: u64| {
        for level in (0..5).rev() {
            value = (value | (value << S[level])) & B[level];
        }
        value
    };
    spread(u64::from(x)) | (spread(u64::from(y)) << 1)
}

/// The inverse of `interleave64`: x in the low 32 bits, y in the high ones.
fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let gather = |mut value: u64| {
        for level in 0..6 {
            value = (value | (value >> S[level])) & B[level];
        }
        value
    };
    gather(interleaved) | (gather(interleaved >> 1) << 32)
}

/// Whether a position is inside the limits a score can encode.
pub fn is_valid_position(longitude: f64, latitude: f64) -> bool {
    (LONGITUDE_MIN_DEG..=LONGITUDE_MAX_DEG).contains(&longitude)
        && (LATITUDE_MIN_DEG..=LATITUDE_MAX_DEG).contains(&latitude)
}

/// Redis's geohashEncode: the cell of `step` bits per coordinate holding the position, over the given
/// ranges. None outside the limits.
pub fn encode(
    longitude_range: Range,
    latitude_range: Range,
    longitude: f64,
    latitude: f64,
    step: u8,
) -> Option<HashBits> {
    if step == 0 || step > 32 || !is_valid_position(longitude, latitude) {
        return None;
    }
    if latitude < latitude_range.min
        || latitude > latitude_range.max
        || longitude < longitude_range.min
        || longitude > longitude_range.max
    {
        return None;
    }
    let cells = (1u64 << step) as f64;
    let latitude_offset =
        (latitude - latitude_range.min) / (latitude_range.max - latitude_range.min);
    let longitude_offset =
        (longitude - longitude_range.min) / (longitude_range.max - longitude_range.min);
    // C converts the scaled offsets to uint32_t by truncation, as `as` does for these in-range values.
    let bits = interleave64(
        (latitude_offset * cells) as u32,
        (longitude_offset * cells) as u32,
    );
    Some(HashBits { bits, step })
}

/// The cell of a position at full precision over the Web Mercator limits.
pub fn encode_wgs84(longitude: f64, latitude: f64, step: u8) -> Option<HashBits> {
    encode(LONGITUDE_RANGE, LATITUDE_RANGE, longitude, latitude, step)
}

/// Redis's geohashDecode: the bounds of a cell (None for the zero hash).
pub fn decode(longitude_range: Range, latitude_range: Range, hash: HashBits) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let separated = deinterleave64(hash.bits);
    let latitude_scale = latitude_range.max - latitude_range.min;
    let longitude_scale = longitude_range.max - longitude_range.min;
    let latitude_cell = separated as u32;
    let longitude_cell = (separated >> 32) as u32;
    let cells = (1u64 << hash.step) as f64;
    // `cell + 1` is uint32_t arithmetic in C: it wraps.
    let bound = |min: f64, scale: f64, cell: u32| min + (f64::from(cell) * 1.0 / cells) * scale;
    Some(Area {
        hash,
        latitude: Range {
            min: bound(latitude_range.min, latitude_scale, latitude_cell),
            max: bound(
                latitude_range.min,
                latitude_scale,
                latitude_cell.wrapping_add(1),
            ),
        },
        longitude: Range {
            min: bound(longitude_range.min, longitude_scale, longitude_cell),
            max: bound(
                longitude_range.min,
                longitude_scale,
                longitude_cell.wrapping_add(1),
            ),
        },
    })
}

fn decode_wgs84(hash: HashBits) -> Option<Area> {
    decode(LONGITUDE_RANGE, LATITUDE_RANGE, hash)
}

/// The center of a cell, clamped to the limits: (longitude, latitude).
fn center_of(area: &Area) -> (f64, f64) {
    let longitude = ((area.longitude.min + area.longitude.max) / 2.0)
        .clamp(LONGITUDE_MIN_DEG, LONGITUDE_MAX_DEG);
    let latitude =
        ((area.latitude.min + area.latitude.max) / 2.0).clamp(LATITUDE_MIN_DEG, LATITUDE_MAX_DEG);
    (longitude, latitude)
}

/// The bits C's `(uint64_t)` conversion of a double gives on x86-64 (what Redis does to any score before
/// decoding it): in-range values truncate; a negative one wraps as its two's complement; out-of-range
/// values, infinities and NaN give the processor's 2^63 "indefinite" value, or 0 past 2^64. Only scores
/// that GEOADD did not write can be such.
fn c_score_bits(score: f64) -> u64 {
    const TWO_POW_63: f64 = (1u64 << 63) as f64;
    // cvttsd2si: truncation, or 0x8000000000000000 when out of the i64 range or NaN.
    let convert = |value: f64| -> u64 {
        if value.is_nan() || !(-TWO_POW_63..TWO_POW_63).contains(&value) {
            1 << 63
        } else {
            value as i64 as u64
        }
    };
    // NaN takes the first branch: C's comparison is unordered, so it does not jump.
    if score.is_nan() || score < TWO_POW_63 {
        convert(score)
    } else {
        convert(score - TWO_POW_63) ^ (1 << 63)
    }
}

/// The position a score stands for: the center of its 52-bit cell, (longitude, latitude). Any score reads
/// as some position, as in Redis.
pub fn position_of_score(score: f64) -> (f64, f64) {
    let hash = HashBits {
        bits: c_score_bits(score),
        step: STEP_MAX,
    };
    let area = decode_wgs84(hash).expect("a full-precision hash is never zero");
    center_of(&area)
}

/// The score GEOADD stores for a position, None outside the limits.
pub fn score_of(longitude: f64, latitude: f64) -> Option<f64> {
    encode_wgs84(longitude, latitude, STEP_MAX).map(|hash| hash.aligned_52() as f64)
}

/// The 11-character standard geohash GEOHASH reports for a score: the position re-encoded over latitudes
/// -90..90 (Redis's scores use -85.05..85.05), 52 bits in 10 base-32 characters and a final '0'.
pub fn standard_geohash(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (longitude, latitude) = position_of_score(score);
    let hash = encode(
        LONGITUDE_RANGE,
        STANDARD_LATITUDE_RANGE,
        longitude,
        latitude,
        STEP_MAX,
    )
    .expect("a decoded position is inside the limits");
    let mut text = [b'0'; 11];
    for (index, character) in text.iter_mut().take(10).enumerate() {
        let shift = 52 - (index + 1) * 5;
        *character = ALPHABET[((hash.bits >> shift) & 0x1f) as usize];
    }
    text
}

// ----- neighbours -------------------------------------------------------------------------------------

fn move_x(hash: &mut HashBits, direction: i8) {
    move_along(hash, direction, 0xaaaaaaaaaaaaaaaa, 0x5555555555555555);
}

fn move_y(hash: &mut HashBits, direction: i8) {
    move_along(hash, direction, 0x5555555555555555, 0xaaaaaaaaaaaaaaaa);
}

/// One cell along an axis (Redis's `geohash_move_x`/`geohash_move_y`): the axis's interleaved bits
/// (`axis_mask`) are stepped by one, carrying over the other axis's bits (`other_mask`), which stay.
fn move_along(hash: &mut HashBits, direction: i8, axis_mask: u64, other_mask: u64) {
    if direction == 0 {
        return;
    }
    let width = 64 - u32::from(hash.step) * 2;
    let mut axis = hash.bits & axis_mask;
    let other = hash.bits & other_mask;
    let zz = other_mask >> width;
    if direction > 0 {
        axis = axis.wrapping_add(zz.wrapping_add(1));
    } else {
        axis |= zz;
        axis = axis.wrapping_sub(zz.wrapping_add(1));
    }
    axis &= axis_mask >> width;
    hash.bits = axis | other;
}

/// The 8 cells around one, of the same step (wrapping around the world's edges as Redis's do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbours {
    pub north: HashBits,
    pub east: HashBits,
    pub west: HashBits,
    pub south: HashBits,
    pub north_east: HashBits,
    pub south_east: HashBits,
    pub north_west: HashBits,
    pub south_west: HashBits,
}

pub fn neighbours(hash: HashBits) -> Neighbours {
    let moved = |dx: i8, dy: i8| {
        let mut cell = hash;
        move_x(&mut cell, dx);
        move_y(&mut cell, dy);
        cell
    };
    Neighbours {
        east: moved(1, 0),
        west: moved(-1, 0),
        south: moved(0, -1),
        north: moved(0, 1),
        north_west: moved(-1, 1),
        north_east: moved(1, 1),
        south_east: moved(1, -1),
        south_west: moved(-1, -1),
    }
}

// ----- distances --------------------------------------------------------------------------------------

fn radians(degrees: f64) -> f64 {
    degrees * RADIANS_PER_DEGREE
}

fn degrees(radians: f64) -> f64 {
    radians / RADIANS_PER_DEGREE
}

/// Distance along a meridian between two latitudes.
pub fn latitude_distance_m(latitude_1: f64, latitude_2: f64) -> f64 {
    EARTH_RADIUS_M * (radians(latitude_2) - radians(latitude_1)).abs()
}

/// Redis's geohashGetDistance: the haversine great-circle distance, evaluated in Redis's order of
/// operations (so equal inputs give bit-equal distances and ties sort as in Redis).
pub fn distance_m(longitude_1: f64, latitude_1: f64, longitude_2: f64, latitude_2: f64) -> f64 {
    let v = ((radians(longitude_2) - radians(longitude_1)) / 2.0).sin();
    // Same longitude: the distance along the meridian, without the expensive math.
    if v == 0.0 {
        return latitude_distance_m(latitude_1, latitude_2);
    }
    let latitude_1 = radians(latitude_1);
    let latitude_2 = radians(latitude_2);
    let u = ((latitude_2 - latitude_1) / 2.0).sin();
    let a = u * u + latitude_1.cos() * latitude_2.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

// ----- shapes and searches ----------------------------------------------------------------------------

/// What a search covers, in the request's unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Extent {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search area: its center (longitude, latitude), extent, and the unit's size in meters (M 1, KM 1000, FT
/// 0.3048, MI 1609.34).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub center: (f64, f64),
    pub extent: Extent,
    pub unit_m: f64,
}

/// The size in meters of a unit name (case-insensitive), None for an unknown one.
pub fn unit_m(name: &[u8]) -> Option<f64> {
    [
        (&b"m"[..], 1.0),
        (b"km", 1000.0),
        (b"ft", 0.3048),
        (b"mi", 1609.34),
    ]
    .into_iter()
    .find(|(unit, _)| name.eq_ignore_ascii_case(unit))
    .map(|(_, meters)| meters)
}

/// Redis's geohashEstimateStepsByRadius: the step whose cells are about the search's size.
fn estimate_steps_by_radius(mut range_m: f64, latitude: f64) -> u8 {
    if range_m == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX_M {
        range_m *= 2.0;
        step += 1;
    }
    // Make sure the range is included in most of the base cases.
    step -= 2;
    // Wider cells towards the poles.
    if !(-66.0..=66.0).contains(&latitude) {
        step -= 1;
        if !(-80.0..=80.0).contains(&latitude) {
            step -= 1;
        }
    }
    step.clamp(1, i32::from(STEP_MAX)) as u8
}

/// A bounding box in degrees.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bounds {
    longitude_min: f64,
    latitude_min: f64,
    longitude_max: f64,
    latitude_max: f64,
}

/// Redis's geohashBoundingBox: the box holding the shape. Meridians converge, so the longitude span is
/// taken at the edge nearer the pole (the northern one in the northern hemisphere).
fn bounding_box(shape: &Shape) -> Bounds {
    let (longitude, latitude) = shape.center;
    let (half_height, half_width) = match shape.extent {
        Extent::Radius(radius) => (radius, radius),
        Extent::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let height_m = shape.unit_m * half_height;
    let width_m = shape.unit_m * half_width;
    let latitude_delta = degrees(height_m / EARTH_RADIUS_M);
    let longitude_delta_top =
        degrees(width_m / EARTH_RADIUS_M / radians(latitude + latitude_delta).cos());
    let longitude_delta_bottom =
        degrees(width_m / EARTH_RADIUS_M / radians(latitude - latitude_delta).cos());
    let longitude_delta = if latitude < 0.0 {
        longitude_delta_bottom
    } else {
        longitude_delta_top
    };
    Bounds {
        longitude_min: longitude - longitude_delta,
        longitude_max: longitude + longitude_delta,
        latitude_min: latitude - latitude_delta,
        latitude_max: latitude + latitude_delta,
    }
}

/// The cells a search scans, in Redis's order: the center's, then north, south, east, west, north-east,
/// north-west, south-east, south-west; a dropped neighbour is None.
pub fn search_cells(shape: &Shape) -> [Option<HashBits>; 9] {
    let bounds = bounding_box(shape);
    let (longitude, latitude) = shape.center;
    let radius_m = shape.unit_m
        * match shape.extent {
            Extent::Radius(radius) => radius,
            Extent::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
    let mut steps = estimate_steps_by_radius(radius_m, latitude);
    let cells_at = |steps: u8| {
        let hash = encode_wgs84(longitude, latitude, steps).expect("the center is a position");
        let area = decode_wgs84(hash).expect("an encoded hash is never zero");
        (hash, neighbours(hash), area)
    };
    let (mut hash, mut around, mut area) = cells_at(steps);
    // Near a cell's edge the estimated step may be too fine for a neighbour to reach past the box.
    let reaches = |cell: HashBits| decode_wgs84(cell).expect("a neighbour is never zero");
    let too_fine = reaches(around.north).latitude.max < bounds.latitude_max
        || reaches(around.south).latitude.min > bounds.latitude_min
        || reaches(around.east).longitude.max < bounds.longitude_max
        || reaches(around.west).longitude.min > bounds.longitude_min;
    if steps > 1 && too_fine {
        steps -= 1;
        (hash, around, area) = cells_at(steps);
    }
    // Drop the neighbours the box does not reach.
    if steps >= 2 {
        if area.latitude.min < bounds.latitude_min {
            around.south = HashBits::ZERO;
            around.south_west = HashBits::ZERO;
            around.south_east = HashBits::ZERO;
        }
        if area.latitude.max > bounds.latitude_max {
            around.north = HashBits::ZERO;
            around.north_east = HashBits::ZERO;
            around.north_west = HashBits::ZERO;
        }
        if area.longitude.min < bounds.longitude_min {
            around.west = HashBits::ZERO;
            around.south_west = HashBits::ZERO;
            around.north_west = HashBits::ZERO;
        }
        if area.longitude.max > bounds.longitude_max {
            around.east = HashBits::ZERO;
            around.south_east = HashBits::ZERO;
            around.north_east = HashBits::ZERO;
        }
    }
    [
        hash,
        around.north,
        around.south,
        around.east,
        around.west,
        around.north_east,
        around.north_west,
        around.south_east,
        around.south_west,
    ]
    .map(|cell| (!cell.is_zero()).then_some(cell))
}

/// A member found by a search.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub member: Box<[u8]>,
    pub longitude: f64,
    pub latitude: f64,
    /// From the shape's center, in meters.
    pub distance_m: f64,
    pub score: f64,
}

/// The distance of the position of `score` from the shape's center when it lies inside the shape
/// (Redis's geoWithinShape), with the position.
pub fn within_shape(shape: &Shape, score: f64) -> Option<((f64, f64), f64)> {
    let (longitude, latitude) = position_of_score(score);
    let (center_longitude, center_latitude) = shape.center;
    let distance = match shape.extent {
        Extent::Radius(radius) => {
            let distance = distance_m(center_longitude, center_latitude, longitude, latitude);
            if distance > radius * shape.unit_m {
                return None;
            }
            distance
        }
        Extent::Box { width, height } => {
            let (width_m, height_m) = (width * shape.unit_m, height * shape.unit_m);
            if latitude_distance_m(latitude, center_latitude) > height_m / 2.0 {
                return None;
            }
            if distance_m(longitude, latitude, center_longitude, latitude) > width_m / 2.0 {
                return None;
            }
            distance_m(center_longitude, center_latitude, longitude, latitude)
        }
    };
    Some(((longitude, latitude), distance))
}

/// The members inside the shape, in Redis's scan order: cell by cell (see `search_cells`; a cell equal to
/// the one scanned just before it is skipped, as Redis skips it), each cell's score range ascending.
/// `limit` (COUNT with ANY, 0 for none) stops the scan once that many are found.
pub fn search(zset: &ZSetValue, shape: &Shape, limit: usize) -> Vec<Point> {
    let mut found = Vec::new();
    let cells = search_cells(shape);
    let mut last_scanned: Option<usize> = None;
    for (index, cell) in cells.iter().enumerate() {
        let Some(cell) = *cell else { continue };
        // Redis compares with the previous scanned cell only once one besides the center was scanned.
        if last_scanned.is_some_and(|last| last > 0 && cells[last] == Some(cell)) {
            continue;
        }
        if limit != 0 && found.len() >= limit {
            break;
        }
        scan_cell(zset, shape, cell, limit, &mut found);
        last_scanned = Some(index);
    }
    found
}

/// Appends the members of one cell's score range [min, max) that are inside the shape.
fn scan_cell(
    zset: &ZSetValue,
    shape: &Shape,
    cell: HashBits,
    limit: usize,
    found: &mut Vec<Point>,
) {
    let min = cell.aligned_52() as f64;
    let max = HashBits {
        bits: cell.bits + 1,
        step: cell.step,
    }
    .aligned_52() as f64;
    for (member, score) in zset.range_by_score(Bound::Included(min), Bound::Excluded(max)) {
        if let Some(((longitude, latitude), distance_m)) = within_shape(shape, score) {
            found.push(Point {
                member: member.into(),
                longitude,
                latitude,
                distance_m,
                score,
            });
        }
        if limit != 0 && found.len() >= limit {
            break;
        }
    }
}

/// Sort order of search results by distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Unsorted,
    Ascending,
    Descending,
}

/// Redis's comparator of points, by distance (`>` then `==`, as C compares doubles).
fn compare_distances(a: &Point, b: &Point) -> Ordering {
    if a.distance_m > b.distance_m {
        Ordering::Greater
    } else if a.distance_m == b.distance_m {
        Ordering::Equal
    } else {
        Ordering::Less
    }
}

/// Orders the points as Redis does and keeps the first `returned` (None: all): the whole array with qsort
/// (a stable merge sort in glibc), or, when only some are returned, Redis's partial quicksort over the
/// positions kept, whose order of equal distances differs.
pub fn sort_points(points: &mut Vec<Point>, order: Order, returned: Option<usize>) {
    let returned = returned.map_or(points.len(), |count| count.min(points.len()));
    let compare = |a: &Point, b: &Point| match order {
        Order::Descending => compare_distances(a, b).reverse(),
        _ => compare_distances(a, b),
    };
    if order != Order::Unsorted && !points.is_empty() {
        if returned == points.len() {
            merge_sort(points, compare);
        } else if returned > 0 {
            partial_quicksort(points, compare, 0, returned - 1);
        }
    }
    points.truncate(returned);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Palermo and Catania, the Redis documentation's example: scores and replies captured from Redis
    /// 7.0.15.
    const PALERMO: (f64, f64) = (13.361389, 38.115556);
    const CATANIA: (f64, f64) = (15.087269, 37.502669);

    #[test]
    fn scores_match_redis() {
        assert_eq!(score_of(PALERMO.0, PALERMO.1), Some(3479099956230698.0));
        assert_eq!(score_of(CATANIA.0, CATANIA.1), Some(3479447370796909.0));
        assert_eq!(score_of(0.0, 0.0), Some(3377699720527872.0));
        assert_eq!(score_of(-180.0, -85.05112878), Some(0.0));
        assert_eq!(score_of(180.1, 0.0), None);
        assert_eq!(score_of(0.0, 85.06), None);
    }

    #[test]
    fn positions_read_back_as_the_cell_center() {
        let (longitude, latitude) = position_of_score(3479099956230698.0);
        assert_eq!(format!("{longitude:.17}"), "13.36138933897018433");
        assert_eq!(format!("{latitude:.17}"), "38.11555639549629859");
    }

    #[test]
    fn distances_match_redis() {
        let palermo = position_of_score(3479099956230698.0);
        let catania = position_of_score(3479447370796909.0);
        let meters = distance_m(palermo.0, palermo.1, catania.0, catania.1);
        assert_eq!(format!("{:.4}", meters), "166274.1516");
        assert_eq!(format!("{:.4}", meters / 1000.0), "166.2742");
        assert_eq!(
            latitude_distance_m(0.0, 1.0),
            EARTH_RADIUS_M * RADIANS_PER_DEGREE
        );
    }

    #[test]
    fn standard_geohashes_match_redis() {
        assert_eq!(&standard_geohash(3479099956230698.0), b"sqc8b49rny0");
        assert_eq!(&standard_geohash(3479447370796909.0), b"sqdtr74hyu0");
    }

    #[test]
    fn scores_geoadd_never_wrote_decode_as_redis_does() {
        // GEOPOS of members given these scores by ZADD, as Redis 7.0.15 answers.
        let show = |score: f64| {
            let (longitude, latitude) = position_of_score(score);
            format!("{longitude:.17} {latitude:.17}")
        };
        // -1 converts to all ones: both cells wrap past the top, and the centers clamp to the limits.
        assert_eq!(show(-1.0), "180.00000000000000000 85.05112877999999910");
        // Past 2^64 the conversion gives 0: the first cell.
        assert_eq!(show(1e20), "-179.99999731779098511 -85.05112751263942528");
    }

    #[test]
    fn neighbours_wrap_and_step() {
        let hash = encode_wgs84(0.0, 0.0, 1).unwrap();
        let around = neighbours(hash);
        assert_eq!(around.east, around.west, "two columns at step 1");
        let fine = encode_wgs84(13.361389, 38.115556, 10).unwrap();
        let around = neighbours(fine);
        let area = decode_wgs84(fine).unwrap();
        let north = decode_wgs84(around.north).unwrap();
        assert_eq!(north.latitude.min, area.latitude.max);
        assert_eq!(north.longitude, area.longitude);
        let east = decode_wgs84(around.east).unwrap();
        assert_eq!(east.longitude.min, area.longitude.max);
    }

    #[test]
    fn steps_follow_the_radius() {
        assert_eq!(estimate_steps_by_radius(0.0, 0.0), 26);
        // 200 km doubles 7 times to pass the Mercator width: step 8, less 2.
        assert_eq!(estimate_steps_by_radius(200_000.0, 0.0), 6);
        assert_eq!(estimate_steps_by_radius(200_000.0, 70.0), 5);
        assert_eq!(estimate_steps_by_radius(200_000.0, -85.0), 4);
        assert_eq!(estimate_steps_by_radius(1e9, 0.0), 1);
    }

    fn sicily() -> ZSetValue {
        let mut zset = ZSetValue::default();
        zset.insert(b"Palermo", score_of(PALERMO.0, PALERMO.1).unwrap());
        zset.insert(b"Catania", score_of(CATANIA.0, CATANIA.1).unwrap());
        zset
    }

    #[test]
    fn radius_and_box_searches_find_what_redis_finds() {
        let zset = sicily();
        let around = |extent| Shape {
            center: (15.0, 37.0),
            extent,
            unit_m: 1000.0,
        };
        let mut near = search(&zset, &around(Extent::Radius(200.0)), 0);
        sort_points(&mut near, Order::Ascending, None);
        let names: Vec<&[u8]> = near.iter().map(|point| &*point.member).collect();
        assert_eq!(names, [&b"Catania"[..], b"Palermo"]);
        assert_eq!(format!("{:.4}", near[0].distance_m / 1000.0), "56.4413");
        assert_eq!(format!("{:.4}", near[1].distance_m / 1000.0), "190.4424");
        assert!(search(&zset, &around(Extent::Radius(100.0)), 0).len() == 1);
        let boxed = Extent::Box {
            width: 400.0,
            height: 400.0,
        };
        assert_eq!(search(&zset, &around(boxed), 0).len(), 2);
        let narrow = Extent::Box {
            width: 200.0,
            height: 400.0,
        };
        assert_eq!(search(&zset, &around(narrow), 0).len(), 1);
        assert_eq!(search(&zset, &around(Extent::Radius(200.0)), 1).len(), 1);
    }

    #[test]
    fn descending_and_partial_sorts() {
        let point = |name: &str, distance_m| Point {
            member: name.as_bytes().into(),
            longitude: 0.0,
            latitude: 0.0,
            distance_m,
            score: 0.0,
        };
        let mut points = vec![point("a", 3.0), point("b", 1.0), point("c", 2.0)];
        sort_points(&mut points, Order::Descending, Some(2));
        let names: Vec<&[u8]> = points.iter().map(|point| &*point.member).collect();
        assert_eq!(names, [&b"a"[..], b"c"]);
        let mut unsorted = vec![point("a", 3.0), point("b", 1.0)];
        sort_points(&mut unsorted, Order::Unsorted, Some(1));
        assert_eq!(&*unsorted[0].member, b"a");
    }

    proptest! {
        /// A position reads back inside its own cell: within half a cell of where it was put.
        #[test]
        fn decode_of_encode_stays_in_the_cell(
            longitude in LONGITUDE_MIN_DEG..LONGITUDE_MAX_DEG,
            latitude in LATITUDE_MIN_DEG..LATITUDE_MAX_DEG,
        ) {
            let hash = encode_wgs84(longitude, latitude, STEP_MAX).unwrap();
            let area = decode_wgs84(hash).unwrap();
            prop_assert!(area.longitude.min <= longitude && longitude <= area.longitude.max);
            prop_assert!(area.latitude.min <= latitude && latitude <= area.latitude.max);
            let score = hash.aligned_52() as f64;
            prop_assert_eq!(score as u64, hash.bits);
            let (x, y) = position_of_score(score);
            let cell_longitude = 360.0 / (1u64 << STEP_MAX) as f64;
            let cell_latitude = (LATITUDE_MAX_DEG - LATITUDE_MIN_DEG) / (1u64 << STEP_MAX) as f64;
            prop_assert!((x - longitude).abs() <= cell_longitude / 2.0);
            prop_assert!((y - latitude).abs() <= cell_latitude / 2.0);
            prop_assert_eq!(encode_wgs84(x, y, STEP_MAX), Some(hash));
        }

        /// Neighbours are inverse moves: east of west, north of south, is the cell itself.
        #[test]
        fn neighbour_moves_invert(bits in 0u64..(1 << 40), step in 1u8..=20) {
            let hash = HashBits { bits: bits & ((1u64 << (2 * step)) - 1), step };
            prop_assert_eq!(neighbours(neighbours(hash).west).east, hash);
            prop_assert_eq!(neighbours(neighbours(hash).south).north, hash);
        }
    }
}
