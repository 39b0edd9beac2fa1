//! Users and their permissions (Redis ACL): passwords (kept as SHA-256), enabled/disabled, allowed
//! commands and categories, allowed key patterns. `requirepass` is the default user's password.
use crate::command::info::{self, key_positions, CommandInfo};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

pub mod log;

#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 of each password, hex.
    pub passwords: BTreeSet<String>,
    /// Command rules in the order given, e.g. "+@all", "-flushall"; evaluated last-match-wins.
    pub command_rules: Vec<String>,
    /// Key patterns; "*" with `all_keys`.
    pub key_patterns: Vec<Vec<u8>>,
    pub channel_patterns: Vec<Vec<u8>>,
}

impl User {
    /// A user as ACL SETUSER creates it: disabled, no password, no commands, keys or channels.
    pub fn new(name: &str) -> User {
        User {
            name: name.into(),
            enabled: false,
            nopass: false,
            passwords: BTreeSet::new(),
            command_rules: Vec::new(),
            key_patterns: Vec::new(),
            channel_patterns: Vec::new(),
        }
    }

    fn default_user() -> User {
        User {
            enabled: true,
            nopass: true,
            command_rules: vec!["+@all".into()],
            key_patterns: vec![b"*".to_vec()],
            channel_patterns: vec![b"*".to_vec()],
            ..User::new("default")
        }
    }

    /// Applies one ACL SETUSER rule.
    pub fn apply_rule(&mut self, rule: &str) -> Result<(), String> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "allkeys" => self.key_patterns = vec![b"*".to_vec()],
            "resetkeys" => self.key_patterns.clear(),
            "allchannels" => self.channel_patterns = vec![b"*".to_vec()],
            "resetchannels" => self.channel_patterns.clear(),
            "allcommands" => self.command_rules = vec!["+@all".into()],
            "nocommands" => self.command_rules = vec!["-@all".into()],
            "reset" => *self = User::new(&self.name),
            _ => return self.apply_pattern_rule(rule),
        }
        Ok(())
    }

    fn apply_pattern_rule(&mut self, rule: &str) -> Result<(), String> {
        let invalid = || format!("Error in ACL SETUSER modifier '{rule}': Syntax error");
        // Split after the first character, not byte: a rule may start with any UTF-8 character.
        let Some(first) = rule.chars().next() else {
            return Err(invalid());
        };
        let (prefix, rest) = rule.split_at(first.len_utf8());
        match prefix {
            ">" => {
                self.passwords.insert(sha256_hex(rest.as_bytes()));
                self.nopass = false;
            }
            "<" => {
                self.passwords.remove(&sha256_hex(rest.as_bytes()));
            }
            "#" if rest.len() == 64 && rest.bytes().all(|byte| byte.is_ascii_hexdigit()) => {
                self.passwords.insert(rest.to_ascii_lowercase());
                self.nopass = false;
            }
            "!" => {
                self.passwords.remove(&rest.to_ascii_lowercase());
            }
            "~" => self.key_patterns.push(rest.as_bytes().to_vec()),
            "%" => {
                // %R~pattern / %W~pattern: fallow grants both directions on the pattern.
                let pattern = rest.split_once('~').ok_or_else(invalid)?.1;
                self.key_patterns.push(pattern.as_bytes().to_vec());
            }
            "&" => self.channel_patterns.push(rest.as_bytes().to_vec()),
            "+" | "-" => {
                let known = match rest.strip_prefix('@') {
                    Some(category) => category == "all" || known_category(category),
                    None => {
                        info::lookup(rest.split('|').next().unwrap_or(rest).as_bytes()).is_some()
                    }
                };
                if !known {
                    return Err(invalid());
                }
                self.command_rules.push(rule.to_ascii_lowercase());
            }
            _ => return Err(invalid()),
        }
        Ok(())
    }

    pub fn can_run(&self, spec: &CommandInfo) -> bool {
        let categories = spec.categories();
        let mut allowed = false;
        for rule in &self.command_rules {
            let (grant, target) = rule.split_at(1);
            let matches = match target.strip_prefix('@') {
                Some("all") => true,
                Some(category) => categories.contains(&category),
                None => target.split('|').next() == Some(spec.name),
            };
            if matches {
                allowed = grant == "+";
            }
        }
        allowed
    }

    /// Whether the rules grant a whole category: only `±@all` and `±@category` rules count, so a user
    /// granted single commands of it (`+config`) does not hold the category.
    pub fn allows_category(&self, category: &str) -> bool {
        let mut allowed = false;
        for rule in &self.command_rules {
            let (grant, target) = rule.split_at(1);
            if target == "@all" || target.strip_prefix('@') == Some(category) {
                allowed = grant == "+";
            }
        }
        allowed
    }

    pub fn can_access_key(&self, key: &[u8]) -> bool {
        self.key_patterns
            .iter()
            .any(|pattern| fallow_store::glob::matches(pattern, key))
    }

    /// The user as ACL LIST prints it.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "user {} {}",
            self.name,
            if self.enabled { "on" } else { "off" }
        );
        if self.nopass {
            text.push_str(" nopass");
        }
        for password in &self.passwords {
            text.push_str(&format!(" #{password}"));
        }
        if self.key_patterns.is_empty() {
            text.push_str(" resetkeys");
        }
        for pattern in &self.key_patterns {
            text.push_str(&format!(" ~{}", String::from_utf8_lossy(pattern)));
        }
        if self.channel_patterns.is_empty() {
            text.push_str(" resetchannels");
        }
        for pattern in &self.channel_patterns {
            text.push_str(&format!(" &{}", String::from_utf8_lossy(pattern)));
        }
        if self.command_rules.is_empty() {
            text.push_str(" -@all");
        }
        for rule in &self.command_rules {
            text.push(' ');
            text.push_str(rule);
        }
        text
    }
}

fn known_category(category: &str) -> bool {
    info::categories().contains(&category)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub struct Acl {
    pub users: BTreeMap<String, User>,
}

impl Acl {
    pub fn new(requirepass: &str) -> Acl {
        let mut acl = Acl {
            users: BTreeMap::new(),
        };
        acl.users.insert("default".into(), User::default_user());
        acl.set_default_password(requirepass);
        acl
    }

    /// `requirepass`: empty makes the default user passwordless.
    pub fn set_default_password(&mut self, password: &str) {
        let user = self
            .users
            .entry("default".into())
            .or_insert_with(User::default_user);
        user.passwords.clear();
        user.nopass = password.is_empty();
        if !password.is_empty() {
            user.passwords.insert(sha256_hex(password.as_bytes()));
        }
    }

    /// True when the default user may run every command on every key (the common case, which dispatch
    /// checks without taking the ACL lock).
    pub fn default_is_unrestricted(&self) -> bool {
        self.users.get("default").is_some_and(|user| {
            user.enabled && user.command_rules == ["+@all"] && user.key_patterns == [b"*".to_vec()]
        })
    }

    /// New connections start authenticated as `default` unless it needs a password or is disabled.
    pub fn default_user_requires_auth(&self) -> bool {
        self.users
            .get("default")
            .is_none_or(|user| !user.enabled || !user.nopass)
    }

    /// Checks a username and password; Err is the WRONGPASS reply.
    pub fn authenticate(&self, user: &str, password: &[u8]) -> Result<(), String> {
        let wrongpass = "WRONGPASS invalid username-password pair or user is disabled.".to_string();
        let Some(found) = self.users.get(user) else {
            return Err(wrongpass);
        };
        let ok = found.enabled && (found.nopass || found.passwords.contains(&sha256_hex(password)));
        if ok {
            Ok(())
        } else {
            Err(wrongpass)
        }
    }

    /// Whether `user` may access every key (`allkeys`, or a `~*` pattern): Redis's condition for SORT's BY
    /// and GET patterns, which read keys the arguments do not name.
    pub fn has_all_keys(&self, user: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|found| found.key_patterns.iter().any(|pattern| pattern == b"*"))
    }

    /// May `user` run this command on these keys? Err holds the NOPERM reply and what ACL LOG records.
    pub fn check(&self, user: &str, spec: &CommandInfo, args: &[&[u8]]) -> Result<(), Denied> {
        if user == "default" {
            if let Some(default) = self.users.get("default") {
                if default.command_rules == ["+@all"] && default.key_patterns == [b"*".to_vec()] {
                    return Ok(()); // the common case, kept cheap
                }
            }
        }
        let keys = key_positions(spec, args)
            .into_iter()
            .map(|position| args[position]);
        self.check_request(user, Some(spec), keys)
    }

    /// May `user` run `spec` (None: a request no command permission covers) on `keys`? The check RESP
    /// commands and memcached requests share.
    pub fn check_request<'k>(
        &self,
        user: &str,
        spec: Option<&CommandInfo>,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), Denied> {
        let command_denied = |reply: String| Denied {
            reply,
            reason: log::Reason::Command,
            object: spec.map_or(&b""[..], |spec| spec.name.as_bytes()).to_vec(),
        };
        let Some(found) = self.users.get(user) else {
            return Err(command_denied("NOPERM User has been deleted".into()));
        };
        if let Some(spec) = spec {
            if spec.flags & info::flags::NO_AUTH == 0 && !found.can_run(spec) {
                return Err(command_denied(format!(
                    "NOPERM this user has no permissions to run the '{}' command",
                    spec.name
                )));
            }
        }
        match keys.into_iter().find(|key| !found.can_access_key(key)) {
            Some(key) => Err(Denied {
                reply: "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into(),
                reason: log::Reason::Key,
                object: key.to_vec(),
            }),
            None => Ok(()),
        }
    }
}

/// A refused command: the NOPERM reply, and what ACL LOG records of it.
pub struct Denied {
    pub reply: String,
    pub reason: log::Reason,
    /// The command name or the key.
    pub object: Vec<u8>,
}
