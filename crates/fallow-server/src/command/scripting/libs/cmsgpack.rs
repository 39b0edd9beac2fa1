//! `cmsgpack`: lua-cmsgpack 0.4.0 (Salvatore Sanfilippo) as patched in Redis
//! 7.0.15's deps/lua/src/lua_cmsgpack.c, ported to Rust on the Lua C API.
//!
//! Mirrored exactly: packing several values into one stream, table detection (keys
//! exactly 1..n are an array, everything else a map), encoding choices (smallest
//! int width, float32 when the double round-trips through float, str8 0xd9 for
//! 32..255 bytes, nesting limit 16 after which tables encode as nil, non
//! serialisable values as nil), decoding of every type lua-cmsgpack knows (uint64
//! through lua_Integer wrap-around, bin/ext types rejected as "Bad data format"),
//! unpack/unpack_one/unpack_limit offsets and limits with their error texts
//! (including C's `%d` casts), and the `luaL_checkstack` calls of Redis's
//! CVE-2021-32626 fix with their messages. Lengths from the input never drive an
//! allocation: a table is filled element by element until the input runs out.
//!
//! Documented differences: pack/unpack run their body under a protected call, so
//! they use one more C call level (LUAI_MAXCCALLS is 200) and a memory error inside
//! them is re-raised as a runtime error with the same message; the pack buffer is
//! Rust heap memory, where C 0.4.0 allocated it through Lua's allocator (so it
//! counted toward the Lua memory total while packing).
use std::ffi::c_int;

use super::luaffi::{
    self, c_double_to_float, c_double_to_i32, c_double_to_i64, c_float_to_double, check_stack,
    error, ffi, msg, or_raise, raise_arg_error, raise_error, Msg, Outcome, State,
};

const MAX_NESTING: c_int = 16;
const TOO_MANY_VALUES: &str =
    "too many return values at once; use unpack_one or unpack_limit instead.";

// ===== Encoding =====

fn encode_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

/// `mp_encode_double`: float32 when the value survives the round trip.
fn encode_double(out: &mut Vec<u8>, d: f64) {
    let f = c_double_to_float(d);
    if d == c_float_to_double(f) {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

/// `mp_encode_int`: the smallest MessagePack integer form.
fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
}

/// Array (`fix`, 0x90) or map (`fix`, 0x80) header for `n` entries.
fn encode_header(out: &mut Vec<u8>, n: u64, fix: u8, code16: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 65535 {
        out.push(code16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(code16 + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// `mp_encode_lua_number`: integers (those equal to their int64 conversion) as
/// integers, everything else as float/double.
fn encode_number(out: &mut Vec<u8>, n: f64) {
    let as_int = c_double_to_i64(n);
    if !n.is_infinite() && as_int as f64 == n {
        encode_int(out, as_int);
    } else {
        encode_double(out, n);
    }
}

/// `table_is_an_array`: keys are exactly the integers 1..n.
///
/// # Safety
/// `l` must be valid with a table on top.
unsafe fn table_is_array(l: State) -> Outcome<bool> {
    let top = ffi::lua_gettop(l);
    check_stack(l, 2, "in function table_is_an_array")?;
    let mut count: c_int = 0;
    let mut max: c_int = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_settop(l, -2);
        let n = ffi::lua_tonumber(l, -1);
        let is_index = ffi::lua_type(l, -1) == ffi::LUA_TNUMBER
            && n > 0.0
            && !n.is_infinite()
            && f64::from(c_double_to_i32(n)) == n;
        if !is_index {
            ffi::lua_settop(l, top);
            return Ok(false);
        }
        if n > f64::from(max) {
            max = c_double_to_i32(n);
        }
        count = count.wrapping_add(1);
    }
    ffi::lua_settop(l, top);
    Ok(max == count)
}

/// # Safety
/// `l` must be valid with an array-like table on top.
unsafe fn encode_array(l: State, out: &mut Vec<u8>, level: c_int) -> Outcome<()> {
    let len = ffi::lua_objlen(l, -1);
    encode_header(out, len as u64, 0x90, 0xdc);
    check_stack(l, 1, "in function mp_encode_lua_table_as_array")?;
    for j in 1..=len {
        ffi::lua_pushnumber(l, j as f64);
        ffi::lua_rawget_(l, -2);
        encode_value(l, out, level + 1)?;
    }
    Ok(())
}

/// # Safety
/// `l` must be valid with a table on top.
unsafe fn encode_map(l: State, out: &mut Vec<u8>, level: c_int) -> Outcome<()> {
    check_stack(l, 3, "in function mp_encode_lua_table_as_map")?;
    let mut len: u64 = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_settop(l, -2);
        len += 1;
    }
    encode_header(out, len, 0x80, 0xde);
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_pushvalue(l, -2);
        encode_value(l, out, level + 1)?;
        encode_value(l, out, level + 1)?;
    }
    Ok(())
}

/// `mp_encode_lua_type`: encodes and pops the value on top. Recursion is bounded
/// by the nesting limit (tables deeper than 16 levels encode as nil).
///
/// # Safety
/// `l` must be valid with the value on top.
unsafe fn encode_value(l: State, out: &mut Vec<u8>, level: c_int) -> Outcome<()> {
    match ffi::lua_type(l, -1) {
        ffi::LUA_TSTRING => encode_bytes(out, luaffi::to_bytes(l, -1).unwrap_or(&[])),
        ffi::LUA_TBOOLEAN => out.push(if ffi::lua_toboolean(l, -1) != 0 {
            0xc3
        } else {
            0xc2
        }),
        ffi::LUA_TNUMBER => encode_number(out, ffi::lua_tonumber(l, -1)),
        ffi::LUA_TTABLE if level < MAX_NESTING => {
            if table_is_array(l)? {
                encode_array(l, out, level)?;
            } else {
                encode_map(l, out, level)?;
            }
        }
        _ => out.push(0xc0),
    }
    ffi::lua_settop(l, -2);
    Ok(())
}

fn pack_body(l: State, _ctx: (), out: &mut Vec<u8>) -> Outcome<c_int> {
    // SAFETY: runs inside `run_protected` with the values to pack as arguments.
    unsafe {
        let nargs = ffi::lua_gettop(l);
        for i in 1..=nargs {
            check_stack(l, 1, "in function mp_check")?;
            ffi::lua_pushvalue(l, i);
            encode_value(l, out, 0)?;
            luaffi::push_bytes(l, out);
            out.clear();
        }
        ffi::lua_concat(l, nargs);
        Ok(1)
    }
}

unsafe extern "C-unwind" fn mp_pack(l: State) -> c_int {
    let nargs = ffi::lua_gettop(l);
    if nargs == 0 {
        raise_arg_error(l, 0, b"MessagePack pack needs input.");
    }
    if ffi::lua_checkstack(l, nargs) == 0 {
        raise_arg_error(l, 0, b"Too many arguments for MessagePack pack.");
    }
    luaffi::run_protected(l, (), pack_body)
}

// ===== Decoding =====

/// Why decoding stopped early.
enum Stop {
    MissingBytes,
    BadFormat,
    Failed(luaffi::Failure),
}

impl From<luaffi::Failure> for Stop {
    fn from(failure: luaffi::Failure) -> Self {
        Stop::Failed(failure)
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn left(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// `mp_cur_need`.
    fn need(&self, n: usize) -> Result<(), Stop> {
        if self.left() < n {
            Err(Stop::MissingBytes)
        } else {
            Ok(())
        }
    }

    /// The `N` bytes after the type byte (the caller checked they exist).
    fn field<const N: usize>(&self) -> [u8; N] {
        let mut bytes = [0u8; N];
        if let Some(src) = self.data.get(self.pos + 1..self.pos + 1 + N) {
            bytes.copy_from_slice(src);
        }
        bytes
    }

    /// Checks for a `width`-byte header, then consumes it and returns the length.
    fn length(&mut self, width: usize) -> Result<usize, Stop> {
        self.need(1 + width)?;
        let len = match width {
            1 => usize::from(self.field::<1>()[0]),
            2 => usize::from(u16::from_be_bytes(self.field())),
            _ => u32::from_be_bytes(self.field()) as usize,
        };
        self.pos += 1 + width;
        Ok(len)
    }

    /// Consumes `len` bytes (checked) and returns them.
    fn take(&mut self, len: usize) -> Result<&[u8], Stop> {
        self.need(len)?;
        let start = self.pos;
        self.pos += len;
        Ok(self.data.get(start..self.pos).unwrap_or(&[]))
    }
}

/// A table being filled; the table (and the array index or map key being
/// processed) sit on the Lua stack exactly as in the C recursion.
#[derive(Clone, Copy)]
enum DecodeFrame {
    Array { remaining: u64, next_index: c_int },
    Map { remaining: u64, have_key: bool },
}

/// What the type byte started.
enum Started {
    Value,
    Array(u64),
    Map(u64),
}

/// Pushes a number and consumes the type byte plus `N` data bytes.
///
/// # Safety
/// `l` must be valid with a free slot.
unsafe fn push_number<const N: usize>(
    l: State,
    cur: &mut Cursor,
    convert: fn([u8; N]) -> f64,
) -> Result<Started, Stop> {
    cur.need(1 + N)?;
    ffi::lua_pushnumber(l, convert(cur.field::<N>()));
    cur.pos += 1 + N;
    Ok(Started::Value)
}

/// # Safety
/// `l` must be valid with a free slot.
unsafe fn push_string(l: State, cur: &mut Cursor, len: usize) -> Result<Started, Stop> {
    let bytes = cur.take(len)?;
    luaffi::push_bytes(l, bytes);
    Ok(Started::Value)
}

/// Decodes the type byte at the cursor: pushes scalars, reports containers.
///
/// # Safety
/// `l` must be valid with a free slot.
unsafe fn start_value(l: State, cur: &mut Cursor) -> Result<Started, Stop> {
    let code = cur.data.get(cur.pos).copied().unwrap_or(0);
    let started = match code {
        0xcc => push_number(l, cur, |[b]: [u8; 1]| f64::from(b))?,
        0xd0 => push_number(l, cur, |[b]: [u8; 1]| f64::from(b as i8))?,
        0xcd => push_number(l, cur, |b| f64::from(u16::from_be_bytes(b)))?,
        0xd1 => push_number(l, cur, |b| f64::from(i16::from_be_bytes(b)))?,
        0xce => push_number(l, cur, |b| f64::from(u32::from_be_bytes(b)))?,
        0xd2 => push_number(l, cur, |b| f64::from(i32::from_be_bytes(b)))?,
        0xcf => push_number(l, cur, |b| u64::from_be_bytes(b) as i64 as f64)?,
        0xd3 => push_number(l, cur, |b| i64::from_be_bytes(b) as f64)?,
        0xca => push_number(l, cur, |b| c_float_to_double(f32::from_be_bytes(b)))?,
        0xcb => push_number(l, cur, f64::from_be_bytes)?,
        0xc0 | 0xc2 | 0xc3 => {
            match code {
                0xc0 => ffi::lua_pushnil(l),
                _ => ffi::lua_pushboolean(l, c_int::from(code == 0xc3)),
            }
            cur.pos += 1;
            Started::Value
        }
        0xd9 => {
            let len = cur.length(1)?;
            push_string(l, cur, len)?
        }
        0xda => {
            let len = cur.length(2)?;
            push_string(l, cur, len)?
        }
        0xdb => {
            let len = cur.length(4)?;
            push_string(l, cur, len)?
        }
        0xdc => Started::Array(cur.length(2)? as u64),
        0xdd => Started::Array(cur.length(4)? as u64),
        0xde => Started::Map(cur.length(2)? as u64),
        0xdf => Started::Map(cur.length(4)? as u64),
        _ if code & 0x80 == 0 => {
            ffi::lua_pushnumber(l, f64::from(code));
            cur.pos += 1;
            Started::Value
        }
        _ if code & 0xe0 == 0xe0 => {
            ffi::lua_pushnumber(l, f64::from(code as i8));
            cur.pos += 1;
            Started::Value
        }
        _ if code & 0xe0 == 0xa0 => {
            cur.need(1 + usize::from(code & 0x1f))?;
            cur.pos += 1;
            push_string(l, cur, usize::from(code & 0x1f))?
        }
        _ if code & 0xf0 == 0x90 => {
            cur.pos += 1;
            Started::Array(u64::from(code & 0x0f))
        }
        _ if code & 0xf0 == 0x80 => {
            cur.pos += 1;
            Started::Map(u64::from(code & 0x0f))
        }
        _ => return Err(Stop::BadFormat),
    };
    Ok(started)
}

/// Opens a container: pushes its table; returns true if it is already complete.
///
/// # Safety
/// `l` must be valid with a free slot.
unsafe fn open_container(
    l: State,
    started: Started,
    frames: &mut Vec<DecodeFrame>,
) -> Result<bool, Stop> {
    match started {
        Started::Value => Ok(true),
        Started::Array(len) => {
            ffi::lua_newtable(l);
            check_stack(l, 1, "in function mp_decode_to_lua_array")?;
            if len == 0 {
                return Ok(true);
            }
            ffi::lua_pushnumber(l, 1.0);
            frames.push(DecodeFrame::Array {
                remaining: len - 1,
                next_index: 2,
            });
            Ok(false)
        }
        Started::Map(len) => {
            ffi::lua_newtable(l);
            if len == 0 {
                return Ok(true);
            }
            frames.push(DecodeFrame::Map {
                remaining: len - 1,
                have_key: false,
            });
            Ok(false)
        }
    }
}

/// Stores a finished value into its container; returns false when the top-level
/// value is complete, true when the next value must be decoded.
///
/// # Safety
/// `l` must be valid and the stack must match `frames`.
unsafe fn finish_value(l: State, frames: &mut Vec<DecodeFrame>) -> bool {
    while let Some(frame) = frames.last_mut() {
        match frame {
            DecodeFrame::Array {
                remaining,
                next_index,
            } => {
                ffi::lua_settable(l, -3);
                if *remaining > 0 {
                    *remaining -= 1;
                    ffi::lua_pushnumber(l, f64::from(*next_index));
                    *next_index = next_index.wrapping_add(1);
                    return true;
                }
            }
            DecodeFrame::Map {
                remaining,
                have_key,
            } => {
                if !*have_key {
                    *have_key = true;
                    return true;
                }
                ffi::lua_settable(l, -3);
                if *remaining > 0 {
                    *remaining -= 1;
                    *have_key = false;
                    return true;
                }
            }
        }
        frames.pop();
    }
    false
}

/// `mp_decode_to_lua_type`: decodes one value (iteratively) and pushes it.
///
/// # Safety
/// `l` must be valid; the data must stay on the stack.
unsafe fn decode_one(
    l: State,
    cur: &mut Cursor,
    frames: &mut Vec<DecodeFrame>,
) -> Result<(), Stop> {
    frames.clear();
    loop {
        cur.need(1)?;
        check_stack(l, 1, TOO_MANY_VALUES)?;
        let started = start_value(l, cur)?;
        if open_container(l, started, frames)? && !finish_value(l, frames) {
            return Ok(());
        }
    }
}

#[derive(Clone, Copy)]
struct Request {
    offset: usize,
    limit: i64,
    decode_all: bool,
}

fn unpack_body(l: State, req: Request, frames: &mut Vec<DecodeFrame>) -> Outcome<c_int> {
    // SAFETY: runs inside `run_protected`; argument 1 is the (string) input.
    unsafe {
        let data = luaffi::to_bytes(l, 1).unwrap_or(&[]);
        let mut cur = Cursor {
            data,
            pos: req.offset,
        };
        let mut count: c_int = 0;
        while cur.left() > 0 && i64::from(count) < req.limit {
            match decode_one(l, &mut cur, frames) {
                Ok(()) => {}
                Err(Stop::MissingBytes) => {
                    return error(Msg::from_bytes(b"Missing bytes in input."))
                }
                Err(Stop::BadFormat) => {
                    return error(Msg::from_bytes(b"Bad data format in input."))
                }
                Err(Stop::Failed(failure)) => return Err(failure),
            }
            count = count.wrapping_add(1);
        }
        if !req.decode_all {
            check_stack(l, 1, "in function mp_unpack_full")?;
            let next = if cur.left() == 0 { -1 } else { cur.pos as i64 };
            ffi::lua_pushinteger(l, next as ffi::lua_Integer);
            ffi::lua_insert(l, 2);
            count = count.wrapping_add(1);
        }
        Ok(count)
    }
}

/// `mp_unpack_full`.
///
/// # Safety
/// Called from a cmsgpack C function; raises.
unsafe fn unpack_full(l: State, limit: i64, offset: i64) -> c_int {
    let checked = luaffi::check_bytes(l, 1).map(<[u8]>::len);
    let len = or_raise(l, checked);
    if offset < 0 || limit < 0 {
        let text = msg(format_args!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32, len as i32
        ));
        raise_error(l, text.as_bytes());
    }
    if offset as u64 > len as u64 {
        let text = msg(format_args!(
            "Start offset {} greater than input length {}.",
            offset as i32, len as i32
        ));
        raise_error(l, text.as_bytes());
    }
    let decode_all = limit == 0 && offset == 0;
    let request = Request {
        offset: offset as usize,
        limit: if decode_all {
            i64::from(i32::MAX)
        } else {
            limit
        },
        decode_all,
    };
    luaffi::run_protected(l, request, unpack_body)
}

unsafe extern "C-unwind" fn mp_unpack(l: State) -> c_int {
    unpack_full(l, 0, 0)
}

unsafe extern "C-unwind" fn mp_unpack_one(l: State) -> c_int {
    let offset = ffi::luaL_optinteger(l, 2, 0);
    ffi::lua_settop(l, -(ffi::lua_gettop(l) - 1) - 1);
    unpack_full(l, 1, offset)
}

unsafe extern "C-unwind" fn mp_unpack_limit(l: State) -> c_int {
    let limit = ffi::luaL_checkinteger(l, 2);
    let offset = ffi::luaL_optinteger(l, 3, 0);
    ffi::lua_settop(l, -(ffi::lua_gettop(l) - 1) - 1);
    unpack_full(l, limit, offset)
}

unsafe extern "C-unwind" fn open_cmsgpack(l: State) -> c_int {
    ffi::lua_newtable(l);
    luaffi::set_closure(l, c"pack", mp_pack, 0);
    luaffi::set_closure(l, c"unpack", mp_unpack, 0);
    luaffi::set_closure(l, c"unpack_one", mp_unpack_one, 0);
    luaffi::set_closure(l, c"unpack_limit", mp_unpack_limit, 0);
    luaffi::set_string_field(l, c"_NAME", b"cmsgpack");
    luaffi::set_string_field(l, c"_VERSION", b"lua-cmsgpack 0.4.0");
    luaffi::set_string_field(
        l,
        c"_COPYRIGHT",
        b"Copyright (C) 2012, Salvatore Sanfilippo",
    );
    luaffi::set_string_field(l, c"_DESCRIPTION", b"MessagePack C implementation for Lua");
    1
}

/// Creates the global `cmsgpack` table (fields: _COPYRIGHT _DESCRIPTION _NAME
/// _VERSION pack unpack unpack_limit unpack_one).
pub fn register(lua: &mlua::Lua) -> mlua::Result<()> {
    super::register_global(lua, "cmsgpack", open_cmsgpack)
}
