//! Connection commands: PING ECHO SELECT QUIT RESET HELLO AUTH CLIENT.
use super::flags::*;
use super::{spec, CommandSpec, Ctx, Group, Keys};

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "ping",
        -1,
        FAST | STALE | SUBSCRIBE_CONTEXT,
        Keys::None,
        Group::Connection,
        "Ping the server",
        ping,
    ),
    spec(
        "echo",
        2,
        FAST,
        Keys::None,
        Group::Connection,
        "Echo the argument",
        echo,
    ),
];

fn ping(ctx: &mut Ctx, args: &[&[u8]]) {
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(args[1]),
        _ => ctx.out.error(&super::arity_error("ping")),
    }
}

fn echo(ctx: &mut Ctx, args: &[&[u8]]) {
    ctx.out.bulk(args[1]);
}
