//! Replies several command families write alike: the HELP listing of a container command, the arity error
//! of a known subcommand, and the Redis version fallow reports (HELLO, INFO server). A leaf beside the
//! families: any of them may use it without depending on another family.
use super::{arity_error, Ctx};

/// The Redis version fallow reports to clients (its command set and replies follow Redis 7.0).
pub const REDIS_COMPATIBLE_VERSION: &str = "7.0.15";

/// A HELP reply as Redis writes it: a header, the lines, and the HELP entry, as status replies.
pub fn help_reply(ctx: &mut Ctx, command: &str, lines: &[&str]) {
    ctx.out.array_len(lines.len() + 3);
    ctx.out.simple(&format!(
        "{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for line in lines {
        ctx.out.simple(line);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Prints this help.");
}

/// Error for a known subcommand given the wrong number of arguments.
pub fn subcommand_arity_error(ctx: &mut Ctx, command: &str, sub: &[u8]) {
    let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
    ctx.out.error(&arity_error(&format!("{command}|{sub}")));
}
