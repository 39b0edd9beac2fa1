//! The keys and channels a call names, each with what it needs from the ACL: a key read and/or written (by
//! Redis's key specs where Redis has the command), a channel published to or subscribed to (a pattern
//! subscription needs the pattern itself granted).
use crate::command::info::redis_keys::{self, READ, WRITE};
use crate::command::info::{flags, key_positions, CommandInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// READ and/or WRITE.
    Key(u8),
    Channel {
        pattern: bool,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Object<'a> {
    /// The argument's position (Redis reports the last one no selector allowed).
    pub position: usize,
    pub bytes: &'a [u8],
    pub kind: ObjectKind,
}

/// Keys then channels of a call, in the order Redis checks them. `unit_name` is the command or the
/// subcommand it runs as (`object|encoding`), whose key specs apply.
pub fn objects<'a>(spec: &CommandInfo, unit_name: &str, args: &[&'a [u8]]) -> Vec<Object<'a>> {
    let mut objects: Vec<Object<'a>> = key_needs(spec, unit_name, args)
        .into_iter()
        .filter(|&(position, _)| position < args.len())
        .map(|(position, need)| Object {
            position,
            bytes: args[position],
            kind: ObjectKind::Key(need),
        })
        .collect();
    objects.extend(channels(spec.name, args).map(|(position, pattern)| Object {
        position,
        bytes: args[position],
        kind: ObjectKind::Channel { pattern },
    }));
    objects
}

/// (position, READ/WRITE) of each key.
fn key_needs(spec: &CommandInfo, unit_name: &str, args: &[&[u8]]) -> Vec<(usize, u8)> {
    match redis_keys::redis_command(unit_name) {
        Some(redis) => redis_keys::key_needs(redis, args),
        None => own_key_needs(spec, args),
    }
}

/// fallow's own commands: a read-only command reads its keys, any other reads and writes them.
fn own_key_needs(spec: &CommandInfo, args: &[&[u8]]) -> Vec<(usize, u8)> {
    let need = if spec.flags & flags::READONLY != 0 {
        READ
    } else {
        READ | WRITE
    };
    key_positions(spec, args)
        .into_iter()
        .map(|position| (position, need))
        .collect()
}

/// (position, is a pattern) of each channel a publish or subscribe names.
fn channels(name: &str, args: &[&[u8]]) -> impl Iterator<Item = (usize, bool)> {
    let (range, pattern) = match name {
        "publish" | "spublish" => (1..2.min(args.len()), false),
        "subscribe" | "ssubscribe" => (1..args.len(), false),
        "psubscribe" => (1..args.len(), true),
        _ => (0..0, false),
    };
    range.map(move |position| (position, pattern))
}

/// Keys of a request that is not a RESP call (memcached): read for a read-only command, else read and write.
pub fn request_objects<'a>(
    spec: Option<&CommandInfo>,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Object<'a>> {
    let need = match spec {
        Some(spec) if spec.flags & flags::READONLY != 0 => READ,
        _ => READ | WRITE,
    };
    keys.into_iter()
        .enumerate()
        .map(|(position, bytes)| Object {
            position: position + 1,
            bytes,
            kind: ObjectKind::Key(need),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::info::lookup;

    fn needs(text: &'static str) -> Vec<(usize, ObjectKind)> {
        let args: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
        let (_, spec) = lookup(args[0]).unwrap();
        let units = crate::acl::units::units();
        let unit = units.of_call(spec.name, &args).unwrap();
        objects(spec, &units.list[unit].name, &args)
            .into_iter()
            .map(|object| (object.position, object.kind))
            .collect()
    }

    #[test]
    fn keys_and_channels_need_what_redis_says() {
        use ObjectKind::*;
        assert_eq!(needs("set k v"), vec![(1, Key(WRITE))]);
        assert_eq!(needs("set k v get"), vec![(1, Key(READ | WRITE))]);
        assert_eq!(needs("get k"), vec![(1, Key(READ))]);
        // OBJECT's key spec neither reads nor writes the value: any pattern matching the key will do.
        assert_eq!(needs("object encoding k"), vec![(2, Key(0))]);
        assert_eq!(
            needs("sort l store d"),
            vec![(1, Key(READ)), (3, Key(WRITE))]
        );
        assert_eq!(needs("publish c m"), vec![(1, Channel { pattern: false })]);
        assert_eq!(
            needs("psubscribe a* b"),
            vec![
                (1, Channel { pattern: true }),
                (2, Channel { pattern: true })
            ]
        );
    }
}
