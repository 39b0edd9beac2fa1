//! COMMAND and its subcommands (COUNT, INFO, DOCS, LIST, GETKEYS): the command table as Redis reports it.
use crate::command::flags::NAMES;
use crate::command::info::{self, CommandInfo, Keys};
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{is, subcommand_error, Ctx, SYNTAX};

pub(super) fn command(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 1 {
        return command_infos(ctx, &[]);
    }
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"count", 2) => ctx.out.int(info::table().len() as i64),
        (b"info", _) => command_infos(ctx, &args[2..]),
        (b"docs", _) => command_docs(ctx, &args[2..]),
        (b"list", 2 | 5) => command_list(ctx, args),
        (b"getkeys", 3..) => command_getkeys(ctx, &args[2..]),
        (b"help", 2) => help_reply(
            ctx,
            "COMMAND",
            &[
                "(no subcommand)",
                "    Return details about all commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
                "    Return a list of all commands in this server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple commands.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple commands.",
                "GETKEYS <full-command>",
                "    Return the keys from a full command.",
            ],
        ),
        (b"count" | b"list" | b"getkeys" | b"help", _) => {
            subcommand_arity_error(ctx, "command", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

/// (first, last, step) of a command's keys as COMMAND INFO reports them.
fn key_range(spec: &CommandInfo) -> (i64, i64, i64) {
    match spec.keys {
        Keys::Range { first, last, step } => (first as i64, last as i64, step as i64),
        Keys::None | Keys::All | Keys::Custom(_) | Keys::CustomOrAll { .. } => (0, 0, 0),
    }
}

fn write_command_info(ctx: &mut Ctx, spec: &CommandInfo) {
    let out = &mut *ctx.out;
    out.array_len(10);
    out.bulk(spec.name.as_bytes());
    out.int(spec.arity as i64);
    let mut flag_names: Vec<&str> = NAMES
        .iter()
        .filter(|(flag, _)| spec.flags & flag != 0)
        .map(|(_, name)| *name)
        .collect();
    if matches!(spec.keys, Keys::Custom(_) | Keys::CustomOrAll { .. }) {
        flag_names.push("movablekeys");
    }
    out.set_len(flag_names.len());
    for name in flag_names {
        out.simple(name);
    }
    let (first, last, step) = key_range(spec);
    out.int(first);
    out.int(last);
    out.int(step);
    let categories = spec.categories();
    out.set_len(categories.len());
    for category in categories {
        out.simple(&format!("@{category}"));
    }
    out.set_len(0); // tips
    out.array_len(0); // key specs
    out.array_len(0); // subcommands
}

fn command_infos(ctx: &mut Ctx, names: &[&[u8]]) {
    if names.is_empty() {
        ctx.out.array_len(info::table().len());
        for spec in info::table() {
            write_command_info(ctx, spec);
        }
        return;
    }
    ctx.out.array_len(names.len());
    for name in names {
        match info::lookup(name) {
            Some((_, spec)) => write_command_info(ctx, spec),
            None => ctx.out.nil_array(),
        }
    }
}

fn command_docs(ctx: &mut Ctx, names: &[&[u8]]) {
    let specs: Vec<&CommandInfo> = if names.is_empty() {
        info::table().to_vec()
    } else {
        names
            .iter()
            .filter_map(|name| info::lookup(name).map(|(_, spec)| spec))
            .collect()
    };
    ctx.out.map_len(specs.len());
    for spec in specs {
        ctx.out.bulk(spec.name.as_bytes());
        ctx.out.map_len(3);
        ctx.out.bulk(b"summary");
        ctx.out.bulk(spec.summary.as_bytes());
        // fallow does not track the Redis version that introduced each command; it answers with the
        // fallow version that has it.
        ctx.out.bulk(b"since");
        ctx.out.bulk(env!("CARGO_PKG_VERSION").as_bytes());
        ctx.out.bulk(b"group");
        ctx.out.bulk(spec.group.docs_group.as_bytes());
    }
}

fn command_list(ctx: &mut Ctx, args: &[&[u8]]) {
    let filter: Box<dyn Fn(&CommandInfo) -> bool> = if args.len() == 2 {
        Box::new(|_| true)
    } else if !is(args[2], "filterby") {
        return ctx.out.error(SYNTAX);
    } else if is(args[3], "module") {
        Box::new(|_| false)
    } else if is(args[3], "aclcat") {
        let category = String::from_utf8_lossy(args[4]).to_ascii_lowercase();
        Box::new(move |spec| spec.categories().contains(&category.as_str()))
    } else if is(args[3], "pattern") {
        let pattern = args[4].to_ascii_lowercase();
        Box::new(move |spec| fallow_store::glob::matches(&pattern, spec.name.as_bytes()))
    } else {
        return ctx.out.error(SYNTAX);
    };
    let names: Vec<&str> = info::table()
        .iter()
        .filter(|spec| filter(spec))
        .map(|spec| spec.name)
        .collect();
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

fn command_getkeys(ctx: &mut Ctx, command: &[&[u8]]) {
    let Some((_, spec)) = info::lookup(command[0]) else {
        return ctx.out.error("ERR Invalid command specified");
    };
    let arity_ok = if spec.arity > 0 {
        command.len() == spec.arity as usize
    } else {
        command.len() >= spec.arity.unsigned_abs() as usize
    };
    if !arity_ok {
        return ctx
            .out
            .error("ERR Invalid number of arguments specified for command");
    }
    let positions = info::key_positions(spec, command);
    if positions.is_empty() {
        return ctx.out.error("ERR The command has no key arguments");
    }
    ctx.out
        .bulks(positions.iter().map(|&position| command[position]));
}
