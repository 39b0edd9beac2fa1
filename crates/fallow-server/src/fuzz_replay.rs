//! Replays the kept fuzz corpus of the config file and ACL rule parsers (`fuzz/corpus/`) through their checks.
use crate::fuzzing;
use fallow_proto::fuzzing::replay_corpus;

#[test]
fn fuzz_replay_config_file() {
    replay_corpus("config_file", fuzzing::check_config_file);
}

#[test]
fn fuzz_replay_acl_rules() {
    replay_corpus("acl_rules", fuzzing::check_acl_rules);
}

/// Found by the `acl_rules` target: a rule was split after its first byte, which panicked on an empty rule
/// and on one starting with a multi-byte character (`ACL SETUSER alice é` killed the connection's task).
#[test]
fn acl_rule_empty_or_starting_with_a_multibyte_character_is_refused() {
    let mut user = crate::acl::User::new("alice");
    assert!(
        user.apply_rule("").is_ok(),
        "an empty rule is a no-op, as in Redis"
    );
    for rule in ["é", "€~key", "\u{1F600}"] {
        let error = user.apply_rule(rule).unwrap_err();
        assert!(error.ends_with("Syntax error"), "{rule:?}: {error}");
    }
    assert!(user.apply_rule("~é*").is_ok());
    assert_eq!(user.root.describe_keys(), vec!["~é*".to_string()]);
}

/// Found by the `config_file` target: a policy named in upper case in the file was shown so by CONFIG GET,
/// and setting it back to that value (stored in lower case) changed the config.
#[test]
fn config_file_policy_name_is_stored_in_lower_case() {
    let config =
        crate::config::Config::from_toml_str("maxmemory-policy = \"AllKeys-LRU\"\n").unwrap();
    assert_eq!(config.maxmemory_policy, "allkeys-lru");
}

/// Found by the `config_file` target: tracing-subscriber panicked on a log filter with spaces before a
/// multi-byte character, so `log-level = " é=info"` (file, flag or environment) crashed the start.
#[test]
fn log_level_with_a_multibyte_character_is_an_error_not_a_panic() {
    let error = crate::config::Config::from_toml_str("log-level = \" é=info\"\n").unwrap_err();
    assert!(error.contains("invalid log-level"), "{error}");
    assert!(crate::config::Config::from_toml_str("log-level = \"fallow_server=debug\"\n").is_ok());
}

/// Found by the `config_file` target (a timeout): a field value in the log filter was compiled as a regex to
/// a DFA, and a crafted one took minutes; values now match literally.
#[test]
fn log_level_field_filter_does_not_compile_a_regex() {
    let started = std::time::Instant::now();
    let text = format!(
        "log-level = \"a{{{}{{-[b[c[]={}#{}]{}*]]ms]]}}w\"\n",
        "[".repeat(17),
        ".".repeat(55),
        ".".repeat(15),
        "]".repeat(29)
    );
    let _ = crate::config::Config::from_toml_str(&text);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(crate::config::log_filter("fallow_server[conn{client=1}]=debug").is_ok());
}
