//! COMMAND and its subcommands (COUNT, INFO, DOCS, LIST, GETKEYS, GETKEYSANDFLAGS): the command table as
//! Redis 7.0 reports it. Redis's commands are reported from Redis's own data (`info::redis`), fallow's own
//! commands from their rows, in the same shapes.
use crate::command::flags::NAMES;
use crate::command::info::keyspec::{key_flags, BeginSearch, FindKeys, KeySpec};
use crate::command::info::redis::{self, Arg, Docs, Entry, RedisCommand};
use crate::command::info::{self, CommandInfo, Keys};
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{is, subcommand_error, Ctx, SYNTAX};
use fallow_proto::reply::ReplyWriter;

pub(super) fn command(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 1 {
        return command_infos(ctx, &[]);
    }
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"count", 2) => ctx.out.int(info::table().len() as i64),
        (b"info", _) => command_infos(ctx, &args[2..]),
        (b"docs", _) => command_docs(ctx, &args[2..]),
        (b"list", _) => command_list(ctx, &args[2..]),
        (b"getkeys", 3..) => command_getkeys(ctx, &args[2..], false),
        (b"getkeysandflags", 3..) => command_getkeys(ctx, &args[2..], true),
        (b"help", 2) => help_reply(
            ctx,
            "COMMAND",
            &[
                "(no subcommand)",
                "    Return details about all commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST",
                "    Return a list of all commands in this server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "GETKEYS <full-command>",
                "    Return the keys from a full command.",
                "GETKEYSANDFLAGS <full-command>",
                "    Return the keys and the access flags from a full command.",
            ],
        ),
        (b"count" | b"getkeys" | b"getkeysandflags" | b"help", _) => {
            subcommand_arity_error(ctx, "command", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

/// Every top-level command, in table order.
fn entries() -> impl ExactSizeIterator<Item = Entry> {
    info::table().iter().map(|info| Entry::of(info))
}

fn command_infos(ctx: &mut Ctx, names: &[&[u8]]) {
    let out = &mut *ctx.out;
    if names.is_empty() {
        out.array_len(info::table().len());
        for entry in entries() {
            write_info(out, entry);
        }
        return;
    }
    out.array_len(names.len());
    for name in names {
        match redis::lookup(name) {
            Some(entry) => write_info(out, entry),
            None => out.nil_array(),
        }
    }
}

/// COMMAND INFO's 10 fields (`addReplyCommandInfo`).
fn write_info(out: &mut ReplyWriter, entry: Entry) {
    match entry {
        Entry::Redis(redis) => write_redis_info(out, redis),
        Entry::Own(info) => write_own_info(out, info),
    }
    match entry.subcommands() {
        Some(subs) => {
            out.array_len(subs.len());
            for sub in subs {
                write_info(out, sub);
            }
        }
        None => out.set_len(0),
    }
}

/// The first nine fields of a Redis command.
fn write_redis_info(out: &mut ReplyWriter, redis: &RedisCommand) {
    out.array_len(10);
    out.bulk(redis.name.as_bytes());
    out.int(redis.arity);
    simple_set(out, redis.flags.iter().map(String::as_str));
    out.int(redis.first_key);
    out.int(redis.last_key);
    out.int(redis.key_step);
    simple_set(out, redis.acl_categories.iter().map(String::as_str));
    out.set_len(redis.tips.len());
    for tip in &redis.tips {
        out.bulk(tip.as_bytes());
    }
    write_key_specs(out, &redis.key_specs);
}

/// The first nine fields of one of fallow's own commands, from its row.
fn write_own_info(out: &mut ReplyWriter, spec: &'static CommandInfo) {
    out.array_len(10);
    out.bulk(spec.name.as_bytes());
    out.int(spec.arity as i64);
    let movable = matches!(spec.keys, Keys::Custom(_) | Keys::CustomOrAll { .. });
    let flag_names = NAMES
        .iter()
        .filter(|(flag, _)| spec.flags & flag != 0)
        .map(|(_, name)| *name)
        .chain(movable.then_some("movablekeys"));
    simple_set(out, flag_names.collect::<Vec<_>>().into_iter());
    let (first, last, step) = match spec.keys {
        Keys::Range { first, last, step } => (first as i64, last as i64, step as i64),
        Keys::None | Keys::All | Keys::Custom(_) | Keys::CustomOrAll { .. } => (0, 0, 0),
    };
    out.int(first);
    out.int(last);
    out.int(step);
    let categories: Vec<String> = Entry::Own(spec)
        .acl_categories()
        .iter()
        .map(|category| format!("@{category}"))
        .collect();
    simple_set(out, categories.iter().map(String::as_str));
    out.set_len(0); // tips
    write_key_specs(out, &redis::own_key_specs(spec));
}

/// A set of status strings (flags, categories).
fn simple_set<'a>(out: &mut ReplyWriter, items: impl ExactSizeIterator<Item = &'a str>) {
    out.set_len(items.len());
    for item in items {
        out.simple(item);
    }
}

/// `addReplyCommandKeySpecs`.
fn write_key_specs(out: &mut ReplyWriter, specs: &[KeySpec]) {
    out.set_len(specs.len());
    for spec in specs {
        out.map_len(3 + spec.notes.is_some() as usize);
        if let Some(notes) = &spec.notes {
            out.bulk(b"notes");
            out.bulk(notes.as_bytes());
        }
        out.bulk(b"flags");
        let names: Vec<&str> = key_flags::names(spec.flags).collect();
        simple_set(out, names.into_iter());
        out.bulk(b"begin_search");
        write_begin_search(out, &spec.begin_search);
        out.bulk(b"find_keys");
        write_find_keys(out, &spec.find_keys);
    }
}

/// A `{type, spec}` map whose spec holds `fields`.
fn write_search(out: &mut ReplyWriter, kind: &str, fields: &[(&str, Field)]) {
    out.map_len(2);
    out.bulk(b"type");
    out.bulk(kind.as_bytes());
    out.bulk(b"spec");
    out.map_len(fields.len());
    for (name, value) in fields {
        out.bulk(name.as_bytes());
        match value {
            Field::Int(value) => out.int(*value),
            Field::Text(text) => out.bulk(text.as_bytes()),
        }
    }
}

enum Field<'a> {
    Int(i64),
    Text(&'a str),
}

fn write_begin_search(out: &mut ReplyWriter, search: &BeginSearch) {
    match search {
        BeginSearch::Index(index) => write_search(out, "index", &[("index", Field::Int(*index))]),
        BeginSearch::Keyword { keyword, startfrom } => write_search(
            out,
            "keyword",
            &[
                ("keyword", Field::Text(keyword)),
                ("startfrom", Field::Int(*startfrom)),
            ],
        ),
        BeginSearch::Unknown => write_search(out, "unknown", &[]),
    }
}

fn write_find_keys(out: &mut ReplyWriter, find: &FindKeys) {
    match *find {
        FindKeys::Range {
            lastkey,
            keystep,
            limit,
        } => write_search(
            out,
            "range",
            &[
                ("lastkey", Field::Int(lastkey)),
                ("keystep", Field::Int(keystep)),
                ("limit", Field::Int(limit)),
            ],
        ),
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            keystep,
        } => write_search(
            out,
            "keynum",
            &[
                ("keynumidx", Field::Int(keynumidx)),
                ("firstkey", Field::Int(firstkey)),
                ("keystep", Field::Int(keystep)),
            ],
        ),
        FindKeys::Unknown => write_search(out, "unknown", &[]),
    }
}

fn command_docs(ctx: &mut Ctx, names: &[&[u8]]) {
    let found: Vec<Entry> = if names.is_empty() {
        entries().collect()
    } else {
        names
            .iter()
            .filter_map(|name| redis::lookup(name))
            .collect()
    };
    let out = &mut *ctx.out;
    out.map_len(found.len());
    for entry in found {
        out.bulk(entry.full_name().as_bytes());
        write_docs(out, entry);
    }
}

/// `addReplyCommandDocs`: Redis's docs for its commands, the row's for fallow's own.
fn write_docs(out: &mut ReplyWriter, entry: Entry) {
    let subs = entry.subcommands();
    match entry {
        Entry::Redis(redis) => write_redis_docs(out, &redis.docs, subs.is_some()),
        Entry::Own(info) => {
            out.map_len(3);
            out.bulk(b"summary");
            out.bulk(info.summary.as_bytes());
            // fallow does not record the version that introduced each of its own commands; it answers
            // with the fallow version that has it.
            out.bulk(b"since");
            out.bulk(env!("CARGO_PKG_VERSION").as_bytes());
            out.bulk(b"group");
            out.bulk(info.group.docs_group.as_bytes());
        }
    }
    if let Some(subs) = subs {
        out.bulk(b"subcommands");
        out.map_len(subs.len());
        for sub in subs {
            out.bulk(sub.full_name().as_bytes());
            write_docs(out, sub);
        }
    }
}

/// The docs map's fields up to its subcommands (which `write_docs` adds when `has_subcommands`).
fn write_redis_docs(out: &mut ReplyWriter, docs: &Docs, has_subcommands: bool) {
    let texts = [
        ("summary", docs.summary.as_deref()),
        ("since", docs.since.as_deref()),
        ("group", Some(docs.group.as_str())), // always present, as in Redis
        ("complexity", docs.complexity.as_deref()),
    ];
    let fields = texts.iter().filter(|(_, text)| text.is_some()).count()
        + docs.doc_flags.is_some() as usize
        + docs.deprecated_since.is_some() as usize
        + docs.replaced_by.is_some() as usize
        + docs.history.is_some() as usize
        + docs.arguments.is_some() as usize
        + has_subcommands as usize;
    out.map_len(fields);
    for (name, text) in texts {
        optional_text(out, name, text);
    }
    if let Some(doc_flags) = &docs.doc_flags {
        out.bulk(b"doc_flags");
        simple_set(out, doc_flags.iter().map(String::as_str));
    }
    optional_text(out, "deprecated_since", docs.deprecated_since.as_deref());
    optional_text(out, "replaced_by", docs.replaced_by.as_deref());
    if let Some(history) = &docs.history {
        out.bulk(b"history");
        out.set_len(history.len());
        for (since, changes) in history {
            out.array_len(2);
            out.bulk(since.as_bytes());
            out.bulk(changes.as_bytes());
        }
    }
    if let Some(arguments) = &docs.arguments {
        out.bulk(b"arguments");
        write_arguments(out, arguments);
    }
}

fn optional_text(out: &mut ReplyWriter, name: &str, text: Option<&str>) {
    if let Some(text) = text {
        out.bulk(name.as_bytes());
        out.bulk(text.as_bytes());
    }
}

/// `addReplyCommandArgList`.
fn write_arguments(out: &mut ReplyWriter, arguments: &[Arg]) {
    out.array_len(arguments.len());
    for arg in arguments {
        let fields = 2
            + arg.key_spec_index.is_some() as usize
            + arg.token.is_some() as usize
            + arg.summary.is_some() as usize
            + arg.since.is_some() as usize
            + arg.deprecated_since.is_some() as usize
            + arg.flags.is_some() as usize
            + arg.arguments.is_some() as usize;
        out.map_len(fields);
        out.bulk(b"name");
        out.bulk(arg.name.as_bytes());
        out.bulk(b"type");
        out.bulk(arg.kind.as_bytes());
        if let Some(index) = arg.key_spec_index {
            out.bulk(b"key_spec_index");
            out.int(index);
        }
        optional_text(out, "token", arg.token.as_deref());
        optional_text(out, "summary", arg.summary.as_deref());
        optional_text(out, "since", arg.since.as_deref());
        optional_text(out, "deprecated_since", arg.deprecated_since.as_deref());
        if let Some(flags) = &arg.flags {
            out.bulk(b"flags");
            simple_set(out, flags.iter().map(String::as_str));
        }
        if let Some(nested) = &arg.arguments {
            out.bulk(b"arguments");
            write_arguments(out, nested);
        }
    }
}

/// What COMMAND LIST keeps.
enum ListFilter {
    All,
    /// No module commands exist in fallow.
    Module,
    /// A known ACL category, or None for an unknown one (which matches nothing, as in Redis); `own` for
    /// one of fallow's own categories, which its rows carry.
    AclCategory {
        category: Option<&'static str>,
        own: bool,
    },
    Pattern(Vec<u8>),
}

impl ListFilter {
    /// `COMMAND LIST [FILTERBY (MODULE name|ACLCAT category|PATTERN pattern)]`, parsed as Redis does.
    fn parse(args: &[&[u8]]) -> Option<ListFilter> {
        let mut filter = ListFilter::All;
        let mut rest = args;
        while let Some(option) = rest.first() {
            let [_, kind, value] = rest.get(..3)? else {
                return None;
            };
            if !is(option, "filterby") || rest.len() != 3 {
                return None;
            }
            filter = if is(kind, "module") {
                ListFilter::Module
            } else if is(kind, "aclcat") {
                let known = info::categories()
                    .iter()
                    .find(|category| category.as_bytes().eq_ignore_ascii_case(value));
                let own = known.is_some_and(|category| !is_redis_category(category));
                ListFilter::AclCategory {
                    category: known.copied(),
                    own,
                }
            } else if is(kind, "pattern") {
                ListFilter::Pattern(value.to_ascii_lowercase())
            } else {
                return None;
            };
            rest = &rest[3..];
        }
        Some(filter)
    }

    fn keeps(&self, entry: Entry) -> bool {
        match self {
            ListFilter::All => true,
            ListFilter::Module | ListFilter::AclCategory { category: None, .. } => false,
            ListFilter::AclCategory {
                category: Some(category),
                own,
            } => {
                entry.acl_categories().contains(category)
                    || (*own && in_own_category(entry, category))
            }
            ListFilter::Pattern(pattern) => {
                fallow_store::glob::matches(pattern, entry.full_name().as_bytes())
            }
        }
    }
}

/// Whether a command's row is in `category`, one of fallow's own ACL categories (`server`, `topn`, ...),
/// as ACL CAT lists it.
fn in_own_category(entry: Entry, category: &str) -> bool {
    let top = entry.full_name().split('|').next().unwrap_or_default();
    info::lookup(top.as_bytes()).is_some_and(|(_, row)| row.categories().contains(&category))
}

/// Whether some Redis command is in `category` in Redis's data (else the category is fallow's own).
fn is_redis_category(category: &str) -> bool {
    redis::redis_commands()
        .iter()
        .any(|redis| Entry::Redis(redis).acl_categories().contains(&category))
}

fn command_list(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(filter) = ListFilter::parse(args) else {
        return ctx.out.error(SYNTAX);
    };
    let mut names: Vec<&str> = Vec::new();
    for entry in entries() {
        let subs = entry.subcommands().unwrap_or_default();
        for entry in std::iter::once(entry).chain(subs) {
            if filter.keeps(entry) {
                names.push(entry.full_name());
            }
        }
    }
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS `command` (`getKeysSubcommandImpl`).
fn command_getkeys(ctx: &mut Ctx, command: &[&[u8]], with_flags: bool) {
    let Some(entry) = redis::lookup_call(command) else {
        return ctx.out.error("ERR Invalid command specified");
    };
    let keys = match entry.key_model().get_keys(command) {
        Ok(keys) => keys,
        Err(error) => return ctx.out.error(error.message()),
    };
    let out = &mut *ctx.out;
    out.array_len(keys.len());
    for (at, flags) in keys {
        if with_flags {
            out.array_len(2);
            out.bulk(command[at]);
            let names: Vec<&str> = key_flags::names(flags).collect();
            simple_set(out, names.into_iter());
        } else {
            out.bulk(command[at]);
        }
    }
}
