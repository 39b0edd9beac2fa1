//! A selector: the commands, keys and channels one set of ACL rules grants (Redis 7.0's aclSelector). A user
//! has a root selector and any number of `(...)` selectors; a command runs when one of them grants it with
//! all its keys and channels.
use super::keys::{Object, ObjectKind};
use super::units::{category_index, units};
use super::RuleError;
use crate::command::info::redis_keys::{READ, WRITE};
use crate::command::info::REDIS_CATEGORIES;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    /// READ and/or WRITE.
    pub permissions: u8,
    pub pattern: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// One bit per unit (`units()`).
    allowed: Vec<u64>,
    /// `+@all` given: Redis's reserved bit for commands added later, which decides `+@all`/`-@all` first.
    future: bool,
    /// Allowed first arguments of otherwise denied commands without subcommands (`+select|0`), in order.
    first_args: BTreeMap<usize, Vec<String>>,
    pub all_keys: bool,
    pub keys: Vec<KeyPattern>,
    pub all_channels: bool,
    pub channels: Vec<Vec<u8>>,
}

/// Why a selector refused a call, and the argument at fault (0 for the command).
pub type Refusal = (super::log::Reason, usize);

impl Selector {
    /// Nothing granted (a new user's root, a new `(...)`).
    pub fn empty() -> Selector {
        Selector {
            allowed: vec![0; units().list.len().div_ceil(64)],
            future: false,
            first_args: BTreeMap::new(),
            all_keys: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }

    /// Applies one selector rule (Redis's ACLSetSelector).
    pub fn apply(&mut self, op: &str) -> Result<(), RuleError> {
        let lower = op.to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.all_keys = true;
                self.keys.clear();
            }
            "resetkeys" => {
                self.all_keys = false;
                self.keys.clear();
            }
            "allchannels" | "&*" => {
                self.all_channels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.set_all_commands(true),
            "nocommands" | "-@all" => self.set_all_commands(false),
            _ => return self.apply_prefixed(op),
        }
        Ok(())
    }

    fn apply_prefixed(&mut self, op: &str) -> Result<(), RuleError> {
        let bytes = op.as_bytes();
        match bytes.first() {
            Some(b'~' | b'%') => self.add_key_pattern(op),
            Some(b'&') => self.add_channel(&op[1..]),
            Some(b'+') if bytes.get(1) != Some(&b'@') => self.allow_command(&op[1..]),
            Some(b'-') if bytes.get(1) != Some(&b'@') => {
                let unit = units().lookup(&op[1..]).ok_or(RuleError::UnknownCommand)?;
                self.change(unit, false);
                Ok(())
            }
            Some(b'+' | b'-') => {
                let category = category_index(&op[2..]).ok_or(RuleError::UnknownCommand)?;
                self.change_category(category, bytes[0] == b'+');
                Ok(())
            }
            _ => Err(RuleError::Syntax),
        }
    }

    fn set_all_commands(&mut self, allow: bool) {
        let fill = if allow { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|word| *word = fill);
        self.future = allow;
        self.first_args.clear();
    }

    /// `%R~`, `%W~`, `%RW~` or `~` followed by a glob pattern.
    fn add_key_pattern(&mut self, op: &str) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::AfterAllKeys);
        }
        let (permissions, pattern) = match op.strip_prefix('~') {
            Some(pattern) => (READ | WRITE, pattern),
            None => parse_permissions(&op[1..])?,
        };
        if pattern.contains(' ') {
            return Err(RuleError::Syntax);
        }
        let pattern = pattern.as_bytes().to_vec();
        match self.keys.iter_mut().find(|known| known.pattern == pattern) {
            Some(known) => known.permissions |= permissions,
            None => self.keys.push(KeyPattern {
                permissions,
                pattern,
            }),
        }
        Ok(())
    }

    fn add_channel(&mut self, pattern: &str) -> Result<(), RuleError> {
        if self.all_channels {
            return Err(RuleError::AfterAllChannels);
        }
        if pattern.contains(' ') {
            return Err(RuleError::Syntax);
        }
        let pattern = pattern.as_bytes().to_vec();
        if !self.channels.contains(&pattern) {
            self.channels.push(pattern);
        }
        Ok(())
    }

    /// `+cmd`, `+cmd|sub`, or `+cmd|first-arg` of a command without subcommands.
    fn allow_command(&mut self, name: &str) -> Result<(), RuleError> {
        let units = units();
        let Some((base, sub)) = name.rsplit_once('|') else {
            let unit = units.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(unit, true);
            return Ok(());
        };
        let unit = units.lookup(base).ok_or(RuleError::UnknownCommand)?;
        if units.list[unit].parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if units.list[unit].children.is_empty() {
            if self.allows_unit(unit) {
                // Irrelevant while the command is allowed, and any change to it drops them (as in Redis).
                return Ok(());
            }
            let args = self.first_args.entry(unit).or_default();
            if !args.iter().any(|known| known.eq_ignore_ascii_case(sub)) {
                args.push(sub.to_string());
            }
        } else {
            let sub_unit = units.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(sub_unit, true);
        }
        Ok(())
    }

    /// Allows or denies a unit and its subcommands (Redis's ACLChangeSelectorPerm).
    fn change(&mut self, unit: usize, allow: bool) {
        self.set_bit(unit, allow);
        self.first_args.remove(&unit);
        for &child in &units().list[unit].children {
            self.set_bit(child, allow);
        }
    }

    fn change_category(&mut self, category: usize, allow: bool) {
        for &unit in &units().by_category[category] {
            self.change(unit, allow);
        }
    }

    fn set_bit(&mut self, unit: usize, allow: bool) {
        let (word, bit) = (unit / 64, 1u64 << (unit % 64));
        if allow {
            self.allowed[word] |= bit;
        } else {
            self.allowed[word] &= !bit;
        }
    }

    pub fn allows_unit(&self, unit: usize) -> bool {
        self.allowed[unit / 64] & (1 << (unit % 64)) != 0
    }

    /// Every command, and the commands added later (`+@all` unchanged), and every key.
    pub fn is_unrestricted(&self) -> bool {
        self.future && self.all_keys && self.allowed.iter().all(|&word| word == u64::MAX)
    }

    /// Every unit of a category allowed.
    pub fn allows_category(&self, category: usize) -> bool {
        units().by_category[category]
            .iter()
            .all(|&unit| self.allows_unit(unit))
    }

    /// Read access to every key (`~*`, `allkeys`, `%R~*`): Redis's condition for SORT's BY and GET.
    pub fn reads_every_key(&self) -> bool {
        self.all_keys
            || self
                .keys
                .iter()
                .any(|key| key.pattern == b"*" && key.permissions & READ != 0)
    }

    /// May this selector run `unit` with these keys and channels (Redis's ACLSelectorCheckCmd)?
    pub fn check(
        &self,
        unit: usize,
        needs_command: bool,
        args: &[&[u8]],
        objects: &[Object],
    ) -> Result<(), Refusal> {
        if needs_command && !self.allows_unit(unit) && !self.allows_first_arg(unit, args) {
            return Err((super::log::Reason::Command, 0));
        }
        for object in objects {
            let allowed = match object.kind {
                ObjectKind::Key(need) => self.all_keys || self.key_allowed(object.bytes, need),
                ObjectKind::Channel { pattern } => {
                    self.all_channels || self.channel_allowed(object.bytes, pattern)
                }
            };
            if !allowed {
                let reason = match object.kind {
                    ObjectKind::Key(_) => super::log::Reason::Key,
                    ObjectKind::Channel { .. } => super::log::Reason::Channel,
                };
                return Err((reason, object.position));
            }
        }
        Ok(())
    }

    fn allows_first_arg(&self, unit: usize, args: &[&[u8]]) -> bool {
        match (self.first_args.get(&unit), args.get(1)) {
            (Some(allowed), Some(first)) => allowed
                .iter()
                .any(|arg| arg.as_bytes().eq_ignore_ascii_case(first)),
            _ => false,
        }
    }

    fn key_allowed(&self, key: &[u8], need: u8) -> bool {
        self.keys.iter().any(|pattern| {
            pattern.permissions & need == need && fallow_store::glob::matches(&pattern.pattern, key)
        })
    }

    /// A pattern subscription needs that very pattern granted; a channel may match any granted pattern.
    pub fn channel_allowed(&self, channel: &[u8], pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|granted| {
                if pattern {
                    granted == channel
                } else {
                    fallow_store::glob::matches(granted, channel)
                }
            })
    }

    /// Key patterns as ACL LIST shows them.
    pub fn describe_keys(&self) -> Vec<String> {
        if self.all_keys {
            return vec!["~*".into()];
        }
        self.keys
            .iter()
            .map(|key| {
                let prefix = match key.permissions {
                    READ => "%R~",
                    WRITE => "%W~",
                    _ => "~",
                };
                format!("{prefix}{}", String::from_utf8_lossy(&key.pattern))
            })
            .collect()
    }

    /// Channel patterns as GETUSER shows them (ACL LIST adds `resetchannels` before them).
    pub fn describe_channels(&self) -> Vec<String> {
        if self.all_channels {
            return vec!["&*".into()];
        }
        self.channels
            .iter()
            .map(|channel| format!("&{}", String::from_utf8_lossy(channel)))
            .collect()
    }

    /// Keys, channels and command rules as one ACL LIST fragment (Redis's ACLDescribeSelector).
    pub fn describe(&self) -> String {
        let mut parts = self.describe_keys();
        if !self.all_channels {
            parts.push("resetchannels".into());
        }
        parts.extend(self.describe_channels());
        parts.push(self.describe_commands());
        parts.join(" ")
    }

    /// The command rules that rebuild this selector's bitmap (Redis 7.0's ACLDescribeSelectorCommandRules):
    /// `+@all` or `-@all`, then greedily the categories that fit best, then single commands.
    pub fn describe_commands(&self) -> String {
        let additive = !self.future;
        let mut rules = vec![if additive { "-@all" } else { "+@all" }.to_string()];
        let mut fake = Selector::empty();
        fake.set_all_commands(!additive);
        let mut temp = self.clone();
        let mut applied = [false; REDIS_CATEGORIES.len()];
        while let Some(best) = best_category(&temp, &applied, additive) {
            fake.change_category(best, additive);
            temp.change_category(best, !additive);
            applied[best] = true;
            let sign = if additive { "+" } else { "-" };
            rules.push(format!("{sign}@{}", REDIS_CATEGORIES[best]));
        }
        for (unit, described) in units().list.iter().enumerate() {
            let wanted = self.allows_unit(unit);
            if wanted != fake.allows_unit(unit) {
                rules.push(format!(
                    "{}{}",
                    if wanted { "+" } else { "-" },
                    described.name
                ));
                fake.change(unit, wanted);
            }
            if !wanted {
                for arg in self.first_args.get(&unit).into_iter().flatten() {
                    rules.push(format!("+{}|{arg}", described.name));
                }
            }
        }
        debug_assert!(
            fake.allowed == self.allowed,
            "described rules rebuild the bitmap"
        );
        rules.join(" ")
    }
}

/// The category that best narrows the difference between `temp` and an empty (additive) or full selector.
fn best_category(temp: &Selector, applied: &[bool], additive: bool) -> Option<usize> {
    let mut best = None;
    let (mut min_diff, mut max_same) = (usize::MAX, 0);
    for (category, _) in applied.iter().enumerate().filter(|(_, done)| !**done) {
        // Only Redis's commands count, so the categories chosen are the ones Redis chooses; fallow's own
        // commands are then fixed up one by one.
        let units = units();
        let (mut on, mut off) = (0, 0);
        for &unit in units.by_category[category]
            .iter()
            .filter(|&&unit| units.list[unit].redis)
        {
            if temp.allows_unit(unit) {
                on += 1;
            } else {
                off += 1;
            }
        }
        let (diff, same) = if additive { (off, on) } else { (on, off) };
        if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
            best = Some(category);
            min_diff = diff;
            max_same = same;
        }
    }
    best
}

fn parse_permissions(text: &str) -> Result<(u8, &str), RuleError> {
    let mut permissions = 0;
    for (at, byte) in text.bytes().enumerate() {
        match byte.to_ascii_uppercase() {
            b'R' if permissions & READ == 0 => permissions |= READ,
            b'W' if permissions & WRITE == 0 => permissions |= WRITE,
            b'~' if permissions != 0 => return Ok((permissions, &text[at + 1..])),
            _ => return Err(RuleError::Syntax),
        }
    }
    // `%R` without `~`: Redis takes an empty pattern.
    if permissions == 0 {
        return Err(RuleError::Syntax);
    }
    Ok((permissions, ""))
}
