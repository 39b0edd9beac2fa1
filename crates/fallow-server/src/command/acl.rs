//! ACL SETUSER DELUSER LIST USERS WHOAMI GETUSER CAT LOG GENPASS DRYRUN LOAD SAVE HELP. The users and their
//! rules live in `crate::acl`; AUTH and HELLO are connection commands.
use super::{subcommand_error, Ctx, Handler};
use crate::acl::units::{category_index, units};
use crate::acl::{merge_selectors, User};

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
        (b"save", 2) => save(ctx),
        (b"load", 2) => load(ctx),
        (b"help", 2) => help(ctx),
        (b"dryrun", 4..) => dryrun(ctx, args),
        (
            b"setuser" | b"deluser" | b"list" | b"users" | b"whoami" | b"getuser" | b"cat" | b"log"
            | b"genpass" | b"save" | b"load" | b"help" | b"dryrun",
            _,
        ) => ctx.out.error(&super::arity_error(&format!(
            "acl|{}",
            String::from_utf8_lossy(&sub)
        ))),
        _ => subcommand_error(ctx, args),
    }
}

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// The configured `aclfile`, or None (ACL LOAD and SAVE then refuse, as in Redis).
fn acl_file(ctx: &Ctx) -> Option<String> {
    let path = ctx.server.config.read().aclfile.clone();
    (!path.is_empty()).then_some(path)
}

/// ACL SAVE: every user to the ACL file, atomically.
fn save(ctx: &mut Ctx) {
    let Some(path) = acl_file(ctx) else {
        return ctx.out.error(NO_ACL_FILE);
    };
    let saved = crate::acl::file::save(&path, &ctx.server.acl.read());
    match saved {
        Ok(()) => ctx.out.ok(),
        Err(error) => {
            tracing::warn!(path, %error, "ACL SAVE failed");
            ctx.out.error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
        }
    }
}

/// ACL LOAD: replaces every user with the file's, or changes nothing when any line is wrong. As in Redis
/// 7.0, connections of users other than `default` are closed (their users were replaced).
fn load(ctx: &mut Ctx) {
    let Some(path) = acl_file(ctx) else {
        return ctx.out.error(NO_ACL_FILE);
    };
    let users = match crate::acl::file::load(&path) {
        Ok(users) => users,
        Err(error) => return ctx.out.error(&format!("ERR {error}")),
    };
    {
        let mut acl = ctx.server.acl.write();
        acl.users = users;
        ctx.server.acl_changed(&acl);
    }
    close_connections_of(ctx, |user| user != "default");
    ctx.out.ok();
}

/// Closes the connections whose user matches (this one after its reply).
fn close_connections_of(ctx: &mut Ctx, matches: impl Fn(&str) -> bool) {
    for client in ctx.server.clients.lock().values() {
        if client.id != ctx.conn.id() && matches(&client.snapshot.lock().user) {
            client.kill();
        }
    }
    if matches(&ctx.conn.user) {
        ctx.conn.close_after_reply = true;
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
        Err(denied) => ctx.out.bulk(denied.dryrun_text().as_bytes()),
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
    // fallow's rules are UTF-8 (docs/compat.md, ACL). One that is not is applied to the scratch copy with
    // its bytes read as U+FFFD, so any error Redis would name comes first; the copy is then refused, never
    // kept.
    let any_binary = args[3..]
        .iter()
        .any(|rule| std::str::from_utf8(rule).is_err());
    let lossy: Vec<std::borrow::Cow<str>> = args[3..]
        .iter()
        .map(|rule| String::from_utf8_lossy(rule))
        .collect();
    let rules: Vec<&str> = lossy.iter().map(AsRef::as_ref).collect();
    let merged = match merge_selectors(&rules) {
        Ok(merged) => merged,
        Err(start) => {
            return ctx.out.error(&format!(
                "ERR Unmatched parenthesis in acl selector starting at '{start}'."
            ))
        }
    };
    let mut acl = ctx.server.acl.write();
    if !acl.users.contains_key(name) && acl.users.len() >= USERS_MAX {
        return ctx.out.error("ERR too many users");
    }
    // Rules apply to a copy, so one bad rule leaves the user unchanged, as in Redis.
    let mut user = acl
        .users
        .get(name)
        .cloned()
        .unwrap_or_else(|| User::new(name));
    let mut first_binary = None;
    for rule in &merged {
        if any_binary && first_binary.is_none() && rule.contains(char::REPLACEMENT_CHARACTER) {
            first_binary = Some(rule);
        }
        if let Err(message) = user.apply_rule(rule) {
            return ctx.out.error(&format!("ERR {message}"));
        }
    }
    if let Some(rule) = first_binary {
        return ctx.out.error(&format!(
            "ERR Error in ACL SETUSER modifier '{rule}': Syntax error"
        ));
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
    close_connections_of(ctx, |user| removed.iter().any(|name| name == user));
    ctx.out.int(removed.len() as i64);
}

fn list(ctx: &mut Ctx) {
    let acl = ctx.server.acl.read();
    let lines: Vec<String> = acl.users.values().map(User::describe).collect();
    ctx.out.bulks(lines.iter().map(|line| line.as_bytes()));
}

fn getuser(ctx: &mut Ctx, name: &[u8]) {
    let acl = ctx.server.acl.read();
    let Some(user) = acl.users.get(String::from_utf8_lossy(name).as_ref()) else {
        return ctx.out.nil();
    };
    let out = &mut *ctx.out;
    out.map_len(6);
    out.bulk(b"flags");
    out.bulks(user.flags().iter().map(|flag| flag.as_bytes()));
    out.bulk(b"passwords");
    out.bulks(user.passwords.iter().map(|hash| hash.as_bytes()));
    selector_fields(out, &user.root);
    out.bulk(b"selectors");
    out.array_len(user.selectors.len());
    for selector in &user.selectors {
        out.map_len(3);
        selector_fields(out, selector);
    }
}

/// commands, keys and channels of a selector, as GETUSER shows them.
fn selector_fields(out: &mut super::ReplyWriter, selector: &crate::acl::selector::Selector) {
    out.bulk(b"commands");
    out.bulk(selector.describe_commands().as_bytes());
    out.bulk(b"keys");
    out.bulk(selector.describe_keys().join(" ").as_bytes());
    out.bulk(b"channels");
    out.bulk(selector.describe_channels().join(" ").as_bytes());
}

fn cat(ctx: &mut Ctx, category: Option<&[u8]>) {
    let Some(category) = category else {
        return ctx.out.bulks(
            super::info::categories()
                .iter()
                .map(|category| category.as_bytes()),
        );
    };
    let name = String::from_utf8_lossy(category);
    let Some(index) = category_index(&name) else {
        return ctx.out.error(&format!("ERR Unknown category '{name}'"));
    };
    let names: Vec<&str> = units().in_category(index).collect();
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

/// ACL LOG [count]: the newest entries with Redis 7.0's fields.
fn log(ctx: &mut Ctx, count: usize) {
    let entries = ctx.server.acl_log.newest(count);
    let now_ms = fallow_store::now_ms();
    let out = &mut *ctx.out;
    out.array_len(entries.len());
    for entry in entries {
        out.map_len(7);
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
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
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
    fn user_names_are_checked() {
        assert!(valid_user_name("alice"));
        assert!(!valid_user_name("a b"));
        assert!(!valid_user_name(""));
    }
}
