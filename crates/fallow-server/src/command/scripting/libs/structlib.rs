//! `struct`: Roberto Ierusalimschy's struct library (struct.c 1.4) as patched in
//! Redis 7.0.15's deps/lua/src/lua_struct.c, ported to Rust on the Lua C API.
//!
//! Mirrors the x86-64 build: native little endian, short 2, int 4, long/size_t 8,
//! float 4, double 8, MAXALIGN 8, integers carried in 64-bit `long`. The Redis
//! patches are included: getnum overflow ("integral size overflow"), i/I sizes up
//! to 32 ("integral size %d is larger than limit of %d"), "offset must be 1 or
//! greater", overflow-safe "data string too short" checks, `luaL_checkstack`
//! ("too many results") while unpacking, and `c0` requiring a previous result.
//! Undefined C conversions (double to integer out of range, shifts >= 64) are
//! reproduced as x86-64 gcc executes them, so results stay byte-identical.
//!
//! Documented difference: `struct.pack` builds its result in a Rust buffer under a
//! protected call instead of a `luaL_Buffer`, so it uses one more C call level
//! (LUAI_MAXCCALLS is 200) and a memory error inside it is re-raised as a runtime
//! error with the same message. `struct.unpack` and `struct.size` have none.
use std::ffi::c_int;

use super::luaffi::{
    self, c_double_to_float, c_double_to_i64, c_double_to_u64, c_float_to_double, check_bytes,
    check_number, error, ffi, msg, or_raise, Failure, Msg, Outcome, State,
};

const MAX_INT_SIZE: i32 = 32;
const MAX_ALIGN: i32 = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endian {
    Big,
    Little,
}

#[derive(Clone, Copy)]
struct Header {
    endian: Endian,
    align: usize,
}

impl Header {
    fn new() -> Self {
        Header {
            endian: Endian::Little,
            align: 1,
        }
    }
}

/// A cursor over the format string (C stops at the first NUL byte).
struct Format<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Format<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Format {
            bytes: bytes.get(..end).unwrap_or(&[]),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next_option(&mut self) -> Option<u8> {
        let opt = self.peek()?;
        self.pos += 1;
        Some(opt)
    }

    /// `getnum`: an optional decimal count, `default` when absent.
    fn number(&mut self, default: i32) -> Outcome<i32> {
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Ok(default);
        }
        let mut value: i32 = 0;
        while let Some(digit) = self.peek().filter(|b| b.is_ascii_digit()) {
            let digit = i32::from(digit - b'0');
            if value > i32::MAX / 10 || value * 10 > i32::MAX - digit {
                return error(Msg::from_bytes(b"integral size overflow"));
            }
            value = value * 10 + digit;
            self.pos += 1;
        }
        Ok(value)
    }
}

/// `optsize`: the byte size of an option (0 for options without data).
fn option_size(opt: u8, fmt: &mut Format) -> Outcome<usize> {
    let size = match opt {
        b'B' | b'b' | b'x' => 1,
        b'H' | b'h' => 2,
        b'L' | b'l' | b'T' | b'd' => 8,
        b'f' => 4,
        b'c' => fmt.number(1)? as usize,
        b'i' | b'I' => {
            let size = fmt.number(4)?;
            if size > MAX_INT_SIZE {
                return error(msg(format_args!(
                    "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                )));
            }
            size as usize
        }
        _ => 0,
    };
    Ok(size)
}

/// `gettoalign`: padding needed before an item of `size` bytes at offset `len`.
fn padding_before(len: usize, header: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(header.align);
    size.wrapping_sub(len & size.wrapping_sub(1)) & size.wrapping_sub(1)
}

/// `controloptions`: endianness, alignment and blanks; anything else is invalid.
fn apply_control(opt: u8, fmt: &mut Format, header: &mut Header) -> Outcome<()> {
    match opt {
        b' ' => Ok(()),
        b'>' => {
            header.endian = Endian::Big;
            Ok(())
        }
        b'<' => {
            header.endian = Endian::Little;
            Ok(())
        }
        b'!' => {
            let align = fmt.number(MAX_ALIGN)?;
            if align <= 0 || align & (align - 1) != 0 {
                return error(msg(format_args!("alignment {align} is not a power of 2")));
            }
            header.align = align as usize;
            Ok(())
        }
        _ => {
            let mut text = Msg::from_bytes(b"invalid format option '");
            text.push_bytes(&[opt, b'\'']);
            Err(Failure::Arg(1, text))
        }
    }
}

fn is_integer_option(opt: u8) -> bool {
    matches!(
        opt,
        b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I'
    )
}

/// `putinteger`: the low `size` bytes of the 64-bit value (zeros beyond 8 bytes).
fn put_integer(out: &mut Vec<u8>, n: f64, endian: Endian, size: usize) {
    let value = if n < 0.0 {
        c_double_to_i64(n) as u64
    } else {
        c_double_to_u64(n)
    };
    let byte_at = |i: usize| if i < 8 { (value >> (8 * i)) as u8 } else { 0 };
    match endian {
        Endian::Little => out.extend((0..size).map(byte_at)),
        Endian::Big => out.extend((0..size).rev().map(byte_at)),
    }
}

/// `getinteger`: C's shift loop over an unsigned long, including the x86 behaviour
/// of shifts by 64 or more (count taken modulo 64).
fn get_integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
    let mut value: u64 = 0;
    let mut feed = |b: &u8| value = (value << 8) | u64::from(*b);
    match endian {
        Endian::Big => bytes.iter().for_each(&mut feed),
        Endian::Little => bytes.iter().rev().for_each(&mut feed),
    }
    if !signed {
        return value as f64;
    }
    let shift = ((bytes.len() as u32).wrapping_mul(8).wrapping_sub(1)) & 63;
    let mask = u64::MAX << shift;
    if value & mask != 0 {
        value |= mask;
    }
    value as i64 as f64
}

fn ordered<const N: usize>(mut bytes: [u8; N], endian: Endian) -> [u8; N] {
    if endian == Endian::Big {
        bytes.reverse();
    }
    bytes
}

/// Packs one data option from argument `*arg` (advanced past what it consumes);
/// returns the option's final size.
///
/// # Safety
/// `l` must be valid; runs inside `run_protected`.
unsafe fn pack_item(
    l: State,
    opt: u8,
    size: usize,
    arg: &mut c_int,
    endian: Endian,
    out: &mut Vec<u8>,
) -> Outcome<usize> {
    let this_arg = *arg;
    *arg = arg.wrapping_add(1);
    match opt {
        b'f' => {
            let f = c_double_to_float(check_number(l, this_arg)?);
            out.extend(ordered(f.to_le_bytes(), endian));
        }
        b'd' => {
            let d = check_number(l, this_arg)?;
            out.extend(ordered(d.to_le_bytes(), endian));
        }
        b'c' | b's' => {
            let text = check_bytes(l, this_arg)?;
            let size = if size == 0 { text.len() } else { size };
            let Some(part) = text.get(..size) else {
                return Err(Failure::Arg(*arg, Msg::from_bytes(b"string too short")));
            };
            out.extend_from_slice(part);
            if opt == b's' {
                out.push(0);
                return Ok(size + 1);
            }
            return Ok(size);
        }
        _ => put_integer(out, check_number(l, this_arg)?, endian, size),
    }
    Ok(size)
}

fn pack_body(l: State, _ctx: (), out: &mut Vec<u8>) -> Outcome<c_int> {
    // SAFETY: runs inside `run_protected`, frames own nothing but borrows.
    unsafe {
        let fmt = check_bytes(l, 1)?;
        ffi::lua_pushnil(l); // C's "mark": the first missing argument reads as nil
        let mut fmt = Format::new(fmt);
        let mut header = Header::new();
        let mut arg: c_int = 2;
        let mut total: usize = 0;
        while let Some(opt) = fmt.next_option() {
            let mut size = option_size(opt, &mut fmt)?;
            let pad = padding_before(total, &header, opt, size);
            total = total.wrapping_add(pad);
            out.resize(out.len() + pad, 0);
            match opt {
                b'x' => out.push(0),
                b'f' | b'd' | b'c' | b's' => {
                    size = pack_item(l, opt, size, &mut arg, header.endian, out)?;
                }
                _ if is_integer_option(opt) => {
                    size = pack_item(l, opt, size, &mut arg, header.endian, out)?;
                }
                _ => apply_control(opt, &mut fmt, &mut header)?,
            }
            total = total.wrapping_add(size);
        }
        luaffi::push_bytes(l, out);
        Ok(1)
    }
}

unsafe extern "C-unwind" fn struct_pack(l: State) -> c_int {
    luaffi::run_protected(l, (), pack_body)
}

/// Checks that `size` bytes at `pos` fit in `len` bytes ("data string too short").
fn fits(pos: usize, size: usize, len: usize) -> Outcome<()> {
    if size <= len && pos <= len - size {
        Ok(())
    } else {
        Err(Failure::Arg(2, Msg::from_bytes(b"data string too short")))
    }
}

/// Pushes one unpacked item and returns its size in the data.
///
/// # Safety
/// `l` must be valid with a free slot; `data` must stay alive.
unsafe fn unpack_item(
    l: State,
    opt: u8,
    size: usize,
    data: &[u8],
    pos: usize,
    header: &Header,
) -> Outcome<usize> {
    let field = |n: usize| data.get(pos..pos + n).unwrap_or(&[]);
    match opt {
        _ if is_integer_option(opt) => {
            let signed = opt.is_ascii_lowercase();
            ffi::lua_pushnumber(l, get_integer(field(size), header.endian, signed));
        }
        b'f' => {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(data.get(pos..pos + 4).unwrap_or(&[0; 4]));
            let f = f32::from_le_bytes(ordered(bytes, header.endian));
            ffi::lua_pushnumber(l, c_float_to_double(f));
        }
        b'd' => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(data.get(pos..pos + 8).unwrap_or(&[0; 8]));
            ffi::lua_pushnumber(l, f64::from_le_bytes(ordered(bytes, header.endian)));
        }
        b'c' => return unpack_chars(l, size, data, pos),
        b's' => {
            let rest = data.get(pos..).unwrap_or(&[]);
            let Some(end) = rest.iter().position(|&b| b == 0) else {
                return error(Msg::from_bytes(b"unfinished string in data"));
            };
            luaffi::push_bytes(l, rest.get(..end).unwrap_or(&[]));
            return Ok(end + 1);
        }
        _ => {}
    }
    Ok(size)
}

/// `c<n>`; for `c0` the length is the previous result, which is replaced.
///
/// # Safety
/// Same as [`unpack_item`].
unsafe fn unpack_chars(l: State, mut size: usize, data: &[u8], pos: usize) -> Outcome<usize> {
    if size == 0 {
        if ffi::lua_gettop(l) <= 2 || ffi::lua_isnumber(l, -1) == 0 {
            return error(Msg::from_bytes(b"format 'c0' needs a previous size"));
        }
        size = c_double_to_u64(ffi::lua_tonumber(l, -1)) as usize;
        ffi::lua_settop(l, -2);
        fits(pos, size, data.len())?;
    }
    luaffi::push_bytes(l, data.get(pos..pos + size).unwrap_or(&[]));
    Ok(size)
}

/// # Safety
/// Called by Lua as a C function.
unsafe fn unpack_all(l: State) -> Outcome<c_int> {
    let fmt = check_bytes(l, 1)?;
    let data = check_bytes(l, 2)?;
    let start = ffi::luaL_optinteger(l, 3, 1) as usize;
    if start == 0 {
        return Err(Failure::Arg(
            3,
            Msg::from_bytes(b"offset must be 1 or greater"),
        ));
    }
    let mut pos = start - 1;
    ffi::lua_settop(l, 2);
    let mut fmt = Format::new(fmt);
    let mut header = Header::new();
    while let Some(opt) = fmt.next_option() {
        let size = option_size(opt, &mut fmt)?;
        pos = pos.wrapping_add(padding_before(pos, &header, opt, size));
        fits(pos, size, data.len())?;
        // Two slots: the item and the final position (Redis's CVE-2021-32626 fix).
        luaffi::check_stack(l, 2, "too many results")?;
        let used = match opt {
            b'x' => size,
            _ if is_integer_option(opt) || matches!(opt, b'f' | b'd' | b'c' | b's') => {
                unpack_item(l, opt, size, data, pos, &header)?
            }
            _ => {
                apply_control(opt, &mut fmt, &mut header)?;
                size
            }
        };
        pos = pos.wrapping_add(used);
    }
    ffi::lua_pushinteger(l, pos.wrapping_add(1) as ffi::lua_Integer);
    Ok(ffi::lua_gettop(l) - 2)
}

unsafe extern "C-unwind" fn struct_unpack(l: State) -> c_int {
    let outcome = unpack_all(l);
    or_raise(l, outcome)
}

/// # Safety
/// Called by Lua as a C function.
unsafe fn fixed_size(l: State) -> Outcome<usize> {
    let fmt = check_bytes(l, 1)?;
    let mut fmt = Format::new(fmt);
    let mut header = Header::new();
    let mut pos: usize = 0;
    while let Some(opt) = fmt.next_option() {
        let size = option_size(opt, &mut fmt)?;
        pos = pos.wrapping_add(padding_before(pos, &header, opt, size));
        if opt == b's' {
            return Err(Failure::Arg(
                1,
                Msg::from_bytes(b"option 's' has no fixed size"),
            ));
        }
        if opt == b'c' && size == 0 {
            return Err(Failure::Arg(
                1,
                Msg::from_bytes(b"option 'c0' has no fixed size"),
            ));
        }
        if !opt.is_ascii_alphanumeric() {
            apply_control(opt, &mut fmt, &mut header)?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(pos)
}

unsafe extern "C-unwind" fn struct_size(l: State) -> c_int {
    let outcome = fixed_size(l);
    let size = or_raise(l, outcome);
    ffi::lua_pushinteger(l, size as ffi::lua_Integer);
    1
}

unsafe extern "C-unwind" fn open_struct(l: State) -> c_int {
    ffi::lua_newtable(l);
    luaffi::set_closure(l, c"pack", struct_pack, 0);
    luaffi::set_closure(l, c"unpack", struct_unpack, 0);
    luaffi::set_closure(l, c"size", struct_size, 0);
    1
}

/// Creates the global `struct` table (fields: pack, size, unpack).
pub fn register(lua: &mlua::Lua) -> mlua::Result<()> {
    super::register_global(lua, "struct", open_struct)
}
