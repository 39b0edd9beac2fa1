//! `bit`: LuaBitOp 1.0.2 (Mike Pall) as shipped in Redis 7.0.15's
//! deps/lua/src/lua_bit.c, ported to Rust on the Lua C API.
//!
//! Numbers are converted like the C `barg`: add 2^52+2^51 to the double and keep
//! the low 32 bits of its representation (round-to-nearest-even, wraps modulo 2^32,
//! inf/NaN give 0). Results are signed 32-bit values. Non-numbers raise
//! "bad argument #n to 'f' (number expected, got T)" like the C version.
//! No known differences.
use std::ffi::c_int;

use super::luaffi::{self, ffi, State};

/// `barg`: argument `idx` as 32 bits, raising a type error for non-numbers.
///
/// # Safety
/// Called from a Lua C function; raises.
unsafe fn bit_arg(l: State, idx: c_int) -> u32 {
    let n = ffi::lua_tonumber(l, idx);
    let bits = (n + 6_755_399_441_055_744.0).to_bits() as u32;
    if bits == 0 && ffi::lua_isnumber(l, idx) == 0 {
        ffi::luaL_typerror(l, idx, c"number".as_ptr());
    }
    bits
}

/// # Safety
/// `l` must be valid with a free slot.
unsafe fn push_bits(l: State, bits: u32) -> c_int {
    ffi::lua_pushnumber(l, f64::from(bits as i32));
    1
}

unsafe extern "C-unwind" fn bit_tobit(l: State) -> c_int {
    push_bits(l, bit_arg(l, 1))
}

unsafe extern "C-unwind" fn bit_bnot(l: State) -> c_int {
    push_bits(l, !bit_arg(l, 1))
}

/// Folds all arguments with `op`, first argument included (checked even if alone).
///
/// # Safety
/// Called from a Lua C function; raises.
unsafe fn fold_args(l: State, op: fn(u32, u32) -> u32) -> c_int {
    let mut acc = bit_arg(l, 1);
    let mut idx = ffi::lua_gettop(l);
    while idx > 1 {
        acc = op(acc, bit_arg(l, idx));
        idx -= 1;
    }
    push_bits(l, acc)
}

unsafe extern "C-unwind" fn bit_band(l: State) -> c_int {
    fold_args(l, |a, b| a & b)
}

unsafe extern "C-unwind" fn bit_bor(l: State) -> c_int {
    fold_args(l, |a, b| a | b)
}

unsafe extern "C-unwind" fn bit_bxor(l: State) -> c_int {
    fold_args(l, |a, b| a ^ b)
}

/// Applies a shift/rotate with the count taken modulo 32.
///
/// # Safety
/// Called from a Lua C function; raises.
unsafe fn shift_op(l: State, op: fn(u32, u32) -> u32) -> c_int {
    let value = bit_arg(l, 1);
    let count = bit_arg(l, 2) & 31;
    push_bits(l, op(value, count))
}

unsafe extern "C-unwind" fn bit_lshift(l: State) -> c_int {
    shift_op(l, |b, n| b << n)
}

unsafe extern "C-unwind" fn bit_rshift(l: State) -> c_int {
    shift_op(l, |b, n| b >> n)
}

unsafe extern "C-unwind" fn bit_arshift(l: State) -> c_int {
    shift_op(l, |b, n| ((b as i32) >> n) as u32)
}

unsafe extern "C-unwind" fn bit_rol(l: State) -> c_int {
    shift_op(l, |b, n| b.rotate_left(n))
}

unsafe extern "C-unwind" fn bit_ror(l: State) -> c_int {
    shift_op(l, |b, n| b.rotate_right(n))
}

unsafe extern "C-unwind" fn bit_bswap(l: State) -> c_int {
    push_bits(l, bit_arg(l, 1).swap_bytes())
}

/// `tohex(x [, n])`: |n| low hex digits (at most 8), upper case when n < 0.
unsafe extern "C-unwind" fn bit_tohex(l: State) -> c_int {
    let mut bits = bit_arg(l, 1);
    let width = if ffi::lua_isnone(l, 2) != 0 {
        8
    } else {
        i64::from(bit_arg(l, 2) as i32)
    };
    let digits: &[u8; 16] = if width < 0 {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let count = width.unsigned_abs().min(8) as usize;
    let mut buf = [0u8; 8];
    for slot in buf.iter_mut().take(count).rev() {
        *slot = digits[(bits & 15) as usize];
        bits >>= 4;
    }
    luaffi::push_bytes(l, buf.get(..count).unwrap_or(&[]));
    1
}

unsafe extern "C-unwind" fn open_bit(l: State) -> c_int {
    let functions: [(&std::ffi::CStr, ffi::lua_CFunction); 12] = [
        (c"tobit", bit_tobit),
        (c"bnot", bit_bnot),
        (c"band", bit_band),
        (c"bor", bit_bor),
        (c"bxor", bit_bxor),
        (c"lshift", bit_lshift),
        (c"rshift", bit_rshift),
        (c"arshift", bit_arshift),
        (c"rol", bit_rol),
        (c"ror", bit_ror),
        (c"bswap", bit_bswap),
        (c"tohex", bit_tohex),
    ];
    ffi::lua_newtable(l);
    for (name, func) in functions {
        luaffi::set_closure(l, name, func, 0);
    }
    1
}

/// Creates the global `bit` table (arshift band bnot bor bswap bxor lshift rol ror
/// rshift tobit tohex).
pub fn register(lua: &mlua::Lua) -> mlua::Result<()> {
    super::register_global(lua, "bit", open_bit)
}
