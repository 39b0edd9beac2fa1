//! Property and fuzz tests that need no Redis:
//! * cjson number output equals C's `printf("%.<p>g")` (via Lua's `string.format`,
//!   which calls the C library) for many doubles and every precision;
//! * cjson number input equals C's `strtod` (via Lua's `tonumber`, which calls
//!   `strtod`) bit for bit, NaN payloads included, for decimal and hex strings;
//! * random bytes fed to every decoder give a value or a Lua error string, never a
//!   panic (reported as "internal error"), an abort or a non-string error;
//! * encode/decode round trips of random tables are stable.
use mlua::{Function, Lua, Table};

/// xorshift64*: small deterministic generator (no external crates).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

fn new_lua() -> Lua {
    let lua = Lua::new();
    super::register_all(&lua).expect("register libraries");
    lua
}

fn interesting_doubles(rng: &mut Rng, count: usize) -> Vec<f64> {
    let mut values = vec![
        0.0,
        -0.0,
        0.1,
        0.5,
        1.0,
        1.5,
        2.5,
        0.125,
        9.5,
        99999999999999.5,
        1e15,
        1e-5,
        1e-4,
        123456789012345.0,
        5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
        9007199254740993.0,
        0.30000000000000004,
        1.0 / 3.0,
        2.0 / 3.0,
    ];
    while values.len() < count {
        let v = match rng.below(4) {
            0 => f64::from_bits(rng.next()),
            1 => (rng.next() as i64 as f64) / 10f64.powi(rng.below(20) as i32),
            2 => (rng.below(100_000) as f64 + 0.5) / 10f64.powi(rng.below(8) as i32),
            _ => rng.below(1 << 53) as f64 * 2f64.powi(rng.below(200) as i32 - 100),
        };
        if v.is_finite() {
            values.push(if rng.below(2) == 0 { v } else { -v });
        }
    }
    values
}

#[test]
fn number_encoding_matches_c_printf() {
    let lua = new_lua();
    let values = interesting_doubles(&mut Rng(0x9e37_79b9_7f4a_7c15), 20_000);
    let list = lua.create_sequence_from(values).unwrap();
    let check: Function = lua
        .load(
            r#"
            local values = ...
            local c = cjson.new()
            for p = 1, 14 do
              c.encode_number_precision(p)
              for i = 1, #values do
                local x = values[i]
                local want = string.format('%.' .. p .. 'g', x)
                local got = c.encode(x)
                if got ~= want then
                  return string.format('precision %d value %.17g: got %s want %s', p, x, got, want)
                end
              end
            end
            return 'ok'
            "#,
        )
        .into_function()
        .unwrap();
    let result: String = check.call(list).unwrap();
    assert_eq!(result, "ok");
}

fn random_decimal(rng: &mut Rng) -> String {
    let mut s = String::new();
    if rng.below(3) == 0 {
        s.push('-');
    }
    let digits = |rng: &mut Rng, s: &mut String, n: u64| {
        for _ in 0..n {
            s.push(char::from(b'0' + rng.below(10) as u8));
        }
    };
    let max_int_len = if rng.below(10) == 0 { 40 } else { 18 };
    let int_len = 1 + rng.below(max_int_len);
    digits(rng, &mut s, int_len);
    if rng.below(2) == 0 {
        s.push('.');
        let frac_len = rng.below(30);
        digits(rng, &mut s, frac_len);
    }
    if rng.below(2) == 0 {
        s.push(if rng.below(2) == 0 { 'e' } else { 'E' });
        s.push_str(rng.pick(&["", "+", "-"]));
        let exp = rng.below(400);
        s.push_str(&exp.to_string());
    }
    s
}

fn random_hex(rng: &mut Rng) -> String {
    let hex = b"0123456789abcdefABCDEF";
    let mut s = String::from(rng.pick(&["0x", "0X", "-0x"]));
    let int_len = rng.below(20);
    for _ in 0..int_len {
        s.push(char::from(hex[rng.below(hex.len() as u64) as usize]));
    }
    if int_len == 0 || rng.below(2) == 0 {
        s.push('.');
        for _ in 0..1 + rng.below(20) {
            s.push(char::from(hex[rng.below(hex.len() as u64) as usize]));
        }
    }
    if rng.below(3) != 0 {
        s.push(if rng.below(2) == 0 { 'p' } else { 'P' });
        s.push_str(rng.pick(&["", "+", "-"]));
        s.push_str(&rng.below(1200).to_string());
    }
    s
}

#[test]
fn number_decoding_matches_c_strtod() {
    let lua = new_lua();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut inputs: Vec<String> = [
        "0",
        "-0",
        "1e400",
        "-1e400",
        "1e-400",
        "2.4703282292062328e-324",
        "2.4703282292062327e-324",
        "0x1p-1074",
        "0x1p-1075",
        "0x1.8p-1075",
        "0x1p1024",
        "0x1.fffffffffffff8p1023",
        "0x1.fffffffffffff7ffp1023",
        "inf",
        "-Infinity",
        "nan",
        "-nan",
        "nan(123)",
        "nan(0x7ffffffffffff)",
        "nan(010)",
        "nan(abc)",
        "NaN()",
        "9007199254740993",
        "1.00000000000000011102230246251565404236316680908203125",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for _ in 0..20_000 {
        inputs.push(if rng.below(3) == 0 {
            random_hex(&mut rng)
        } else {
            random_decimal(&mut rng)
        });
    }
    let list = lua.create_sequence_from(inputs).unwrap();
    let check: Function = lua
        .load(
            r#"
            local inputs = ...
            local checked = 0
            for i = 1, #inputs do
              local s = inputs[i]
              local want = tonumber(s)
              if want ~= nil then
                checked = checked + 1
                local ok, got = pcall(cjson.decode, s)
                if not ok then return s .. ': ' .. tostring(got) end
                if struct.pack('>d', got) ~= struct.pack('>d', want) then
                  return string.format('%s: got %.17g want %.17g', s, got, want)
                end
              end
            end
            return checked
            "#,
        )
        .into_function()
        .unwrap();
    let result: mlua::Value = check.call(list).unwrap();
    match result {
        mlua::Value::Number(n) => assert!(n > 15_000.0, "only {n} inputs were numbers"),
        mlua::Value::Integer(n) => assert!(n > 15_000, "only {n} inputs were numbers"),
        other => panic!("mismatch: {other:?}"),
    }
}

/// Runs `body` (a Lua chunk receiving a list of random strings) and expects "ok".
fn fuzz(seed: u64, count: usize, max_len: u64, alphabet: Option<&[u8]>, body: &str) {
    let lua = new_lua();
    let mut rng = Rng(seed);
    let inputs: Table = lua.create_table().unwrap();
    for i in 1..=count {
        let len = rng.below(max_len + 1) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| match alphabet {
                Some(chars) => chars[rng.below(chars.len() as u64) as usize],
                None => rng.next() as u8,
            })
            .collect();
        inputs
            .raw_set(i, lua.create_string(&bytes).unwrap())
            .unwrap();
    }
    let check: Function = lua.load(body).into_function().unwrap();
    let result: String = check.call(inputs).unwrap();
    assert_eq!(result, "ok");
}

/// The shared checker: every call must succeed or fail with a string message that
/// is not our panic report. (Results are counted inside a Lua function: Lua 5.1's
/// own `pcall` trips an API assertion of debug builds when a C function returns
/// more than ~20 values directly to it, with or without these libraries.)
const CHECK_CALLS: &str = r#"
    local function checked(f, ...)
      local ok, err = pcall(function(...) return select('#', f(...)) end, ...)
      if not ok then
        if type(err) ~= 'string' then return 'non-string error: ' .. tostring(err) end
        if string.find(err, 'internal error', 1, true) then return err end
      end
      return nil
    end
"#;

#[test]
fn fuzz_cmsgpack_unpack() {
    let body = format!(
        "{CHECK_CALLS}
        local inputs = ...
        for i = 1, #inputs do
          local s = inputs[i]
          local bad = checked(cmsgpack.unpack, s)
            or checked(cmsgpack.unpack_one, s, i % 5)
            or checked(cmsgpack.unpack_limit, s, i % 4, i % 3)
          if bad then return bad end
        end
        return 'ok'"
    );
    fuzz(1, 20_000, 40, None, &body);
    let msgpack_bytes: &[u8] = &[
        0x00, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa3, 0xbf, 0xc0, 0xc2, 0xc3, 0xca,
        0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde,
        0xdf, 0xe0, 0xff, 0x01, 0x02, 0x03,
    ];
    fuzz(2, 20_000, 60, Some(msgpack_bytes), &body);
}

#[test]
fn fuzz_cjson_decode() {
    let body = format!(
        "{CHECK_CALLS}
        local inputs = ...
        local strict = cjson.new()
        strict.decode_invalid_numbers(false)
        strict.decode_max_depth(5)
        for i = 1, #inputs do
          local s = inputs[i]
          local bad = checked(cjson.decode, s) or checked(strict.decode, s)
          if bad then return bad end
        end
        return 'ok'"
    );
    fuzz(3, 20_000, 40, None, &body);
    fuzz(
        4,
        30_000,
        60,
        Some(b"{}[],:\"\\/ \t\n0123456789.-+eExXpPabcfinltrsuNIy\0"),
        &body,
    );
}

#[test]
fn fuzz_struct() {
    let body = format!(
        "{CHECK_CALLS}
        local inputs = ...
        for i = 1, #inputs - 1, 2 do
          local fmt, data = inputs[i], inputs[i + 1]
          local bad = checked(struct.unpack, fmt, data)
            or checked(struct.unpack, fmt, data, i % 7)
            or checked(struct.size, fmt)
            or checked(struct.pack, fmt, 1, 'abc', -2.5, data, 70000, 'x', 3)
          if bad then return bad end
        end
        return 'ok'"
    );
    fuzz(5, 40_000, 12, Some(b"bBhHlLTiIfdcsx<>! 0123456789z"), &body);
    fuzz(6, 10_000, 12, None, &body);
}

#[test]
fn fuzz_bit() {
    let body = format!(
        "{CHECK_CALLS}
        local inputs = ...
        for i = 1, #inputs do
          local s = inputs[i]
          local n = tonumber(s) or #s * 1e9 - 7.5
          for name, f in pairs(bit) do
            local bad = checked(f, n, i - 5000) or checked(f, s) or checked(f)
            if bad then return name .. ': ' .. bad end
          end
        end
        return 'ok'"
    );
    fuzz(7, 5_000, 8, Some(b"0123456789.-+ex"), &body);
}

#[test]
fn random_tables_round_trip() {
    let lua = new_lua();
    let check: Function = lua
        .load(
            r#"
            local seed = 12345
            local function rand(n)
              seed = (seed * 1103515245 + 12345) % 2147483648
              return seed % n
            end
            local function value(depth)
              local kind = rand(depth > 4 and 5 or 8)
              if kind == 0 then return rand(1000) - 500 end
              if kind == 1 then return (rand(100000) - 50000) / 64 end
              if kind == 2 then return string.rep(string.char(rand(256)), rand(40)) end
              if kind == 3 then return rand(2) == 0 end
              if kind == 4 then return 'k' .. rand(50) end
              local t = {}
              if kind == 5 then
                for i = 1, rand(6) do t[i] = value(depth + 1) end
              else
                for _ = 1, rand(6) do t['k' .. rand(20)] = value(depth + 1) end
              end
              return t
            end
            for i = 1, 3000 do
              local v = value(0)
              local json = cjson.encode(v)
              local again = cjson.encode(cjson.decode(json))
              if again ~= json then return 'cjson: ' .. json .. ' vs ' .. again end
              local packed = cmsgpack.pack(v)
              local repacked = cmsgpack.pack(cmsgpack.unpack(packed))
              if repacked ~= packed then return 'cmsgpack mismatch at ' .. i end
            end
            return 'ok'
            "#,
        )
        .into_function()
        .unwrap();
    let result: String = check.call(()).unwrap();
    assert_eq!(result, "ok");
}

#[test]
fn register_all_creates_exactly_the_redis_fields() {
    let lua = new_lua();
    let fields: String = lua
        .load(
            r#"
            local out = {}
            for _, name in ipairs({'bit', 'cjson', 'cmsgpack', 'struct'}) do
              local keys = {}
              for k in pairs(_G[name]) do keys[#keys + 1] = k end
              table.sort(keys)
              out[#out + 1] = name .. ': ' .. table.concat(keys, ' ')
            end
            return table.concat(out, '\n')
            "#,
        )
        .eval()
        .unwrap();
    assert_eq!(
        fields,
        "bit: arshift band bnot bor bswap bxor lshift rol ror rshift tobit tohex\n\
         cjson: _NAME _VERSION decode decode_invalid_numbers decode_max_depth encode \
         encode_invalid_numbers encode_keep_buffer encode_max_depth encode_number_precision \
         encode_sparse_array new null\n\
         cmsgpack: _COPYRIGHT _DESCRIPTION _NAME _VERSION pack unpack unpack_limit unpack_one\n\
         struct: pack size unpack"
    );
}

#[test]
fn cjson_config_upvalue_cannot_be_replaced_from_lua() {
    // The config is a userdata upvalue read and written through a raw pointer;
    // Lua 5.1's `debug.setupvalue` refuses C functions, so scripts cannot swap it.
    // SAFETY: the debug library is needed for the attempt.
    let lua = unsafe { Lua::unsafe_new() };
    super::register_all(&lua).unwrap();
    let result: String = lua
        .load(
            r#"
            local c = cjson.new()
            local name = debug.setupvalue(c.encode, 1, io.stdout)
            return tostring(name) .. '|' .. c.encode({1}) .. '|' .. c.decode_max_depth(5)
            "#,
        )
        .eval()
        .unwrap();
    assert_eq!(result, "nil|[1]|5");
}
