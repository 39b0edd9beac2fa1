//! The rule language and ACL LIST text, against texts Redis 7.0.15 printed for the same rules.
use super::*;
use proptest::prelude::*;

fn user_with(rules: &[&str]) -> Result<User, String> {
    let mut user = User::new("u");
    let merged = merge_selectors(rules).map_err(|start| format!("unmatched at {start}"))?;
    for rule in &merged {
        user.apply_rule(rule)?;
    }
    Ok(user)
}

fn listed(rules: &[&str]) -> String {
    user_with(rules).unwrap().describe()
}

/// The single-command tail of a description as a set: Redis prints it in its hash table's order.
/// What ACL DRYRUN says of user `u` running `text` (words split on spaces).
fn dryrun(acl: &Acl, text: &str) -> Result<(), String> {
    let args: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
    let (_, spec) = info::lookup(args[0]).unwrap();
    acl.check("u", spec, &args)
        .map_err(|denied| denied.dryrun_text())
}

fn tokens(text: &str) -> Vec<String> {
    let mut tokens: Vec<String> = text.split(' ').map(String::from).collect();
    tokens.sort();
    tokens
}

#[test]
fn new_and_default_users_are_listed_as_redis() {
    assert_eq!(listed(&[]), "user u off resetchannels -@all");
    assert_eq!(
        Acl::new("").users["default"].describe(),
        "user default on nopass ~* &* +@all"
    );
    assert_eq!(
        listed(&["reset"]),
        "user u off sanitize-payload resetchannels -@all"
    );
}

#[test]
fn keys_channels_passwords_and_selectors_are_canonical() {
    let text = listed(&[
        "on",
        ">p1",
        ">p2",
        ">p1",
        "~a*",
        "%R~b*",
        "%W~c*",
        "%RW~d*",
        "%R~a*",
        "&ch",
        "+get",
        "-@read",
        "+config|get",
        "+select|0",
        "(~x* +set)",
        "(%R~y*",
        "&z",
        "+@hash",
        "-hget)",
    ]);
    let p1 = sha256_hex(b"p1");
    let p2 = sha256_hex(b"p2");
    let expected = format!(
        "user u on #{p1} #{p2} ~a* %R~b* %W~c* ~d* resetchannels &ch -@all +select|0 +config|get \
         (~x* resetchannels -@all +set) (%R~y* resetchannels &z -@all +@hash -hget)"
    );
    assert_eq!(tokens(&text), tokens(&expected));
    assert!(text
        .ends_with("(~x* resetchannels -@all +set) (%R~y* resetchannels &z -@all +@hash -hget)"));
}

#[test]
fn command_rules_are_rebuilt_from_the_bitmap() {
    let rules = |rules: &[&str]| user_with(rules).unwrap().root.describe_commands();
    assert_eq!(
        rules(&["+@all", "-get", "+get", "-config|set", "+config"]),
        "+@all"
    );
    assert_eq!(rules(&["+config|get", "+config|set", "-config"]), "-@all");
    assert_eq!(rules(&["+@all", "-@read", "+get"]), "+@all -@read +get");
    assert_eq!(
        rules(&["+@all", "-@dangerous", "-@admin"]),
        "+@all -@dangerous"
    );
    let greedy = rules(&["-@all", "+@read", "+@write", "-@dangerous"]);
    assert!(
        greedy.starts_with(
            "-@all +@string +@hash +@geo +@blocking +@bitmap +@set +@hyperloglog +@stream +@sortedset +@list +@keyspace "
        ),
        "{greedy}"
    );
    assert_eq!(rules(&["+get", "+get|x"]), "-@all +get");
    assert_eq!(
        rules(&["+select|0", "+select|1", "+select|0"]),
        "-@all +select|0 +select|1"
    );
}

#[test]
fn bad_rules_get_redis_errors() {
    let error = |rules: &[&str]| user_with(rules).unwrap_err();
    assert_eq!(
        error(&["~*", "~x"]),
        format!(
            "Error in ACL SETUSER modifier '~x': {}",
            RuleError::AfterAllKeys.message()
        )
    );
    assert!(error(&["&*", "&x"]).ends_with(RuleError::AfterAllChannels.message()));
    assert!(error(&["+nosuch"]).ends_with("Unknown command or category name in ACL"));
    assert!(error(&["+@nosuch"]).ends_with("Unknown command or category name in ACL"));
    assert!(
        error(&["+config|get|x"]).ends_with("Allowing first-arg of a subcommand is not supported")
    );
    assert!(error(&["+config|"]).ends_with("Syntax error"));
    assert!(error(&["+config|nosuch"]).ends_with("Unknown command or category name in ACL"));
    assert!(error(&["-select|0"]).ends_with("Unknown command or category name in ACL"));
    assert!(error(&["<nope"]).ends_with("does not exist"));
    assert!(error(&["#abc"]).ends_with("only lowercase hexadecimal characters"));
    for bad in ["%~x", "%X~x", "%RR~x", "%", "bogus", "é", "(on)"] {
        assert!(error(&[bad]).ends_with("Syntax error"), "{bad}");
    }
    assert_eq!(error(&["(+get", "~x"]), "unmatched at (+get");
    assert!(
        user_with(&["", "on"]).unwrap().enabled,
        "an empty rule is a no-op"
    );
}

#[test]
fn selectors_grant_commands_with_their_keys() {
    let mut acl = Acl::new("");
    let user = user_with(&[
        "on",
        "nopass",
        "%R~r*",
        "%W~w*",
        "+get",
        "+set",
        "+copy",
        "(~x* +lpush)",
    ])
    .unwrap();
    acl.users.insert("u".into(), user);
    let check = |text: &str| dryrun(&acl, text);
    assert_eq!(check("get r1"), Ok(()));
    assert_eq!(check("set w1 v"), Ok(()));
    assert_eq!(check("copy r1 w1"), Ok(()));
    assert_eq!(check("lpush x1 v"), Ok(()), "a selector grants it");
    let key = |key: &str| {
        Err(format!(
            "This user has no permissions to access the '{key}' key"
        ))
    };
    assert_eq!(check("set w1 v get"), key("w1"));
    assert_eq!(check("copy w1 r1"), key("w1"));
    assert_eq!(
        check("lpush r1 v"),
        key("r1"),
        "the key denial beats the command one"
    );
    assert_eq!(
        check("del x1"),
        Err("This user has no permissions to run the 'del' command".into())
    );
}

#[test]
fn channels_need_a_grant_and_patterns_an_exact_one() {
    let mut acl = Acl::new("");
    let user = user_with(&["on", "+@pubsub", "&news.*"]).unwrap();
    acl.users.insert("u".into(), user);
    let check = |text: &str| dryrun(&acl, text);
    assert_eq!(check("publish news.a m"), Ok(()));
    assert_eq!(check("psubscribe news.*"), Ok(()));
    let channel = |name: &str| {
        Err(format!(
            "This user has no permissions to access the '{name}' channel"
        ))
    };
    assert_eq!(check("psubscribe news.a"), channel("news.a"));
    assert_eq!(check("subscribe news.a other"), channel("other"));
}

#[test]
fn acl_file_loads_all_or_nothing_with_redis_errors() {
    let users = file::parse("f", "user bob on >x ~k*   +get\n\n   \nuser al (~x +get)\n").unwrap();
    assert_eq!(users.keys().collect::<Vec<_>>(), ["al", "bob", "default"]);
    assert_eq!(
        users["al"].describe(),
        "user al off resetchannels -@all (~x resetchannels -@all +get)"
    );
    let error = file::parse(
        "f",
        "user bob on +nosuch -bar\nuser bob off\nfoo\nuser al ice\nuser z (+get\nuser q bogus %X~y\n",
    )
    .unwrap_err();
    assert_eq!(
        error,
        "f:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. \
         f:1: Error in applying operation '-bar': Unknown command or category name in ACL. \
         WARNING: Duplicate user 'bob' found on line 2. \
         f:3 should start with user keyword followed by the username. f:4: Syntax error. \
         f:5: Unmatched parenthesis in selector definition.f:6: Syntax error. \
         WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    );
}

/// Rules proptest draws from: each kind of rule, with a few commands, categories and patterns.
fn rule() -> impl Strategy<Value = String> {
    let commands = prop::sample::select(vec![
        "get",
        "set",
        "config",
        "config|get",
        "client|kill",
        "select|0",
        "debug|object",
        "del",
    ]);
    let categories = prop::sample::select(vec![
        "all",
        "read",
        "write",
        "admin",
        "dangerous",
        "string",
        "keyspace",
        "pubsub",
        "fast",
    ]);
    let fixed = prop::sample::select(vec![
        "on",
        "off",
        "nopass",
        "resetpass",
        "allkeys",
        "resetkeys",
        "allchannels",
        "resetchannels",
        "allcommands",
        "nocommands",
        "clearselectors",
        ">pw",
        "sanitize-payload",
    ]);
    prop_oneof![
        fixed.prop_map(String::from),
        (prop::bool::ANY, commands).prop_map(|(allow, name)| {
            let sign = if allow || name.contains('|') {
                "+"
            } else {
                "-"
            };
            format!("{sign}{name}")
        }),
        (prop::bool::ANY, categories)
            .prop_map(|(allow, name)| format!("{}@{name}", if allow { "+" } else { "-" })),
        // A bare `*` pattern through `%RW~*` lists as `~*`, which is `allkeys` when re-applied (in Redis too).
        ("(~|%R~|%W~|%RW~|&)", "[a-c][a-c*]{0,2}")
            .prop_map(|(prefix, pattern)| format!("{prefix}{pattern}")),
        "\\((~k\\*|\\+get|-@all|\\+@read|&c) ?(%W~w|\\+set|-get)?\\)",
    ]
}

proptest! {
    /// ACL LIST's line re-applied to a new user gives the same user (what ACL SAVE then LOAD relies on).
    #[test]
    fn listed_rules_rebuild_the_same_user(rules in prop::collection::vec(rule(), 0..12)) {
        let mut user = User::new("u");
        for rule in &rules {
            let _ = user.apply(rule); // rules after `~*` are refused, as in Redis
        }
        let line = user.describe();
        let words: Vec<&str> = line.split(' ').skip(2).collect();
        let mut rebuilt = User::new("u");
        for rule in merge_selectors(&words).unwrap() {
            rebuilt.apply(&rule).unwrap();
        }
        // The description rebuilds the exact command bitmap (see describe_commands), so equal lines are
        // equal permissions.
        prop_assert_eq!(rebuilt.describe(), line);
        prop_assert_eq!(rebuilt.flags(), user.flags());
    }
}

#[test]
fn acl_file_saves_atomically_and_loads_back() {
    let dir = std::env::temp_dir().join(format!("fallow-aclfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("users.acl");
    let path_text = path.to_str().unwrap();
    let mut acl = Acl::new("");
    acl.users.insert(
        "u".into(),
        user_with(&["on", ">pw", "%R~k*", "(+set ~w*)"]).unwrap(),
    );
    file::save(path_text, &acl).unwrap();
    let leftovers = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(leftovers, 1, "no temporary file is left behind");
    let loaded = file::load(path_text).unwrap();
    assert_eq!(
        loaded.values().map(User::describe).collect::<Vec<_>>(),
        acl.users.values().map(User::describe).collect::<Vec<_>>()
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = file::load(path_text).unwrap_err();
    assert!(missing.ends_with("No such file or directory"), "{missing}");
}
