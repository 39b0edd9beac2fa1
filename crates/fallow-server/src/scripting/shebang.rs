//! The `#!lua` first line of Redis 7.0 scripts and function libraries.
//!
//! | text                                   | where              | meaning                                 |
//! |----------------------------------------|--------------------|-----------------------------------------|
//! | `#!lua flags=no-writes,allow-oom`      | EVAL scripts       | flags; no other option                  |
//! | `#!lua name=mylib`                     | FUNCTION LOAD      | the library's name; no other option     |
//!
//! Flags: `no-writes`, `allow-oom`, `allow-stale`, `no-cluster`, `allow-cross-slot-keys`. A script
//! with a shebang (even without flags) follows Redis 7's rules: `*_RO` commands refuse it unless it
//! says `no-writes`. Lua does not read `#!`: the line is compiled as a comment (`--`) so line numbers stay.

/// A script's or function's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

/// Flag names in the order Redis lists them.
pub const FLAG_NAMES: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

impl ScriptFlags {
    /// Sets the flag `name`; false for an unknown name.
    pub fn set(&mut self, name: &str) -> bool {
        let flag = match name {
            "no-writes" => &mut self.no_writes,
            "allow-oom" => &mut self.allow_oom,
            "allow-stale" => &mut self.allow_stale,
            "no-cluster" => &mut self.no_cluster,
            "allow-cross-slot-keys" => &mut self.allow_cross_slot_keys,
            _ => return false,
        };
        *flag = true;
        true
    }

    /// The names of the flags set, in Redis's order.
    pub fn names(&self) -> Vec<&'static str> {
        let set = [
            self.no_writes,
            self.allow_oom,
            self.allow_stale,
            self.no_cluster,
            self.allow_cross_slot_keys,
        ];
        FLAG_NAMES
            .iter()
            .zip(set)
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// The first line of `source` split in words, when it is a shebang.
fn shebang_words(source: &[u8]) -> Option<Vec<String>> {
    if !source.starts_with(b"#!") {
        return None;
    }
    let end = source
        .iter()
        .position(|&byte| byte == b'\n')
        .unwrap_or(source.len());
    let line = String::from_utf8_lossy(&source[..end]);
    Some(line.split_whitespace().map(str::to_string).collect())
}

/// An EVAL script's flags: None without a shebang; Err is Redis's error reply.
pub fn script_flags(source: &[u8]) -> Result<Option<ScriptFlags>, String> {
    let Some(words) = shebang_words(source) else {
        return Ok(None);
    };
    let engine = words.first().map(String::as_str).unwrap_or("#!");
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = ScriptFlags::default();
    for option in &words[1..] {
        let Some(list) = option.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {option}"));
        };
        for name in list.split(',').filter(|name| !name.is_empty()) {
            if !flags.set(name) {
                return Err(format!("ERR Unexpected flag in script shebang: {name}"));
            }
        }
    }
    Ok(Some(flags))
}

/// A function library's name from its `#!lua name=<name>` line; Err is Redis's error reply.
pub fn library_name(code: &[u8]) -> Result<String, String> {
    let Some(words) = shebang_words(code) else {
        return Err("ERR Missing library metadata".into());
    };
    let engine = words.first().map(String::as_str).unwrap_or("#!");
    let engine = engine.strip_prefix("#!").unwrap_or(engine);
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for option in &words[1..] {
        match option.strip_prefix("name=") {
            Some(value) => name = Some(value.to_string()),
            None => return Err(format!("ERR Invalid metadata value given: {option}")),
        }
    }
    let name = name.ok_or("ERR Library name was not given")?;
    if !valid_name(&name) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok(name)
}

/// Library and function names: letters, digits and underscores, at least one.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// The source Lua compiles: a shebang line becomes a comment, so line numbers stay as written.
pub fn lua_source(source: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match source.strip_prefix(b"#!") {
        Some(rest) => {
            let mut text = Vec::with_capacity(source.len());
            text.extend_from_slice(b"--");
            text.extend_from_slice(rest);
            std::borrow::Cow::Owned(text)
        }
        None => std::borrow::Cow::Borrowed(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_shebangs_parse_as_redis_reads_them() {
        assert_eq!(script_flags(b"return 1"), Ok(None));
        assert_eq!(
            script_flags(b"#!lua\nreturn 1"),
            Ok(Some(ScriptFlags::default()))
        );
        let flags = script_flags(b"#!lua flags=no-writes,allow-oom\nreturn 1")
            .unwrap()
            .unwrap();
        assert!(flags.no_writes && flags.allow_oom && !flags.no_cluster);
        assert_eq!(flags.names(), ["no-writes", "allow-oom"]);
        assert_eq!(
            script_flags(b"#!lua flags=bogus\n"),
            Err("ERR Unexpected flag in script shebang: bogus".into())
        );
        assert_eq!(
            script_flags(b"#!lua name=x\n"),
            Err("ERR Unknown lua shebang option: name=x".into())
        );
        assert_eq!(
            script_flags(b"#!luax\n"),
            Err("ERR Unexpected engine in script shebang: #!luax".into())
        );
        assert_eq!(
            script_flags(b"#! lua\n"),
            Err("ERR Unexpected engine in script shebang: #!".into())
        );
    }

    #[test]
    fn library_metadata_parses_as_redis_reads_it() {
        assert_eq!(library_name(b"#!lua name=mylib\ncode"), Ok("mylib".into()));
        assert_eq!(
            library_name(b"return 1"),
            Err("ERR Missing library metadata".into())
        );
        assert_eq!(
            library_name(b"#!lua\n"),
            Err("ERR Library name was not given".into())
        );
        assert_eq!(
            library_name(b"#!foo name=x\n"),
            Err("ERR Engine 'foo' not found".into())
        );
        assert_eq!(
            library_name(b"#!lua name=x x=y\n"),
            Err("ERR Invalid metadata value given: x=y".into())
        );
        assert!(library_name(b"#!lua name=a-b\n").is_err());
    }

    #[test]
    fn the_shebang_line_becomes_a_comment() {
        assert_eq!(&*lua_source(b"#!lua\nreturn 1"), b"--lua\nreturn 1");
        assert_eq!(&*lua_source(b"return 1"), b"return 1");
    }
}
