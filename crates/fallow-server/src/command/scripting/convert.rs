//! Values between Lua and RESP, by Redis 7.0's rules (`script_lua.c`).
//!
//! | RESP reply (what `redis.call` returns) | Lua value                                   |
//! |----------------------------------------|---------------------------------------------|
//! | integer                                | number                                      |
//! | bulk string                            | string                                      |
//! | null bulk / null array                 | false (RESP2) or nil (after `setresp(3)`)   |
//! | status                                 | `{ok=text}`                                 |
//! | error                                  | `{err=text}` (raised by `redis.call`)       |
//! | array / push                           | array table                                 |
//! | map / set (RESP3)                      | `{map={k=v}}` / `{set={k=true}}`            |
//! | double / big number (RESP3)            | `{double=n}` / `{big_number=text}`          |
//! | boolean (RESP3)                        | true / false                                |
//! | verbatim string (RESP3)                | `{verbatim_string={format=f, string=s}}`    |
//!
//! A script's return value goes the other way: strings are bulk strings, numbers integers (truncated),
//! true `:1` and false null (booleans under `setresp(3)`), tables by their `err`, `ok`, `double`,
//! `big_number`, `map`, `set` or `verbatim_string` field, else arrays up to the first nil.
use fallow_proto::reply_value::ReplyValue;
use fallow_proto::ReplyWriter;
use mlua::{Lua, Table, Value};

/// Tables nested deeper than this in a script's reply are cut off with an error element.
pub const REPLY_DEPTH_MAX: usize = 1_000;

/// A reply as `redis.call` hands it to the script; `resp3` is the script's `redis.setresp` version.
pub fn reply_to_lua(lua: &Lua, reply: &ReplyValue, resp3: bool) -> mlua::Result<Value> {
    Ok(match reply {
        ReplyValue::Int(value) => Value::Number(*value as f64),
        ReplyValue::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        ReplyValue::Null if resp3 => Value::Nil,
        ReplyValue::Null => Value::Boolean(false),
        ReplyValue::Status(text) => {
            field_table(lua, "ok", Value::String(lua.create_string(text)?))?
        }
        ReplyValue::Error(text) => error_table(lua, text)?,
        ReplyValue::Array(items) | ReplyValue::Push(items) => array(lua, items, resp3)?,
        ReplyValue::Map(pairs) => {
            let map = lua.create_table_with_capacity(0, pairs.len())?;
            for (key, value) in pairs {
                map.raw_set(
                    reply_to_lua(lua, key, resp3)?,
                    reply_to_lua(lua, value, resp3)?,
                )?;
            }
            field_table(lua, "map", Value::Table(map))?
        }
        ReplyValue::Set(items) => {
            let set = lua.create_table_with_capacity(0, items.len())?;
            for item in items {
                set.raw_set(reply_to_lua(lua, item, resp3)?, true)?;
            }
            field_table(lua, "set", Value::Table(set))?
        }
        ReplyValue::Double(value) => field_table(lua, "double", Value::Number(*value))?,
        ReplyValue::Bool(value) => Value::Boolean(*value),
        ReplyValue::BigNumber(text) => {
            field_table(lua, "big_number", Value::String(lua.create_string(text)?))?
        }
        ReplyValue::Verbatim(format, text) => {
            let verbatim = lua.create_table()?;
            verbatim.raw_set("format", lua.create_string(format)?)?;
            verbatim.raw_set("string", lua.create_string(text)?)?;
            field_table(lua, "verbatim_string", Value::Table(verbatim))?
        }
    })
}

fn array(lua: &Lua, items: &[ReplyValue], resp3: bool) -> mlua::Result<Value> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (index, item) in items.iter().enumerate() {
        table.raw_set(index + 1, reply_to_lua(lua, item, resp3)?)?;
    }
    Ok(Value::Table(table))
}

fn field_table(lua: &Lua, field: &str, value: Value) -> mlua::Result<Value> {
    let table = lua.create_table_with_capacity(0, 1)?;
    table.raw_set(field, value)?;
    Ok(Value::Table(table))
}

/// `{err=text}` as Redis builds it from an error reply or message (`luaPushErrorBuff`): a leading
/// `-CODE ` is kept as the code, a message without one gets `ERR`; trailing line breaks are trimmed.
pub fn error_table(lua: &Lua, text: &[u8]) -> mlua::Result<Value> {
    field_table(
        lua,
        "err",
        Value::String(lua.create_string(error_text(text))?),
    )
}

/// The `err` text of `error_table`.
pub fn error_text(text: &[u8]) -> Vec<u8> {
    let (code, message): (&[u8], &[u8]) = match text.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&byte| byte == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", text),
    };
    let message = trim_line_breaks(message);
    let mut out = Vec::with_capacity(code.len() + 1 + message.len());
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(message);
    out
}

fn trim_line_breaks(mut text: &[u8]) -> &[u8] {
    while let [b'\r' | b'\n', rest @ ..] = text {
        text = rest;
    }
    while let [rest @ .., b'\r' | b'\n'] = text {
        text = rest;
    }
    text
}

/// A Lua number as RESP's integer: truncated toward zero; out of range (and NaN) becomes i64::MIN, as
/// the C cast Redis uses does on x86-64.
pub fn number_to_integer(value: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if value.is_nan() || !(-LIMIT..LIMIT).contains(&value) {
        return i64::MIN;
    }
    value as i64
}

/// Writes a script's return value as its reply. `script_resp3` is the script's `redis.setresp`
/// version, which decides how booleans are written.
pub fn write_lua_reply(out: &mut ReplyWriter, value: &Value, script_resp3: bool, depth: usize) {
    match value {
        Value::String(text) => out.bulk(&text.as_bytes()),
        Value::Integer(number) => out.int(*number),
        Value::Number(number) => out.int(number_to_integer(*number)),
        Value::Boolean(flag) if script_resp3 => out.bool(*flag),
        Value::Boolean(true) => out.int(1),
        Value::Boolean(false) => out.nil(),
        Value::Table(table) if depth >= REPLY_DEPTH_MAX => {
            let _ = table;
            out.error("ERR reached lua stack limit")
        }
        Value::Table(table) => write_table(out, table, script_resp3, depth),
        _ => out.nil(),
    }
}

fn write_table(out: &mut ReplyWriter, table: &Table, script_resp3: bool, depth: usize) {
    if let Some(text) = string_field(table, "err") {
        let text = String::from_utf8_lossy(&text).into_owned();
        return out.error(text.strip_prefix('-').unwrap_or(&text));
    }
    if let Some(text) = string_field(table, "ok") {
        return out.simple(&String::from_utf8_lossy(&text));
    }
    if let Ok(Value::Number(_) | Value::Integer(_)) = table.raw_get::<Value>("double") {
        let value: f64 = table.raw_get("double").unwrap_or_default();
        return out.double(value);
    }
    if let Some(text) = string_field(table, "big_number") {
        return write_big_number(out, &text);
    }
    if let Ok(Value::Table(map)) = table.raw_get::<Value>("map") {
        return write_map(out, &map, script_resp3, depth);
    }
    if let Ok(Value::Table(set)) = table.raw_get::<Value>("set") {
        let keys: Vec<Value> = set
            .pairs::<Value, Value>()
            .filter_map(|pair| pair.ok())
            .map(|(key, _)| key)
            .collect();
        out.set_len(keys.len());
        return keys
            .iter()
            .for_each(|key| write_lua_reply(out, key, script_resp3, depth + 1));
    }
    if let Ok(Value::Table(verbatim)) = table.raw_get::<Value>("verbatim_string") {
        if let (Some(format), Some(text)) = (
            string_field(&verbatim, "format"),
            string_field(&verbatim, "string"),
        ) {
            if format.len() == 3 {
                return out.verbatim(&String::from_utf8_lossy(&format), &text);
            }
        }
    }
    write_array(out, table, script_resp3, depth)
}

fn write_map(out: &mut ReplyWriter, map: &Table, script_resp3: bool, depth: usize) {
    let pairs: Vec<(Value, Value)> = map
        .pairs::<Value, Value>()
        .filter_map(|pair| pair.ok())
        .collect();
    out.map_len(pairs.len());
    for (key, value) in &pairs {
        write_lua_reply(out, key, script_resp3, depth + 1);
        write_lua_reply(out, value, script_resp3, depth + 1);
    }
}

/// The array part up to the first nil, as Redis walks it.
fn write_array(out: &mut ReplyWriter, table: &Table, script_resp3: bool, depth: usize) {
    let mut items = Vec::new();
    for index in 1.. {
        match table.raw_get::<Value>(index) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(value) => items.push(value),
        }
    }
    out.array_len(items.len());
    for item in &items {
        write_lua_reply(out, item, script_resp3, depth + 1);
    }
}

/// RESP3's big number (`(digits`); RESP2 sees a bulk string. Line breaks become spaces, as Redis
/// sanitizes them.
fn write_big_number(out: &mut ReplyWriter, text: &[u8]) {
    let clean: Vec<u8> = text
        .iter()
        .map(|&byte| {
            if byte == b'\r' || byte == b'\n' {
                b' '
            } else {
                byte
            }
        })
        .collect();
    if out.resp3 {
        out.buf.push(b'(');
        out.buf.extend_from_slice(&clean);
        out.buf.extend_from_slice(b"\r\n");
    } else {
        out.bulk(&clean);
    }
}

fn string_field(table: &Table, field: &str) -> Option<Vec<u8>> {
    match table.raw_get::<Value>(field) {
        Ok(Value::String(text)) => Some(text.as_bytes().to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_of(lua: &Lua, source: &str, resp3_caller: bool, script_resp3: bool) -> Vec<u8> {
        let value: Value = lua.load(source).eval().expect("test script runs");
        let mut out = ReplyWriter::new(resp3_caller);
        write_lua_reply(&mut out, &value, script_resp3, 0);
        out.buf
    }

    #[test]
    fn script_values_become_redis_replies() {
        let lua = Lua::new();
        assert_eq!(reply_of(&lua, "return 3.99", false, false), b":3\r\n");
        assert_eq!(reply_of(&lua, "return -3.99", false, false), b":-3\r\n");
        assert_eq!(
            reply_of(&lua, "return 1e20", false, false),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(reply_of(&lua, "return true", false, false), b":1\r\n");
        assert_eq!(reply_of(&lua, "return false", true, false), b"_\r\n");
        assert_eq!(reply_of(&lua, "return false", true, true), b"#f\r\n");
        assert_eq!(
            reply_of(&lua, "return {1,2,{3,'a'},nil,4}", false, false),
            b"*3\r\n:1\r\n:2\r\n*2\r\n:3\r\n$1\r\na\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {err='My Error'}", false, false),
            b"-My Error\r\n"
        );
        assert_eq!(reply_of(&lua, "return {err=5}", false, false), b"*0\r\n");
        assert_eq!(
            reply_of(&lua, "return {ok='a\\r\\nb'}", false, false),
            b"+a  b\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {double=3.5}", true, false),
            b",3.5\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {big_number='123'}", true, false),
            b"(123\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {big_number='123'}", false, false),
            b"$3\r\n123\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {map={a=1}}", true, false),
            b"%1\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(
            reply_of(&lua, "return {set={a=true}}", false, false),
            b"*1\r\n$1\r\na\r\n"
        );
        assert_eq!(
            reply_of(
                &lua,
                "return {verbatim_string={format='txt',string='hi'}}",
                true,
                false
            ),
            b"=6\r\ntxt:hi\r\n"
        );
    }

    #[test]
    fn error_texts_get_a_code_as_redis_gives_them() {
        assert_eq!(error_text(b"-ERR value is bad\r\n"), b"ERR value is bad");
        assert_eq!(error_text(b"-WRONGTYPE Operation"), b"WRONGTYPE Operation");
        assert_eq!(error_text(b"-E1"), b"ERR E1");
        assert_eq!(error_text(b"-"), b"ERR ");
        assert_eq!(error_text(b"My message"), b"ERR My message");
    }

    #[test]
    fn replies_become_script_values() {
        let lua = Lua::new();
        let null = reply_to_lua(&lua, &ReplyValue::Null, false).unwrap();
        assert_eq!(null, Value::Boolean(false));
        assert_eq!(
            reply_to_lua(&lua, &ReplyValue::Null, true).unwrap(),
            Value::Nil
        );
        let status = reply_to_lua(&lua, &ReplyValue::Status(b"OK".to_vec()), false).unwrap();
        let Value::Table(status) = status else {
            panic!("a status is a table")
        };
        assert_eq!(status.raw_get::<String>("ok").unwrap(), "OK");
        let double = reply_to_lua(&lua, &ReplyValue::Double(1.5), true).unwrap();
        let Value::Table(double) = double else {
            panic!("a double is a table")
        };
        assert_eq!(double.raw_get::<f64>("double").unwrap(), 1.5);
    }

    #[test]
    fn numbers_truncate_like_the_c_cast() {
        assert_eq!(number_to_integer(-0.5), 0);
        assert_eq!(number_to_integer(f64::NAN), i64::MIN);
        assert_eq!(number_to_integer(f64::INFINITY), i64::MIN);
        assert_eq!(number_to_integer(-9.3e18), i64::MIN);
        assert_eq!(number_to_integer(9.2e18), 9_200_000_000_000_000_000);
    }
}
