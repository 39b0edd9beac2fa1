//! Users and their permissions (Redis 7.0 ACL): passwords (kept as SHA-256), enabled/disabled, and
//! selectors granting commands, keys (read/write) and channels. `requirepass` is the default user's
//! password. The rule language, ACL LIST text and permission checks follow Redis 7.0.15.
use crate::command::info::{self, CommandInfo};
use selector::Selector;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub mod file;
pub mod keys;
pub mod log;
pub mod selector;
pub mod units;

/// Why a rule was refused; `message` is Redis's text (ACLSetUserStringError).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleError {
    Syntax,
    UnknownCommand,
    AfterAllKeys,
    AfterAllChannels,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
}

impl RuleError {
    pub fn message(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::AfterAllKeys => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::AfterAllChannels => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false) once given; shown by ACL LIST.
    pub sanitize_payload: Option<bool>,
    /// SHA-256 of each password, lower-case hex, in the order added.
    pub passwords: Vec<String>,
    pub root: Selector,
    /// The `(...)` selectors, in the order added.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A user as ACL SETUSER creates it: disabled, no password, no commands, keys or channels.
    pub fn new(name: &str) -> User {
        User {
            name: name.into(),
            enabled: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Vec::new(),
            root: Selector::empty(),
            selectors: Vec::new(),
        }
    }

    fn default_user() -> User {
        let mut user = User::new("default");
        for rule in ["+@all", "~*", "&*", "on", "nopass"] {
            user.apply_rule(rule).expect("valid default rules");
        }
        user
    }

    /// Applies one ACL SETUSER argument (after `(...)` arguments are merged, see `merge_selectors`); Err is
    /// the reply's text after `ERR `.
    pub fn apply_rule(&mut self, rule: &str) -> Result<(), String> {
        self.apply(rule).map_err(|error| {
            format!(
                "Error in ACL SETUSER modifier '{rule}': {}",
                error.message()
            )
        })
    }

    /// Redis's ACLSetUser.
    pub fn apply(&mut self, op: &str) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(()); // a no-op, as in Redis
        }
        match op.to_ascii_lowercase().as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => self.sanitize_payload = Some(false),
            "sanitize-payload" => self.sanitize_payload = Some(true),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "clearselectors" => self.selectors.clear(),
            "reset" => {
                let name = std::mem::take(&mut self.name);
                *self = User::new(&name);
                self.sanitize_payload = Some(true);
            }
            _ => return self.apply_prefixed(op),
        }
        Ok(())
    }

    fn apply_prefixed(&mut self, op: &str) -> Result<(), RuleError> {
        if let Some(password) = op.strip_prefix('>') {
            self.add_password(sha256_hex(password.as_bytes()));
        } else if let Some(hash) = op.strip_prefix('#') {
            self.add_password(checked_hash(hash)?);
        } else if let Some(password) = op.strip_prefix('<') {
            self.remove_password(&sha256_hex(password.as_bytes()))?;
        } else if let Some(hash) = op.strip_prefix('!') {
            self.remove_password(&checked_hash(hash)?)?;
        } else if let Some(inner) = op.strip_prefix('(').and_then(|op| op.strip_suffix(')')) {
            let mut selector = Selector::empty();
            for rule in inner.split_ascii_whitespace() {
                selector.apply(rule)?;
            }
            self.selectors.push(selector);
        } else {
            self.root.apply(op)?;
        }
        Ok(())
    }

    fn add_password(&mut self, hash: String) {
        if !self.passwords.contains(&hash) {
            self.passwords.push(hash);
        }
        self.nopass = false;
    }

    fn remove_password(&mut self, hash: &str) -> Result<(), RuleError> {
        let at = self
            .passwords
            .iter()
            .position(|known| known == hash)
            .ok_or(RuleError::NoSuchPassword)?;
        self.passwords.remove(at);
        Ok(())
    }

    /// The root selector, then the `(...)` ones: the order Redis checks them in.
    pub fn all_selectors(&self) -> impl Iterator<Item = &Selector> {
        std::iter::once(&self.root).chain(&self.selectors)
    }

    /// Flags as ACL LIST and GETUSER show them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// The user as ACL LIST prints it (Redis's ACLDescribeUser, with the name).
    pub fn describe(&self) -> String {
        let mut parts = vec!["user".to_string(), self.name.clone()];
        parts.extend(self.flags().into_iter().map(String::from));
        parts.extend(self.passwords.iter().map(|hash| format!("#{hash}")));
        parts.push(self.root.describe());
        parts.extend(
            self.selectors
                .iter()
                .map(|selector| format!("({})", selector.describe())),
        );
        parts.join(" ")
    }

    /// Whether a selector grants the whole category (every command in it).
    pub fn allows_category(&self, category: &str) -> bool {
        units::category_index(category).is_some_and(|category| {
            self.all_selectors()
                .any(|selector| selector.allows_category(category))
        })
    }
}

/// Joins SETUSER arguments of one `(...)` selector split over several arguments (Redis's
/// ACLMergeSelectorArguments). Err is the argument where an unclosed selector starts.
pub fn merge_selectors<'a>(args: &[&'a str]) -> Result<Vec<std::borrow::Cow<'a, str>>, &'a str> {
    let mut merged = Vec::with_capacity(args.len());
    let mut open: Option<(&'a str, String)> = None;
    for &arg in args {
        if arg.starts_with('(') && !arg.ends_with(')') {
            open = Some((arg, arg.to_string()));
            continue;
        }
        if let Some((_, selector)) = open.as_mut() {
            selector.push(' ');
            selector.push_str(arg);
            if arg.ends_with(')') {
                merged.push(std::borrow::Cow::Owned(open.take().expect("open").1));
            }
            continue;
        }
        merged.push(std::borrow::Cow::Borrowed(arg));
    }
    match open {
        Some((start, _)) => Err(start),
        None => Ok(merged),
    }
}

fn checked_hash(hash: &str) -> Result<String, RuleError> {
    let valid = hash.len() == 64
        && hash
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if valid {
        Ok(hash.to_string())
    } else {
        Err(RuleError::BadHash)
    }
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
            user.passwords.push(sha256_hex(password.as_bytes()));
        }
    }

    /// True when the default user may run every command on every key (the common case, which dispatch
    /// checks without taking the ACL lock).
    pub fn default_is_unrestricted(&self) -> bool {
        self.users
            .get("default")
            .is_some_and(|user| user.enabled && user.root.is_unrestricted())
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
        let hash = sha256_hex(password);
        let ok = found.enabled && (found.nopass || found.passwords.contains(&hash));
        if ok {
            Ok(())
        } else {
            Err(wrongpass)
        }
    }

    /// Whether `user` may read every key: Redis's condition for SORT's BY and GET patterns, which read
    /// keys the arguments do not name.
    pub fn has_all_keys(&self, user: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|found| found.all_selectors().any(Selector::reads_every_key))
    }

    /// May `user` run this command with these arguments (its keys and channels)? Err holds the NOPERM
    /// reply and what ACL LOG records of it.
    pub fn check(&self, user: &str, spec: &CommandInfo, args: &[&[u8]]) -> Result<(), Denied> {
        let units = units::units();
        let unit_name = units
            .of_call(spec.name, args)
            .map_or(spec.name, |unit| units.list[unit].name.as_str());
        let objects = keys::objects(spec, unit_name, args);
        self.check_objects(user, Some(spec), args, &objects)
    }

    /// May `user` run `spec` (None: a request no command permission covers) on `keys`? The check
    /// memcached requests use.
    pub fn check_request<'k>(
        &self,
        user: &str,
        spec: Option<&CommandInfo>,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), Denied> {
        let objects = keys::request_objects(spec, keys);
        let name: &[u8] = spec.map_or(b"", |spec| spec.name.as_bytes());
        self.check_objects(user, spec, &[name], &objects)
    }

    /// Redis's ACLCheckAllUserCommandPerm: allowed when one selector grants the command with every key and
    /// channel; otherwise the denial that got furthest (command < key < channel, then the later argument).
    fn check_objects(
        &self,
        user: &str,
        spec: Option<&CommandInfo>,
        args: &[&[u8]],
        objects: &[keys::Object],
    ) -> Result<(), Denied> {
        let units = units::units();
        let unit = spec.and_then(|spec| units.of_call(spec.name, args));
        let command_name = unit.map_or("", |unit| units.list[unit].name.as_str());
        let Some(found) = self.users.get(user) else {
            return Err(Denied::command(
                "NOPERM User has been deleted".into(),
                command_name,
            ));
        };
        let needs_command = spec.is_some_and(|spec| spec.flags & info::flags::NO_AUTH == 0);
        let mut worst: (log::Reason, usize) = (log::Reason::Command, 0);
        for selector in found.all_selectors() {
            let refusal = match unit {
                Some(unit) => selector.check(unit, needs_command, args, objects),
                None => selector.check(usize::MAX, false, args, objects),
            };
            match refusal {
                Ok(()) => return Ok(()),
                Err(refusal) if rank(refusal) > rank(worst) => worst = refusal,
                Err(_) => {}
            }
        }
        let (reason, position) = worst;
        let object = objects
            .iter()
            .find(|object| object.position == position)
            .map_or(&b""[..], |object| object.bytes);
        Err(Denied::of(reason, command_name, object))
    }
}

/// Redis's order of denials: the reason (command, key, auth, channel), then the argument position.
fn rank((reason, position): (log::Reason, usize)) -> (u8, usize) {
    let reason = match reason {
        log::Reason::Command => 1,
        log::Reason::Key => 2,
        log::Reason::Auth => 3,
        log::Reason::Channel => 4,
    };
    (reason, position)
}

/// A refused command: the NOPERM reply, and what ACL LOG records of it.
#[derive(Debug)]
pub struct Denied {
    pub reply: String,
    pub reason: log::Reason,
    /// The command's full name (`config|set`), the key or the channel.
    pub object: Vec<u8>,
}

impl Denied {
    fn command(reply: String, name: &str) -> Denied {
        Denied {
            reply,
            reason: log::Reason::Command,
            object: name.as_bytes().to_vec(),
        }
    }

    fn of(reason: log::Reason, name: &str, object: &[u8]) -> Denied {
        let object = || object.to_vec();
        match reason {
            log::Reason::Key => Denied {
                reply: "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into(),
                reason,
                object: object(),
            },
            log::Reason::Channel => Denied {
                reply:
                    "NOPERM this user has no permissions to access one of the channels used as arguments"
                        .into(),
                reason,
                object: object(),
            },
            _ => Denied::command(
                format!("NOPERM this user has no permissions to run the '{name}' command"),
                name,
            ),
        }
    }

    /// ACL DRYRUN's text for the denial.
    pub fn dryrun_text(&self) -> String {
        let object = String::from_utf8_lossy(&self.object);
        match self.reason {
            log::Reason::Key => {
                format!("This user has no permissions to access the '{object}' key")
            }
            log::Reason::Channel => {
                format!("This user has no permissions to access the '{object}' channel")
            }
            _ => format!("This user has no permissions to run the '{object}' command"),
        }
    }
}

#[cfg(test)]
mod tests;
