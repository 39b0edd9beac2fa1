//! RESP reply encoding straight into a connection's output buffer, for RESP2 and RESP3.
//!
//! Commands write replies through `ReplyWriter` instead of building reply values, so a GET copies its value
//! once, from the store into the socket buffer. RESP3-only types degrade to their RESP2 forms exactly as
//! Redis does (maps become flat arrays, doubles become bulk strings, booleans become integers).

/// Writes replies into `buf` in the protocol version the connection negotiated.
#[derive(Debug, Default)]
pub struct ReplyWriter {
    pub buf: Vec<u8>,
    pub resp3: bool,
}

impl ReplyWriter {
    pub fn new(resp3: bool) -> Self {
        ReplyWriter {
            buf: Vec::new(),
            resp3,
        }
    }

    fn line(&mut self, prefix: u8, body: &[u8]) {
        self.buf.push(prefix);
        self.buf.extend_from_slice(body);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn number_line(&mut self, prefix: u8, value: i64) {
        self.buf.push(prefix);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A status reply; line breaks are replaced so the frame stays valid.
    pub fn simple(&mut self, text: &str) {
        self.buf.push(b'+');
        push_sanitized(&mut self.buf, text);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error reply. `text` starts with its code, e.g. `ERR syntax error` or `WRONGTYPE ...`.
    pub fn error(&mut self, text: &str) {
        debug_assert!(!text.starts_with('-'), "error text carries no '-' prefix");
        self.buf.push(b'-');
        push_sanitized(&mut self.buf, text);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, value: i64) {
        self.number_line(b':', value);
    }

    pub fn bulk(&mut self, value: &[u8]) {
        self.number_line(b'$', value.len() as i64);
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn bulk_int(&mut self, value: i64) {
        self.bulk(itoa::Buffer::new().format(value).as_bytes());
    }

    /// The null bulk string (`$-1` in RESP2, `_` in RESP3).
    pub fn nil(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// The null array (`*-1` in RESP2, `_` in RESP3).
    pub fn nil_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array_len(&mut self, len: usize) {
        self.number_line(b'*', len as i64);
    }

    /// A map of `len` pairs; RESP2 sees an array of 2×len elements.
    pub fn map_len(&mut self, len: usize) {
        if self.resp3 {
            self.number_line(b'%', len as i64);
        } else {
            self.number_line(b'*', 2 * len as i64);
        }
    }

    pub fn set_len(&mut self, len: usize) {
        self.number_line(if self.resp3 { b'~' } else { b'*' }, len as i64);
    }

    /// An out-of-band push (pub/sub messages): `>` in RESP3, an array in RESP2.
    pub fn push_len(&mut self, len: usize) {
        self.number_line(if self.resp3 { b'>' } else { b'*' }, len as i64);
    }

    /// A double formatted as Redis 7.0 does (`%.17g`; `inf`, `-inf`).
    pub fn double(&mut self, value: f64) {
        let text = format_double(value);
        if self.resp3 {
            self.line(b',', text.as_bytes());
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// A double as Redis's addReplyHumanLongDouble writes one (GEOPOS, WITHCOORD): `%.17Lf` with its
    /// trailing zeros trimmed (`format_fixed_17`), a bulk string in RESP2 and a `,` double in RESP3.
    pub fn human_double(&mut self, value: f64) {
        let text = format_fixed_17(value);
        if self.resp3 {
            self.line(b',', text.as_bytes());
        } else {
            self.bulk(text.as_bytes());
        }
    }

    pub fn bool(&mut self, value: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if value { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(value as i64);
        }
    }

    /// A verbatim string (`=len\r\ntxt:...`), a bulk string in RESP2.
    pub fn verbatim(&mut self, format: &str, text: &[u8]) {
        debug_assert_eq!(format.len(), 3);
        if !self.resp3 {
            return self.bulk(text);
        }
        self.number_line(b'=', (text.len() + 4) as i64);
        self.buf.extend_from_slice(format.as_bytes());
        self.buf.push(b':');
        self.buf.extend_from_slice(text);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn bulks<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a [u8]>) {
        self.array_len(items.len());
        for item in items {
            self.bulk(item);
        }
    }
}

fn push_sanitized(buf: &mut Vec<u8>, text: &str) {
    buf.extend(text.bytes().map(|byte| {
        if byte == b'\r' || byte == b'\n' {
            b' '
        } else {
            byte
        }
    }));
}

/// Formats like C's `%.17g`, which Redis 7.0 uses for double replies.
pub fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, value);
    let (mantissa, exponent) = scientific.split_once('e').expect("exponent present");
    let exponent: i32 = exponent.parse().expect("exponent is an integer");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = strip_fraction_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent).max(0) as usize;
        strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
    }
}

fn strip_fraction_zeros(text: &str) -> &str {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.')
}

/// Formats a double the way INCRBYFLOAT stores it. Redis computes in long double and prints 17 significant
/// digits, never in exponent form; with f64 arithmetic, 16 significant digits reproduce those results for
/// decimal inputs (0.1 + 0.2 prints `0.3`, as in Redis, not `0.30000000000000004`).
pub fn format_double_human(value: f64) -> String {
    const SIGNIFICANT_DIGITS: i32 = 16;
    if value == 0.0 {
        return "0".into();
    }
    let exponent = value.abs().log10().floor() as i32;
    let decimals = (SIGNIFICANT_DIGITS - 1 - exponent).max(0) as usize;
    strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
}

/// `%.17Lf` of a double (exact: a double widened to long double is the same number), trailing zeros and a
/// trailing '.' trimmed, `-0` as `0`: Redis's ld2string in LD_STR_HUMAN mode for a value that is a double.
pub fn format_fixed_17(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    let text = format!("{value:.17}");
    let trimmed = strip_fraction_zeros(&text);
    if trimmed == "-0" {
        "0".into()
    } else {
        trimmed.to_string()
    }
}

/// Redis's fixedpoint_d2string: the value times 10^digits rounded to an integer by llrint (to nearest, ties
/// to even), printed with `digits` decimals (GEODIST and WITHDIST use 4). Values past the i64 range print
/// as llrint's result for them, i64::MIN, as on x86-64.
pub fn format_fixed_point(value: f64, digits: u32) -> String {
    assert!((1..=17).contains(&digits), "Redis formats 1 to 17 digits");
    if value == 0.0 {
        return format!("0.{}", "0".repeat(digits as usize));
    }
    let scaled = (value * 10f64.powi(digits as i32)).round_ties_even();
    const TWO_POW_63: f64 = (1u64 << 63) as f64;
    let fixed = if (-TWO_POW_63..TWO_POW_63).contains(&scaled) {
        scaled as i64
    } else {
        i64::MIN
    };
    let magnitude = fixed.unsigned_abs().to_string();
    let digits = digits as usize;
    let padded = format!("{magnitude:0>width$}", width = digits + 1);
    let (whole, fraction) = padded.split_at(padded.len() - digits);
    let sign = if fixed < 0 { "-" } else { "" };
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_match_percent_17g() {
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(-2.25), "-2.25");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(format_double(123456789.0), "123456789");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double_human(10.5 + 0.1), "10.6");
        assert_eq!(format_double_human(5.0), "5");
        assert_eq!(format_double_human(0.1 + 0.2), "0.3");
        assert_eq!(format_double_human(5200.0), "5200");
        assert_eq!(format_double_human(1e20), "100000000000000000000");
        assert_eq!(format_double_human(-1.25), "-1.25");
    }

    #[test]
    fn human_doubles_and_fixed_points_match_redis() {
        // GEOPOS Sicily Palermo and a clamped latitude, as Redis 7.0.15 replies.
        assert_eq!(format_fixed_17(13.361389338970184), "13.36138933897018433");
        assert_eq!(format_fixed_17(85.05112878), "85.0511287799999991");
        assert_eq!(format_fixed_17(180.0), "180");
        assert_eq!(format_fixed_17(-0.0), "0");
        assert_eq!(format_fixed_17(0.5), "0.5");
        // fixedpoint_d2string's own tests in Redis's util.c.
        assert_eq!(format_fixed_point(0.0, 4), "0.0000");
        assert_eq!(format_fixed_point(0.0001, 4), "0.0001");
        assert_eq!(format_fixed_point(6.06429515983917e-5, 4), "0.0001");
        assert_eq!(format_fixed_point(0.01, 4), "0.0100");
        assert_eq!(format_fixed_point(1.0, 4), "1.0000");
        assert_eq!(format_fixed_point(-1.1, 4), "-1.1000");
        assert_eq!(format_fixed_point(166274.15156960033, 4), "166274.1516");
        assert_eq!(format_fixed_point(0.00005, 4), "0.0000");
        let mut resp3 = ReplyWriter::new(true);
        resp3.human_double(13.5);
        assert_eq!(resp3.buf, b",13.5\r\n");
    }

    #[test]
    fn resp2_and_resp3_forms() {
        let mut resp2 = ReplyWriter::new(false);
        resp2.map_len(1);
        resp2.nil();
        resp2.double(2.5);
        resp2.bool(true);
        assert_eq!(resp2.buf, b"*2\r\n$-1\r\n$3\r\n2.5\r\n:1\r\n");
        let mut resp3 = ReplyWriter::new(true);
        resp3.map_len(1);
        resp3.nil();
        resp3.double(2.5);
        resp3.bool(true);
        resp3.error("ERR a\r\nb");
        assert_eq!(resp3.buf, b"%1\r\n_\r\n,2.5\r\n#t\r\n-ERR a  b\r\n");
    }
}
