//! ACL SETUSER DELUSER LIST USERS WHOAMI GETUSER CAT LOG GENPASS HELP. The users and their rules live in
//! `crate::acl`; AUTH and HELLO are connection commands.
use super::info::categories;
use super::{subcommand_error, table, Ctx, Handler};
use crate::acl::User;
use std::collections::BTreeSet;

pub const HANDLERS: &[(&str, Handler)] = &[("acl", acl)];

/// Users one server may have; each costs a little memory and is checked on AUTH.
const USERS_MAX: usize = 10_000;
/// Rules one SETUSER may carry.
const RULES_MAX: usize = 1_000;

fn acl(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"setuser", 3..) => setuser(ctx, args),
        (b"deluser", 3..) => deluser(ctx, args),
        (b"list", 2) => list(ctx),
        (b"users", 2) => {
            let acl = ctx.server.acl.read();
            ctx.out.bulks(acl.users.keys().map(|name| name.as_bytes()));
        }
        (b"whoami", 2) => ctx.out.bulk(ctx.conn.user.as_bytes()),
        (b"getuser", 3) => getuser(ctx, args[2]),
        (b"cat", 2 | 3) => cat(ctx, args.get(2).copied()),
        (b"log", 2) => log(ctx, 10),
        (b"log", 3) if super::is(args[2], "reset") => {
            ctx.server.acl_log.reset();
            ctx.out.ok()
        }
        // A negative count lists nothing, as in Redis.
        (b"log", 3) => match super::parse_int(args[2]) {
            Some(count) => log(ctx, count.max(0) as usize),
            None => ctx.out.error(super::NOT_INTEGER),
        },
        (b"genpass", 2 | 3) => genpass(ctx, args.get(2).copied()),
        (b"save" | b"load", 2) => ctx.out.error(
            "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
        ),
        (b"help", 2) => help(ctx),
        (b"dryrun", 4..) => dryrun(ctx, args),
        (
            b"setuser" | b"deluser" | b"list" | b"users" | b"whoami" | b"getuser" | b"cat"
            | b"log" | b"genpass" | b"save" | b"load" | b"help" | b"dryrun",
            _,
        ) => ctx.out.error(&super::arity_error(&format!(
            "acl|{}",
            String::from_utf8_lossy(&sub)
        ))),
        _ => subcommand_error(ctx, args),
    }
}

/// ACL DRYRUN user command [arg...]: whether `user` may run the command with these arguments; OK, or why
/// not as a bulk string (nothing is logged or run).
fn dryrun(ctx: &mut Ctx, args: &[&[u8]]) {
    let user = String::from_utf8_lossy(args[2]).into_owned();
    let acl = ctx.server.acl.read();
    if !acl.users.contains_key(&user) {
        return ctx.out.error(&format!("ERR User '{user}' not found"));
    }
    let command = &args[3..];
    let Some((_, spec)) = super::lookup(command[0]) else {
        let name = String::from_utf8_lossy(command[0]);
        return ctx.out.error(&format!("ERR Command '{name}' not found"));
    };
    if !spec.arity_ok(command.len()) {
        return ctx.out.error(&super::arity_error(spec.name));
    }
    match acl.check(&user, spec.info, command) {
        Ok(()) => ctx.out.ok(),
        Err(denied) => {
            let why = match denied.reason {
                crate::acl::log::Reason::Key => format!(
                    "This user has no permissions to access the '{}' key",
                    String::from_utf8_lossy(&denied.object)
                ),
                _ => format!(
                    "This user has no permissions to run the '{}' command",
                    spec.name
                ),
            };
            ctx.out.bulk(why.as_bytes())
        }
    }
}

/// A user as ACL SETUSER creates it: disabled, no password, no commands, keys or channels.
fn new_user(name: &str) -> User {
    User {
        name: name.to_string(),
        enabled: false,
        nopass: false,
        passwords: BTreeSet::new(),
        command_rules: Vec::new(),
        key_patterns: Vec::new(),
        channel_patterns: Vec::new(),
    }
}

fn valid_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name
            .bytes()
            .any(|byte| byte.is_ascii_whitespace() || byte.is_ascii_control())
}

fn setuser(ctx: &mut Ctx, args: &[&[u8]]) {
    let Ok(name) = std::str::from_utf8(args[2]) else {
        return ctx.out.error("ERR Usernames must be valid UTF-8");
    };
    if !valid_user_name(name) {
        return ctx
            .out
            .error("ERR Usernames can't contain spaces or null characters");
    }
    if args.len() - 3 > RULES_MAX {
        return ctx.out.error("ERR too many ACL rules in one SETUSER");
    }
    let mut acl = ctx.server.acl.write();
    if !acl.users.contains_key(name) && acl.users.len() >= USERS_MAX {
        return ctx.out.error("ERR too many users");
    }
    // Rules apply to a copy, so one bad rule leaves the user unchanged, as in Redis.
    let mut user = acl
        .users
        .get(name)
        .cloned()
        .unwrap_or_else(|| new_user(name));
    for &rule in &args[3..] {
        let applied = match std::str::from_utf8(rule) {
            Ok("") => Err(String::from(
                "Error in ACL SETUSER modifier '': Syntax error",
            )),
            Ok(rule) => user.apply_rule(rule),
            Err(_) => Err(format!(
                "Error in ACL SETUSER modifier '{}': Syntax error",
                String::from_utf8_lossy(rule)
            )),
        };
        if let Err(message) = applied {
            return ctx.out.error(&format!("ERR {message}"));
        }
    }
    acl.users.insert(name.to_string(), user);
    ctx.server.acl_changed(&acl);
    ctx.out.ok();
}

fn deluser(ctx: &mut Ctx, args: &[&[u8]]) {
    if args[2..].iter().any(|&name| name == b"default") {
        return ctx.out.error("ERR The 'default' user cannot be removed");
    }
    let mut removed = Vec::new();
    {
        let mut acl = ctx.server.acl.write();
        for &name in &args[2..] {
            let name = String::from_utf8_lossy(name);
            if acl.users.remove(name.as_ref()).is_some() {
                removed.push(name.into_owned());
            }
        }
        ctx.server.acl_changed(&acl);
    }
    // Connections authenticated as a deleted user are closed, as Redis does.
    for client in ctx.server.clients.lock().values() {
        if client.id != ctx.conn.id() && removed.contains(&client.snapshot.lock().user) {
            client.kill();
        }
    }
    if removed.contains(&ctx.conn.user) {
        ctx.conn.close_after_reply = true;
    }
    ctx.out.int(removed.len() as i64);
}

fn list(ctx: &mut Ctx) {
    let acl = ctx.server.acl.read();
    let lines: Vec<String> = acl.users.values().map(User::describe).collect();
    ctx.out.bulks(lines.iter().map(|line| line.as_bytes()));
}

/// The command rules as Redis shows them: always starting from "+@all" or "-@all".
fn command_rules_text(user: &User) -> String {
    let starts_absolute = user
        .command_rules
        .first()
        .is_some_and(|rule| rule == "+@all" || rule == "-@all");
    let mut parts: Vec<&str> = Vec::new();
    if !starts_absolute {
        parts.push("-@all");
    }
    parts.extend(user.command_rules.iter().map(String::as_str));
    parts.join(" ")
}

fn patterns_text(prefix: char, patterns: &[Vec<u8>]) -> String {
    patterns
        .iter()
        .map(|pattern| format!("{prefix}{}", String::from_utf8_lossy(pattern)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn getuser(ctx: &mut Ctx, name: &[u8]) {
    let acl = ctx.server.acl.read();
    let Some(user) = acl.users.get(String::from_utf8_lossy(name).as_ref()) else {
        return ctx.out.nil();
    };
    let out = &mut *ctx.out;
    out.map_len(6);
    out.bulk(b"flags");
    let mut flags = vec![if user.enabled { "on" } else { "off" }];
    if user.nopass {
        flags.push("nopass");
    }
    out.bulks(flags.iter().map(|flag| flag.as_bytes()));
    out.bulk(b"passwords");
    out.bulks(user.passwords.iter().map(|hash| hash.as_bytes()));
    out.bulk(b"commands");
    out.bulk(command_rules_text(user).as_bytes());
    out.bulk(b"keys");
    out.bulk(patterns_text('~', &user.key_patterns).as_bytes());
    out.bulk(b"channels");
    out.bulk(patterns_text('&', &user.channel_patterns).as_bytes());
    out.bulk(b"selectors");
    out.array_len(0);
}

fn cat(ctx: &mut Ctx, category: Option<&[u8]>) {
    let Some(category) = category else {
        return ctx
            .out
            .bulks(categories().iter().map(|category| category.as_bytes()));
    };
    let category = String::from_utf8_lossy(category).to_ascii_lowercase();
    if !categories().contains(&category.as_str()) {
        return ctx.out.error(&format!("ERR Unknown category '{category}'"));
    }
    let names: Vec<&str> = table()
        .iter()
        .filter(|spec| spec.categories().contains(&category.as_str()))
        .map(|spec| spec.name)
        .collect();
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

/// ACL LOG [count]: the newest entries, Redis 7.2's fields (7.0's plus entry-id and timestamps).
fn log(ctx: &mut Ctx, count: usize) {
    let entries = ctx.server.acl_log.newest(count);
    let now_ms = fallow_store::now_ms();
    let out = &mut *ctx.out;
    out.array_len(entries.len());
    for entry in entries {
        out.map_len(10);
        out.bulk(b"count");
        out.int(entry.count as i64);
        out.bulk(b"reason");
        out.bulk(entry.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(entry.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(entry.object.as_bytes());
        out.bulk(b"username");
        out.bulk(entry.username.as_bytes());
        out.bulk(b"age-seconds");
        out.double(now_ms.saturating_sub(entry.updated_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(entry.client_info.as_bytes());
        out.bulk(b"entry-id");
        out.int(entry.entry_id as i64);
        out.bulk(b"timestamp-created");
        out.int(entry.created_ms as i64);
        out.bulk(b"timestamp-last-updated");
        out.int(entry.updated_ms as i64);
    }
}

fn genpass(ctx: &mut Ctx, bits: Option<&[u8]>) {
    let bits = match bits.map(super::parse_int) {
        None => 256,
        Some(Some(bits)) if (1..=4096).contains(&bits) => bits as usize,
        Some(_) => {
            return ctx
                .out
                .error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096")
        }
    };
    let hex_chars = bits.div_ceil(4);
    let bytes: Vec<u8> = (0..hex_chars.div_ceil(2))
        .map(|_| rand::random::<u8>())
        .collect();
    let mut text = hex::encode(bytes);
    text.truncate(hex_chars);
    ctx.out.bulk(text.as_bytes());
}

fn help(ctx: &mut Ctx) {
    super::reply::help_reply(
        ctx,
        "ACL",
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_rules_start_absolute() {
        let mut user = new_user("bob");
        assert_eq!(command_rules_text(&user), "-@all");
        user.apply_rule("+get").unwrap();
        assert_eq!(command_rules_text(&user), "-@all +get");
        user.apply_rule("allcommands").unwrap();
        assert_eq!(command_rules_text(&user), "+@all");
    }

    #[test]
    fn user_names_are_checked() {
        assert!(valid_user_name("alice"));
        assert!(!valid_user_name("a b"));
        assert!(!valid_user_name(""));
    }
}
