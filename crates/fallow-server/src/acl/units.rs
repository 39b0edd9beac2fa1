//! What ACL command rules name: every command and subcommand of Redis 7.0 (so `+config|get`, the categories
//! and ACL CAT are Redis's even for commands fallow does not implement), then fallow's own commands. Each
//! unit has a bit in a selector's bitmap, as each command has an id in Redis.
use crate::command::info::{self, redis_keys};
use std::collections::HashMap;
use std::sync::LazyLock;

pub struct Unit {
    /// Lower-case name; `parent|sub` for a subcommand.
    pub name: String,
    pub parent: Option<usize>,
    /// Subcommands (Redis's container commands only).
    pub children: Vec<usize>,
    /// Bits in `info::categories()` order.
    pub categories: u64,
    /// One of Redis's commands (not fallow's own).
    pub redis: bool,
}

pub struct Units {
    pub list: Vec<Unit>,
    by_name: HashMap<String, usize>,
    /// Units of each category, by its index in `info::categories()`.
    pub by_category: Vec<Vec<usize>>,
}

/// Categories fit one u64 of bits.
const CATEGORIES_MAX: usize = 64;

static UNITS: LazyLock<Units> = LazyLock::new(build);

pub fn units() -> &'static Units {
    &UNITS
}

fn build() -> Units {
    let categories = info::categories();
    assert!(categories.len() <= CATEGORIES_MAX, "too many categories");
    let mut list: Vec<Unit> = Vec::new();
    let mut by_name = HashMap::new();
    let mut add = |name: &str, categories: u64, redis: bool, list: &mut Vec<Unit>| {
        let parent = name.split_once('|').map(|(parent, _)| by_name[parent]);
        let index = list.len();
        list.push(Unit {
            name: name.to_string(),
            parent,
            children: Vec::new(),
            categories,
            redis,
        });
        if let Some(parent) = parent {
            list[parent].children.push(index);
        }
        let previous = by_name.insert(name.to_string(), index);
        assert!(previous.is_none(), "unit {name} twice");
    };
    // Redis's rows list each container right before its subcommands.
    for command in redis_keys::all_commands() {
        let bits = redis_keys::category_bits(command);
        add(&command.name, u64::from(bits), true, &mut list);
    }
    for spec in info::table() {
        if redis_keys::redis_command(spec.name).is_some() {
            continue;
        }
        let bits = spec
            .categories()
            .iter()
            .map(|name| category_index(name).expect("a listed category"))
            .fold(0u64, |bits, index| bits | 1 << index);
        add(spec.name, bits, false, &mut list);
    }
    let by_category = (0..categories.len())
        .map(|category| {
            (0..list.len())
                .filter(|&unit| list[unit].categories & (1 << category) != 0)
                .collect()
        })
        .collect();
    Units {
        list,
        by_name,
        by_category,
    }
}

/// A category's index in `info::categories()`, in any case.
pub fn category_index(name: &str) -> Option<usize> {
    info::categories()
        .iter()
        .position(|category| category.eq_ignore_ascii_case(name))
}

impl Units {
    /// A command (`get`) or subcommand (`config|get`) by name, in any case, as Redis's ACLLookupCommand.
    pub fn lookup(&self, name: &str) -> Option<usize> {
        let lower = name.to_ascii_lowercase();
        let mut parts = lower.split('|');
        let parent = *self.by_name.get(parts.next()?)?;
        match (parts.next(), parts.next()) {
            (None, _) if self.list[parent].parent.is_none() => Some(parent),
            (Some(_), None) => self.by_name.get(&lower).copied(),
            _ => None,
        }
    }

    /// The unit a call runs as: the subcommand its second argument names, else the command.
    pub fn of_call(&self, name: &str, args: &[&[u8]]) -> Option<usize> {
        // Table names are lower-case already: no copy on this per-command path.
        let unit = *self.by_name.get(name)?;
        if self.list[unit].children.is_empty() || args.len() < 2 {
            return Some(unit);
        }
        let sub = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
        Some(
            self.by_name
                .get(&format!("{}|{sub}", self.list[unit].name))
                .copied()
                .unwrap_or(unit),
        )
    }

    /// Names of the commands in a category, as ACL CAT lists them.
    pub fn in_category(&self, category: usize) -> impl Iterator<Item = &str> {
        self.by_category[category]
            .iter()
            .map(|&unit| self.list[unit].name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_redis_commands_and_subcommands_then_fallows() {
        let units = units();
        let config = units.lookup("CONFIG").unwrap();
        let get = units.lookup("config|GET").unwrap();
        assert_eq!(units.list[get].parent, Some(config));
        assert!(units.list[config].children.contains(&get));
        assert_eq!(units.lookup("config|nosuch"), None);
        assert_eq!(units.lookup("get|x"), None);
        assert_eq!(units.lookup("config|get|x"), None);
        assert_eq!(units.lookup("nosuch"), None);
        assert_eq!(
            units.of_call("config", &[b"config", b"Get", b"x"]),
            Some(get)
        );
        assert_eq!(units.of_call("config", &[b"config", b"bad"]), Some(config));
        let admin = category_index("admin").unwrap();
        assert!(units.in_category(admin).any(|name| name == "config|set"));
        assert!(!units.in_category(admin).any(|name| name == "get"));
        for spec in info::table() {
            assert!(units.lookup(spec.name).is_some(), "{}", spec.name);
        }
    }
}
