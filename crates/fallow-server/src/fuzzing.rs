//! The checks the `config_file` and `acl_rules` fuzz targets run, kept here so the replay of the kept
//! corpus (`cargo test --lib fuzz_replay`) runs the same code on stable. Panics when an invariant breaks.
use crate::acl::User;
use crate::config::Config;

/// Fuzz target `config_file`: a TOML config file parsed, resolved and validated as at start-up. A file
/// that passes gives a config that still validates, and setting any parameter to the value CONFIG GET
/// reports for it (where CONFIG SET accepts it) changes nothing.
pub fn check_config_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(config) = Config::from_toml_str(&text) else {
        return;
    };
    config.validate().expect("a loaded config validates again");
    let entries = config.entries();
    for (name, value) in &entries {
        let mut changed = config.clone();
        if changed.set(name, value).is_ok() {
            assert_eq!(
                changed.entries(),
                entries,
                "CONFIG SET {name} {value:?} changed the config"
            );
        }
    }
}

/// Fuzz target `acl_rules`: ACL SETUSER rules, one a line, applied to a new user (a rule that fails is
/// skipped). Its permissions are then checked against a few commands and keys, and its ACL LIST line
/// re-applied to a new user must describe the same user, when no pattern or rule holds a space.
pub fn check_acl_rules(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut user = User::new("fuzz");
    for rule in text.split('\n') {
        let _ = user.apply_rule(rule);
    }
    let mut acl = crate::acl::Acl::new("");
    acl.users.insert("fuzz".into(), user.clone());
    for line in [
        "get key",
        "set user:1:name v get",
        "acl whoami",
        "flushall",
        "publish ch*?[a] m",
    ] {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (_, spec) = crate::command::lookup(args[0]).expect("a known command");
        let _ = acl.check("fuzz", spec, &args);
    }
    // Spaces split a listed rule, and parentheses end a listed selector early (in Redis too).
    let has_space = |bytes: &[u8]| bytes.iter().any(|byte| b" ()".contains(byte));
    let spaced = user.all_selectors().any(|selector| {
        selector.keys.iter().any(|key| has_space(&key.pattern))
            || selector.channels.iter().any(|channel| has_space(channel))
    });
    if spaced {
        return;
    }
    let described = user.describe();
    let rules: Vec<&str> = described
        .strip_prefix("user fuzz ")
        .expect("ACL LIST names the user")
        .split(' ')
        .collect();
    let mut again = User::new("fuzz");
    for rule in crate::acl::merge_selectors(&rules).expect("balanced selectors") {
        again
            .apply_rule(&rule)
            .unwrap_or_else(|error| panic!("ACL LIST rule {rule:?} fails: {error}"));
    }
    assert_eq!(again.describe(), described);
}
