//! (being written)
use super::CommandSpec;

pub const COMMANDS: &[CommandSpec] = &[];

/// Queues a command inside MULTI.
pub fn queue(
    conn: &mut crate::connection::ConnState,
    out: &mut fallow_proto::ReplyWriter,
    _spec: &CommandSpec,
    args: &[&[u8]],
) {
    if let Some(queued) = conn.multi.as_mut() {
        queued.push(args.iter().map(|arg| arg.to_vec()).collect());
    }
    out.simple("QUEUED");
}
