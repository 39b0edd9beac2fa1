//! Geo commands (Redis 7.0's geo.c): positions kept as sorted-set scores. Argument parsing in Redis's order
//! (so the first error is Redis's), locking and replies; the geohash math, the searches and their sorts
//! are the store's (`fallow_store::types::geo`). Distances are replied as `%.4f`-like bulk strings in both
//! protocols, coordinates as Redis's human long doubles (bulk strings in RESP2, doubles in RESP3).
use super::{is, parse_float, parse_int, Ctx, Handler, NOT_FLOAT, NOT_INTEGER, SYNTAX, WRONGTYPE};
use fallow_proto::reply::format_fixed_point;
use fallow_proto::ReplyWriter;
use fallow_store::types::geo::{self, Extent, Order, Point, Shape};
use fallow_store::types::zset::{AddFlags, AddOutcome};
use fallow_store::types::ZSetValue;
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("geoadd", geoadd),
    ("geodist", geodist),
    ("geohash", geohash),
    ("geopos", geopos),
    ("georadius", georadius),
    ("georadius_ro", georadius_ro),
    ("georadiusbymember", georadiusbymember),
    ("georadiusbymember_ro", georadiusbymember_ro),
    ("geosearch", geosearch),
    ("geosearchstore", geosearchstore),
];

const UNSUPPORTED_UNIT: &str = "ERR unsupported unit provided. please use M, KM, FT, MI";
const MEMBER_NOT_DECODED: &str = "ERR could not decode requested zset member";
/// Distances are replied with 4 decimals.
const DISTANCE_DECIMALS: u32 = 4;

// ----- argument parsing -------------------------------------------------------------------------------

/// A longitude and a latitude (Redis's extractLongLatOrReply).
fn parse_position(longitude: &[u8], latitude: &[u8]) -> Result<(f64, f64), String> {
    let longitude = parse_float(longitude).ok_or(NOT_FLOAT)?;
    let latitude = parse_float(latitude).ok_or(NOT_FLOAT)?;
    if !geo::is_valid_position(longitude, latitude) {
        return Err(format!(
            "ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"
        ));
    }
    Ok((longitude, latitude))
}

fn parse_unit(name: &[u8]) -> Result<f64, String> {
    geo::unit_m(name).ok_or_else(|| UNSUPPORTED_UNIT.to_string())
}

/// `radius unit` (Redis's extractDistanceOrReply): the extent and the unit's meters.
fn parse_radius(radius: &[u8], unit: &[u8]) -> Result<(Extent, f64), String> {
    let radius = parse_float(radius).ok_or("ERR need numeric radius")?;
    if radius < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    Ok((Extent::Radius(radius), parse_unit(unit)?))
}

/// `width height unit` (Redis's extractBoxOrReply).
fn parse_box(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(Extent, f64), String> {
    let width = parse_float(width).ok_or("ERR need numeric width")?;
    let height = parse_float(height).ok_or("ERR need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return Err("ERR height or width cannot be negative".into());
    }
    Ok((Extent::Box { width, height }, parse_unit(unit)?))
}

/// A member's position (Redis's longLatFromMember).
fn member_position(zset: &ZSetValue, member: &[u8]) -> Result<(f64, f64), String> {
    zset.score(member)
        .map(geo::position_of_score)
        .ok_or_else(|| MEMBER_NOT_DECODED.to_string())
}

// ----- GEOADD, GEODIST, GEOHASH, GEOPOS ---------------------------------------------------------------

/// GEOADD key [NX|XX] [CH] longitude latitude member ...: ZADD of the positions' scores.
fn geoadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let mut flags = AddFlags::default();
    let mut first = 2;
    while first < args.len() {
        let option = args[first];
        if is(option, "nx") {
            flags.nx = true;
        } else if is(option, "xx") {
            flags.xx = true;
        } else if is(option, "ch") {
            flags.ch = true;
        } else {
            break;
        }
        first += 1;
    }
    let triples = &args[first..];
    if triples.is_empty() || !triples.len().is_multiple_of(3) || (flags.nx && flags.xx) {
        return ctx.out.error(SYNTAX);
    }
    let mut scored = Vec::with_capacity(triples.len() / 3);
    for triple in triples.chunks(3) {
        match parse_position(triple[0], triple[1]) {
            Ok((longitude, latitude)) => {
                let score = geo::score_of(longitude, latitude).expect("a valid position encodes");
                scored.push((score, triple[2]));
            }
            Err(error) => return ctx.out.error(&error),
        }
    }
    let key = args[1];
    let outcomes = super::update_collection(ctx, key, !flags.xx, |zset: &mut ZSetValue| {
        let mut changed = false;
        let counted = scored
            .iter()
            .filter(|&&(score, member)| {
                let outcome = zset.add(member, score, flags);
                changed |= matches!(outcome, AddOutcome::Added(_) | AddOutcome::Updated(_));
                outcome.counted(flags.ch)
            })
            .count();
        (counted, changed)
    });
    match outcomes {
        Ok(outcomes) => {
            let (counted, changed) = outcomes.unzip();
            let db = ctx.keyspace();
            ctx.guards.shard(key).wake_waiters(db, key);
            if changed == Some(true) {
                // GEOADD is ZADD underneath, and Redis publishes ZADD's event.
                ctx.notify(super::Class::ZSET, "zadd", key);
            }
            ctx.out.int(counted.unwrap_or(0) as i64);
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn with_zset(ctx: &mut Ctx, key: &[u8], reply: impl FnOnce(&mut ReplyWriter, Option<&ZSetValue>)) {
    super::with_collection(ctx, key, reply);
}

/// GEODIST key member1 member2 [unit].
fn geodist(ctx: &mut Ctx, args: &[&[u8]]) {
    let unit_m = match args.len() {
        4 => 1.0,
        5 => match parse_unit(args[4]) {
            Ok(unit_m) => unit_m,
            Err(error) => return ctx.out.error(&error),
        },
        _ => return ctx.out.error(SYNTAX),
    };
    with_zset(ctx, args[1], |out, zset| {
        let scores = zset.and_then(|zset| Some((zset.score(args[2])?, zset.score(args[3])?)));
        let Some((first, second)) = scores else {
            return out.nil();
        };
        let (longitude_1, latitude_1) = geo::position_of_score(first);
        let (longitude_2, latitude_2) = geo::position_of_score(second);
        let meters = geo::distance_m(longitude_1, latitude_1, longitude_2, latitude_2);
        out.bulk(format_fixed_point(meters / unit_m, DISTANCE_DECIMALS).as_bytes());
    });
}

/// GEOHASH key member ...: 11-character standard geohashes, nil for a missing member.
fn geohash(ctx: &mut Ctx, args: &[&[u8]]) {
    with_zset(ctx, args[1], |out, zset| {
        out.array_len(args.len() - 2);
        for member in &args[2..] {
            match zset.and_then(|zset| zset.score(member)) {
                Some(score) => out.bulk(&geo::standard_geohash(score)),
                None => out.nil(),
            }
        }
    });
}

/// GEOPOS key member ...: [longitude, latitude] pairs, a nil array for a missing member.
fn geopos(ctx: &mut Ctx, args: &[&[u8]]) {
    with_zset(ctx, args[1], |out, zset| {
        out.array_len(args.len() - 2);
        for member in &args[2..] {
            match zset.and_then(|zset| zset.score(member)) {
                Some(score) => {
                    let (longitude, latitude) = geo::position_of_score(score);
                    out.array_len(2);
                    out.human_double(longitude);
                    out.human_double(latitude);
                }
                None => out.nil_array(),
            }
        }
    });
}

// ----- searches ---------------------------------------------------------------------------------------

/// Which search command runs (Redis's georadiusGeneric flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// GEORADIUS key longitude latitude radius unit ...
    Radius { store: bool },
    /// GEORADIUSBYMEMBER key member radius unit ...
    RadiusByMember { store: bool },
    /// GEOSEARCH key ...
    GeoSearch,
    /// GEOSEARCHSTORE destination key ...
    GeoSearchStore,
}

impl Form {
    fn source(self) -> usize {
        match self {
            Form::GeoSearchStore => 2,
            _ => 1,
        }
    }

    /// Where the options start.
    fn options(self) -> usize {
        match self {
            Form::Radius { .. } => 6,
            Form::RadiusByMember { .. } => 5,
            Form::GeoSearch => 2,
            Form::GeoSearchStore => 3,
        }
    }

    fn is_geosearch(self) -> bool {
        matches!(self, Form::GeoSearch | Form::GeoSearchStore)
    }

    /// Whether STORE and STOREDIST key are options (GEORADIUS and GEORADIUSBYMEMBER, not their _RO).
    fn takes_store_options(self) -> bool {
        matches!(
            self,
            Form::Radius { store: true } | Form::RadiusByMember { store: true }
        )
    }
}

/// A search request after parsing. The center and extent are known whenever the source key exists.
#[derive(Debug, Default)]
struct Request<'a> {
    center: Option<(f64, f64)>,
    extent: Option<(Extent, f64)>,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    order: Option<Order>,
    from_member: bool,
    from_position: bool,
    by_radius: bool,
    by_box: bool,
    /// COUNT, 0 for none.
    count: usize,
    any: bool,
    store: Option<&'a [u8]>,
    store_dist: bool,
}

impl Request<'_> {
    fn shape(&self) -> Shape {
        let (extent, unit_m) = self.extent.expect("an extent once the source exists");
        Shape {
            center: self.center.expect("a center once the source exists"),
            extent,
            unit_m,
        }
    }
}

/// Redis's georadiusGeneric argument handling, in its order: the fixed arguments, then the options one by
/// one (FROMMEMBER reads the member's position where it stands), then the combinations. `zset`: the
/// source, None when missing (a member's position is then not looked up, nor GEORADIUSBYMEMBER's radius
/// parsed).
fn parse_request<'a>(
    args: &[&'a [u8]],
    search: Form,
    zset: Option<&ZSetValue>,
) -> Result<Request<'a>, String> {
    let mut request = Request::default();
    match search {
        Form::Radius { .. } => {
            request.center = Some(parse_position(args[2], args[3])?);
            request.extent = Some(parse_radius(args[4], args[5])?);
        }
        Form::RadiusByMember { .. } => {
            if let Some(zset) = zset {
                request.center = Some(member_position(zset, args[2])?);
                request.extent = Some(parse_radius(args[3], args[4])?);
            }
        }
        Form::GeoSearch => {}
        Form::GeoSearchStore => request.store = Some(args[1]),
    }
    parse_options(&args[search.options()..], search, zset, &mut request)?;
    check_combinations(args[0], search, &request)?;
    if request.count != 0 && request.order.is_none() && !request.any {
        // The nearest COUNT need sorting.
        request.order = Some(Order::Ascending);
    }
    Ok(request)
}

fn parse_options<'a>(
    options: &[&'a [u8]],
    search: Form,
    zset: Option<&ZSetValue>,
    request: &mut Request<'a>,
) -> Result<(), String> {
    let geosearch = search.is_geosearch();
    let mut index = 0;
    while index < options.len() {
        let option = options[index];
        let left = options.len() - index - 1;
        if is(option, "withdist") {
            request.with_dist = true;
        } else if is(option, "withhash") {
            request.with_hash = true;
        } else if is(option, "withcoord") {
            request.with_coord = true;
        } else if is(option, "any") {
            request.any = true;
        } else if is(option, "asc") {
            request.order = Some(Order::Ascending);
        } else if is(option, "desc") {
            request.order = Some(Order::Descending);
        } else if is(option, "count") && left >= 1 {
            let count = parse_int(options[index + 1]).ok_or(NOT_INTEGER)?;
            if count <= 0 {
                return Err("ERR COUNT must be > 0".into());
            }
            request.count = usize::try_from(count).unwrap_or(usize::MAX);
            index += 1;
        } else if (is(option, "store") || is(option, "storedist"))
            && left >= 1
            && search.takes_store_options()
        {
            request.store = Some(options[index + 1]);
            request.store_dist = is(option, "storedist");
            index += 1;
        } else if is(option, "storedist") && search == Form::GeoSearchStore {
            request.store_dist = true;
        } else if is(option, "frommember") && left >= 1 && geosearch && !request.from_position {
            if let Some(zset) = zset {
                request.center = Some(member_position(zset, options[index + 1])?);
            }
            request.from_member = true;
            index += 1;
        } else if is(option, "fromlonlat") && left >= 2 && geosearch && !request.from_member {
            request.center = Some(parse_position(options[index + 1], options[index + 2])?);
            request.from_position = true;
            index += 2;
        } else if is(option, "byradius") && left >= 2 && geosearch && !request.by_box {
            request.extent = Some(parse_radius(options[index + 1], options[index + 2])?);
            request.by_radius = true;
            index += 2;
        } else if is(option, "bybox") && left >= 3 && geosearch && !request.by_radius {
            let (width, height, unit) =
                (options[index + 1], options[index + 2], options[index + 3]);
            request.extent = Some(parse_box(width, height, unit)?);
            request.by_box = true;
            index += 3;
        } else {
            return Err(SYNTAX.into());
        }
        index += 1;
    }
    Ok(())
}

/// The checks after the options, in Redis's order. `name`: the command as the client spelled it.
fn check_combinations(name: &[u8], search: Form, request: &Request) -> Result<(), String> {
    if request.store.is_some() && (request.with_dist || request.with_hash || request.with_coord) {
        let what = if search == Form::GeoSearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ));
    }
    let name = String::from_utf8_lossy(name);
    if search.is_geosearch() && !(request.from_member || request.from_position) {
        return Err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if search.is_geosearch() && !(request.by_radius || request.by_box) {
        return Err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if request.any && request.count == 0 {
        return Err("ERR the ANY argument requires COUNT argument".into());
    }
    Ok(())
}

/// What a search found, for the reply or the store after the source's read.
struct Found<'a> {
    request: Request<'a>,
    points: Vec<Point>,
}

/// GEORADIUS, GEORADIUSBYMEMBER, their _RO forms, GEOSEARCH and GEOSEARCHSTORE. The source's type is
/// checked first, as Redis looks it up before parsing; a missing source answers an empty array (or stores
/// nothing, deleting the destination).
fn search_command(ctx: &mut Ctx, args: &[&[u8]], search: Form) {
    let mut found = None;
    with_zset(ctx, args[search.source()], |out, zset| {
        let request = match parse_request(args, search, zset) {
            Ok(request) => request,
            Err(error) => return out.error(&error),
        };
        let points = zset.map_or_else(Vec::new, |zset| find(zset, &request));
        found = Some(Found { request, points });
    });
    let Some(found) = found else {
        return;
    };
    match found.request.store {
        Some(destination) => {
            let event = match search {
                Form::GeoSearchStore => "geosearchstore",
                _ => "georadiusstore",
            };
            store_points(ctx, destination, &found, event)
        }
        None => reply_points(ctx, &found),
    }
}

/// Scans the source and orders the points as Redis does, keeping those returned.
fn find(zset: &ZSetValue, request: &Request) -> Vec<Point> {
    let limit = if request.any { request.count } else { 0 };
    let mut points = geo::search(zset, &request.shape(), limit);
    let returned = (request.count != 0).then_some(request.count);
    let order = request.order.unwrap_or(Order::Unsorted);
    geo::sort_points(&mut points, order, returned);
    points
}

/// Bytes of a reply's coordinate, distance or hash, at most.
const FIELD_REPLY_BYTES: u64 = 32;

fn reply_points(ctx: &mut Ctx, found: &Found) {
    let request = &found.request;
    let fields = [request.with_dist, request.with_hash, request.with_coord]
        .iter()
        .filter(|&&with| with)
        .count();
    // Sized before it is built: refused if it would pass the client's output hard limit.
    let bytes: u64 = found
        .points
        .iter()
        .map(|point| {
            super::bulk_reply_bytes(point.member.len()) + 2 * FIELD_REPLY_BYTES * fields as u64
        })
        .sum();
    if bytes > ctx.reply_budget() {
        return ctx.refuse_reply(bytes);
    }
    let unit_m = request.extent.map_or(1.0, |(_, unit_m)| unit_m);
    let out = &mut *ctx.out;
    out.array_len(found.points.len());
    for point in &found.points {
        if fields > 0 {
            out.array_len(fields + 1);
        }
        out.bulk(&point.member);
        if request.with_dist {
            out.bulk(format_fixed_point(point.distance_m / unit_m, DISTANCE_DECIMALS).as_bytes());
        }
        if request.with_hash {
            out.int(point.score as i64);
        }
        if request.with_coord {
            out.array_len(2);
            out.human_double(point.longitude);
            out.human_double(point.latitude);
        }
    }
}

/// STORE, STOREDIST, GEOSEARCHSTORE: the points as a sorted set scored by their geohash or (STOREDIST)
/// their distance in the request's unit; none deletes the destination.
fn store_points(ctx: &mut Ctx, destination: &[u8], found: &Found, event: &str) {
    let request = &found.request;
    let unit_m = request.extent.map_or(1.0, |(_, unit_m)| unit_m);
    let mut zset = ZSetValue::default();
    for point in &found.points {
        let score = if request.store_dist {
            point.distance_m / unit_m
        } else {
            point.score
        };
        zset.insert(&point.member, score);
    }
    if !zset.is_empty() && !ctx.reserve_memory(zset.memory_bytes()) {
        return;
    }
    let stored = zset.len();
    super::zset::store(ctx, destination, zset, event);
    ctx.out.int(stored as i64);
}

fn georadius(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::Radius { store: true });
}

fn georadius_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::Radius { store: false });
}

fn georadiusbymember(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::RadiusByMember { store: true });
}

fn georadiusbymember_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::RadiusByMember { store: false });
}

fn geosearch(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::GeoSearch);
}

fn geosearchstore(ctx: &mut Ctx, args: &[&[u8]]) {
    search_command(ctx, args, Form::GeoSearchStore);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str, search: Form) -> Result<Request<'static>, String> {
        let args: Vec<&'static [u8]> = args
            .split(' ')
            .map(|arg| &*Box::leak(arg.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        parse_request(Box::leak(args.into_boxed_slice()), search, None)
    }

    #[test]
    fn errors_come_in_redis_order() {
        let store_with = parse(
            "georadius k 0 0 1 km withdist store d",
            Form::Radius { store: true },
        );
        assert!(store_with
            .unwrap_err()
            .contains("STORE option in GEORADIUS"));
        let ro_store = parse(
            "georadius_ro k 0 0 1 km store d",
            Form::Radius { store: false },
        );
        assert_eq!(ro_store.unwrap_err(), SYNTAX);
        let no_from = parse("GeoSearch k byradius 1 km withdist", Form::GeoSearch);
        assert_eq!(
            no_from.unwrap_err(),
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GeoSearch"
        );
        let both = parse(
            "geosearch k frommember m fromlonlat 0 0 byradius 1 m",
            Form::GeoSearch,
        );
        assert_eq!(both.unwrap_err(), SYNTAX);
        let any = parse(
            "geosearch k fromlonlat 0 0 bybox 1 1 m any",
            Form::GeoSearch,
        );
        assert_eq!(
            any.unwrap_err(),
            "ERR the ANY argument requires COUNT argument"
        );
        let count = parse(
            "geosearch k fromlonlat 0 0 byradius 1 m count 0",
            Form::GeoSearch,
        );
        assert_eq!(count.unwrap_err(), "ERR COUNT must be > 0");
        let unit = parse("georadius k 0 0 1 yards", Form::Radius { store: true });
        assert_eq!(unit.unwrap_err(), UNSUPPORTED_UNIT);
        let pair = parse("georadius k 181 0 1 m", Form::Radius { store: true });
        assert_eq!(
            pair.unwrap_err(),
            "ERR invalid longitude,latitude pair 181.000000,0.000000"
        );
    }

    #[test]
    fn count_sorts_unless_any() {
        let sorted = parse(
            "geosearch k fromlonlat 0 0 byradius 1 m count 3",
            Form::GeoSearch,
        )
        .unwrap();
        assert_eq!(sorted.order, Some(Order::Ascending));
        let any = parse(
            "geosearch k fromlonlat 0 0 byradius 1 m count 3 any",
            Form::GeoSearch,
        )
        .unwrap();
        assert_eq!(any.order, None);
        // A missing source: GEORADIUSBYMEMBER's member and radius are not looked at.
        let by_member = parse(
            "georadiusbymember k m x y",
            Form::RadiusByMember { store: true },
        );
        assert!(by_member.is_ok());
    }
}
