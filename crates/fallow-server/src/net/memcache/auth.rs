//! memcached authentication and permissions: binary SASL PLAIN (opcodes 0x20..0x22), memcached's text
//! authentication (`-Y` authfile style: `username password` as the data of the first `set`), both mapped
//! onto fallow's ACL users; then every request is checked as the Redis command it corresponds to
//! ([`redis_command`]) against the user's command rules and key patterns.
use super::stats::bump;
use super::Exec;
use crate::acl::log::{Context, Reason};
use crate::clients::ClientHandle;
use crate::server::Server;
use fallow_proto::memcache::{
    encode_binary_response, BinaryOpcode, BinaryRequest, BinaryStatus, McRequest, StoreMode,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The one SASL mechanism fallow offers (what SASL list mechs answers).
pub const SASL_MECHANISMS: &[u8] = b"PLAIN";
const SASL_AUTHENTICATED: &[u8] = b"Authenticated";
const TEXT_UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
const TEXT_AUTH_FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
const TEXT_PERMISSION_DENIED: &[u8] = b"CLIENT_ERROR permission denied\r\n";
const BINARY_PERMISSION_DENIED: &[u8] = b"Permission denied.";
/// What ACL LOG names as the command of a failed memcached authentication.
const SASL_OBJECT: &str = "memcached-sasl-auth";
const TEXT_AUTH_OBJECT: &str = "memcached-set-auth";

/// Who a memcached connection runs as.
pub(crate) struct McSession {
    /// The ACL user; None until the connection authenticates.
    pub user: Option<String>,
    /// Set when `user` changed, so the connection updates what CLIENT LIST shows.
    pub user_changed: bool,
    /// Failed authentications of this connection (they slow its answers, as for RESP AUTH).
    auth_failures: u32,
    /// The replies wait until then after repeated failures.
    pub reply_not_before: Option<tokio::time::Instant>,
    handle: Arc<ClientHandle>,
}

impl McSession {
    /// A new connection runs as `default` when that user needs no password (as a RESP connection does).
    pub fn new(server: &Server, handle: Arc<ClientHandle>) -> McSession {
        let open = !server.acl.read().default_user_requires_auth();
        McSession {
            user: open.then(|| "default".to_string()),
            user_changed: false,
            auth_failures: 0,
            reply_not_before: None,
            handle,
        }
    }
}

/// Answers authentication requests and refuses what the connection may not do. Returns the request when
/// it is to be executed.
pub(super) fn admit(exec: &mut Exec, request: McRequest) -> Option<McRequest> {
    if let McRequest::Binary(binary) = &request {
        if is_sasl(binary) {
            sasl(exec, binary);
            return None;
        }
    }
    let Some(user) = exec.login.user.clone() else {
        if is_quit(&request) {
            return Some(request);
        }
        unauthenticated(exec, request);
        return None;
    };
    let Err((reason, object)) = permitted(exec.server, &user, &request) else {
        return Some(request);
    };
    bump(&exec.server.memcache.permission_denied_cmds);
    let handle = &exec.login.handle;
    exec.server
        .note_acl_denial(handle, reason, Context::Toplevel, &object, &user);
    deny(
        exec.out,
        &request,
        BINARY_PERMISSION_DENIED,
        TEXT_PERMISSION_DENIED,
    );
    None
}

/// Whether `admit` would let the connection run `request` (without answering or counting anything):
/// reading its values ahead is only for requests that will run.
pub(super) fn may_run(exec: &Exec, request: &McRequest) -> bool {
    if matches!(request, McRequest::Binary(binary) if is_sasl(binary)) {
        return false;
    }
    let Some(user) = exec.login.user.as_deref() else {
        return false;
    };
    permitted(exec.server, user, request).is_ok()
}

fn is_quit(request: &McRequest) -> bool {
    match request {
        McRequest::Quit => true,
        McRequest::Binary(binary) => binary.op().base() == BinaryOpcode::Quit,
        _ => false,
    }
}

fn is_sasl(request: &BinaryRequest) -> bool {
    matches!(
        request.op(),
        BinaryOpcode::SaslListMechs | BinaryOpcode::SaslAuth | BinaryOpcode::SaslStep
    )
}

/// Before authenticating, only a text `set` (whose data is the credentials) and quit are answered.
fn unauthenticated(exec: &mut Exec, request: McRequest) {
    match request {
        McRequest::Store {
            mode: StoreMode::Set,
            value,
            noreply,
            ..
        } => {
            let authenticated = match split_text_credentials(&value) {
                Some((user, password)) => authenticate(exec, TEXT_AUTH_OBJECT, user, password),
                None => authenticate_failed(exec, TEXT_AUTH_OBJECT, b""),
            };
            if !authenticated {
                exec.out.extend_from_slice(TEXT_AUTH_FAILURE);
            } else if !noreply {
                exec.out.extend_from_slice(b"STORED\r\n");
            }
        }
        request => {
            bump(&exec.server.memcache.unauthenticated_cmds);
            let auth_failure = BinaryStatus::AuthError.message().as_bytes();
            deny(exec.out, &request, auth_failure, TEXT_UNAUTHENTICATED);
        }
    }
}

/// Writes a refusal: binary requests get status 0x20 (Auth error) with `binary_message`, text and meta
/// requests the text line.
fn deny(out: &mut Vec<u8>, request: &McRequest, binary_message: &[u8], text_line: &[u8]) {
    match request {
        McRequest::Binary(binary) => {
            let status = BinaryStatus::AuthError as u16;
            encode_binary_response(
                out,
                binary.opcode,
                status,
                binary.opaque,
                0,
                &[],
                &[],
                binary_message,
            );
        }
        _ => out.extend_from_slice(text_line),
    }
}

/// SASL list mechs, auth and step (PLAIN needs one message, so a step always fails).
fn sasl(exec: &mut Exec, request: &BinaryRequest) {
    let respond = |out: &mut Vec<u8>, status: BinaryStatus, body: &[u8]| {
        encode_binary_response(
            out,
            request.opcode,
            status as u16,
            request.opaque,
            0,
            &[],
            &[],
            body,
        );
    };
    let failure = BinaryStatus::AuthError.message().as_bytes();
    match request.op() {
        BinaryOpcode::SaslListMechs => respond(exec.out, BinaryStatus::NoError, SASL_MECHANISMS),
        BinaryOpcode::SaslAuth => {
            let plain = request.key.eq_ignore_ascii_case(SASL_MECHANISMS);
            let authenticated = match parse_sasl_plain(&request.value).filter(|_| plain) {
                Some((user, password)) => authenticate(exec, SASL_OBJECT, user, password),
                None => authenticate_failed(exec, SASL_OBJECT, b""),
            };
            if authenticated {
                respond(exec.out, BinaryStatus::NoError, SASL_AUTHENTICATED);
            } else {
                respond(exec.out, BinaryStatus::AuthError, failure);
            }
        }
        _ => {
            authenticate_failed(exec, SASL_OBJECT, b"");
            respond(exec.out, BinaryStatus::AuthError, failure);
        }
    }
}

/// Checks the credentials against the ACL users; on success the connection runs as that user.
fn authenticate(exec: &mut Exec, object: &str, user: &[u8], password: &[u8]) -> bool {
    let name = String::from_utf8_lossy(user).into_owned();
    let accepted = exec.server.acl.read().authenticate(&name, password);
    if accepted.is_err() {
        return authenticate_failed(exec, object, user);
    }
    bump(&exec.server.memcache.auth_cmds);
    exec.login.user = Some(name);
    exec.login.user_changed = true;
    true
}

/// A failed authentication: memcached's auth_cmds and auth_errors, and what RESP AUTH failures get (INFO
/// acl_access_denied_auth, ACL LOG, the rate-limited warning, later answers after repeated failures).
/// Always false.
fn authenticate_failed(exec: &mut Exec, object: &str, user: &[u8]) -> bool {
    let mc = &exec.server.memcache;
    bump(&mc.auth_cmds);
    bump(&mc.auth_errors);
    let login = &mut *exec.login;
    let delay = exec.server.note_auth_failure(
        &login.handle,
        object,
        &String::from_utf8_lossy(user),
        Context::Toplevel,
        &mut login.auth_failures,
    );
    login.reply_not_before = delay.map(|delay| tokio::time::Instant::now() + delay);
    false
}

/// SASL PLAIN's message (RFC 4616): `[authzid] NUL authcid NUL passwd`. An authorization identity other
/// than the user's own is refused: fallow has no proxy authorization.
pub(crate) fn parse_sasl_plain(message: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = message.splitn(3, |&byte| byte == 0);
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    let own_identity = authzid.is_empty() || authzid == user;
    (own_identity && !user.is_empty()).then_some((user, password))
}

/// memcached's text authentication: the data of the first `set` is `username password`.
pub(crate) fn split_text_credentials(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = data.iter().position(|&byte| byte == b' ')?;
    let (user, password) = (&data[..space], &data[space + 1..]);
    (!user.is_empty()).then_some((user, password))
}

/// May `user` run this request: its corresponding Redis command, on each of its keys? Err says what was
/// denied (the command's name or the key), for ACL LOG.
fn permitted(server: &Server, user: &str, request: &McRequest) -> Result<(), (Reason, Vec<u8>)> {
    if user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed) {
        return Ok(()); // the common case, without the ACL lock
    }
    let spec = match redis_command(request) {
        Some(name) => match crate::command::info::lookup(name.as_bytes()) {
            Some((_, spec)) => Some(spec),
            None => return Err((Reason::Command, name.as_bytes().to_vec())),
        },
        None => None,
    };
    server
        .acl
        .read()
        .check_request(user, spec, request_keys(request))
        .map_err(|denied| (denied.reason, denied.object))
}

/// The Redis command whose permission a memcached request needs; None for requests that touch no data
/// and change nothing (version, noop, quit). The table is in docs/memcached.md.
pub(crate) fn redis_command(request: &McRequest) -> Option<&'static str> {
    Some(match request {
        McRequest::Get {
            touch_exptime: None,
            ..
        } => "get",
        McRequest::Get { .. } => "getex",
        McRequest::Store { mode, .. } => store_command(*mode),
        McRequest::Delete { .. } | McRequest::MetaDelete { .. } => "del",
        McRequest::Arith { incr: true, .. } => "incrby",
        McRequest::Arith { incr: false, .. } => "decrby",
        McRequest::Touch { .. } => "expire",
        McRequest::FlushAll { .. } => "flushall",
        McRequest::Stats { group, .. } if group.as_deref() == Some("reset") => "config",
        McRequest::Stats { .. } => "info",
        McRequest::Verbosity { .. } => "config",
        McRequest::MetaGet { flags, .. } if flags.ttl.is_some() => "getex",
        McRequest::MetaGet { .. } => "get",
        McRequest::MetaSet { flags, .. } => store_command(flags.set_mode.unwrap_or(StoreMode::Set)),
        McRequest::MetaArith { flags, .. } => match flags.arith_mode {
            Some(fallow_proto::memcache::MetaArithMode::Decr) => "decrby",
            _ => "incrby",
        },
        McRequest::MetaDebug { .. } => "object",
        McRequest::Binary(binary) => return binary_command(binary),
        McRequest::Version | McRequest::Quit | McRequest::MetaNoop => return None,
    })
}

fn store_command(mode: StoreMode) -> &'static str {
    match mode {
        StoreMode::Append | StoreMode::Prepend => "append",
        _ => "set",
    }
}

fn binary_command(request: &BinaryRequest) -> Option<&'static str> {
    use BinaryOpcode::*;
    Some(match request.op().base() {
        Get | GetK => "get",
        Gat | GatK => "getex",
        Touch => "expire",
        Set | Add | Replace => "set",
        Append | Prepend => "append",
        Delete => "del",
        Increment => "incrby",
        Decrement => "decrby",
        Flush => "flushall",
        Stat if &request.key[..] == b"reset" => "config",
        Stat => "info",
        Verbosity => "config",
        _ => return None,
    })
}

/// Every key a request reads or writes.
fn request_keys(request: &McRequest) -> Vec<&[u8]> {
    match request {
        McRequest::Get { keys, .. } => keys.iter().map(|key| &key[..]).collect(),
        McRequest::Store { key, .. }
        | McRequest::Delete { key, .. }
        | McRequest::Arith { key, .. }
        | McRequest::Touch { key, .. }
        | McRequest::MetaGet { key, .. }
        | McRequest::MetaSet { key, .. }
        | McRequest::MetaDelete { key, .. }
        | McRequest::MetaArith { key, .. }
        | McRequest::MetaDebug { key, .. } => vec![&key[..]],
        McRequest::Binary(binary) if binary.op().base() != BinaryOpcode::Stat => {
            (!binary.key.is_empty())
                .then_some(&binary.key[..])
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Changing `memcache-tenant` hands a tenant's keyspace to memcached clients, so it needs the whole
/// `@admin` category: a user granted only `+config` (or `+config|set`) may not. Err is the NOPERM reply.
pub fn check_memcache_tenant_change(server: &Server, user: &str) -> Result<(), String> {
    let acl = server.acl.read();
    let admin = acl
        .users
        .get(user)
        .is_some_and(|found| found.allows_category("admin"));
    if admin {
        Ok(())
    } else {
        Err("NOPERM changing memcache-tenant needs the @admin category".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use fallow_proto::memcache::{parse, McLimits, Parsed};

    fn request(text: &[u8]) -> McRequest {
        match parse(text, &McLimits::default()) {
            Parsed::Request { request, .. } => request,
            other => panic!("{other:?}"),
        }
    }

    fn binary(opcode: u8, extras: &[u8], key: &[u8]) -> McRequest {
        McRequest::Binary(BinaryRequest {
            opcode,
            datatype: 0,
            vbucket: 0,
            opaque: 0,
            cas: 0,
            extras: Bytes::copy_from_slice(extras),
            key: Bytes::copy_from_slice(key),
            value: Bytes::new(),
        })
    }

    #[test]
    fn sasl_plain_messages() {
        fn parsed(message: &[u8]) -> Option<(&[u8], &[u8])> {
            parse_sasl_plain(message)
        }
        assert_eq!(
            parsed(b"\0alice\0s3cret"),
            Some((&b"alice"[..], &b"s3cret"[..]))
        );
        assert_eq!(
            parsed(b"alice\0alice\0pa\0ss"),
            Some((&b"alice"[..], &b"pa\0ss"[..]))
        );
        assert_eq!(parsed(b"\0alice\0"), Some((&b"alice"[..], &b""[..])));
        assert_eq!(parsed(b"bob\0alice\0pw"), None, "proxy authorization");
        assert_eq!(parsed(b"\0\0pw"), None, "no user");
        assert_eq!(parsed(b"alice\0pw"), None, "one separator");
        assert_eq!(parsed(b""), None);
    }

    #[test]
    fn text_credentials() {
        assert_eq!(
            split_text_credentials(b"default s3cret"),
            Some((&b"default"[..], &b"s3cret"[..]))
        );
        assert_eq!(
            split_text_credentials(b"u pass word"),
            Some((&b"u"[..], &b"pass word"[..]))
        );
        assert_eq!(split_text_credentials(b"nospace"), None);
        assert_eq!(split_text_credentials(b" pw"), None);
    }

    #[test]
    fn requests_map_to_redis_commands() {
        let cases: [(&[u8], Option<&str>); 16] = [
            (b"get a b\r\n", Some("get")),
            (b"gets a\r\n", Some("get")),
            (b"gat 10 a\r\n", Some("getex")),
            (b"set k 0 0 1\r\nx\r\n", Some("set")),
            (b"cas k 0 0 1 5\r\nx\r\n", Some("set")),
            (b"prepend k 0 0 1\r\nx\r\n", Some("append")),
            (b"delete k\r\n", Some("del")),
            (b"incr k 1\r\n", Some("incrby")),
            (b"decr k 1\r\n", Some("decrby")),
            (b"touch k 10\r\n", Some("expire")),
            (b"flush_all\r\n", Some("flushall")),
            (b"stats\r\n", Some("info")),
            (b"stats reset\r\n", Some("config")),
            (b"mg k v T30\r\n", Some("getex")),
            (b"ma k MD\r\n", Some("decrby")),
            (b"version\r\n", None),
        ];
        for (text, command) in cases {
            let request = request(text);
            assert_eq!(redis_command(&request), command, "{request:?}");
            let spec = command.map(|name| crate::command::info::lookup(name.as_bytes()));
            assert!(spec.is_none_or(|found| found.is_some()), "{command:?}");
        }
        assert_eq!(redis_command(&binary(0x0d, &[], b"k")), Some("get"));
        assert_eq!(redis_command(&binary(0x18, &[], b"")), Some("flushall"));
        assert_eq!(redis_command(&binary(0x0a, &[], b"")), None);
    }

    #[test]
    fn every_key_is_checked() {
        let get = request(b"get a b c\r\n");
        assert_eq!(request_keys(&get), [&b"a"[..], b"b", b"c"]);
        assert_eq!(request_keys(&request(b"md k\r\n")), [&b"k"[..]]);
        assert_eq!(request_keys(&binary(0x00, &[], b"k")), [&b"k"[..]]);
        assert!(request_keys(&binary(0x10, &[], b"items")).is_empty());
        assert!(request_keys(&request(b"flush_all\r\n")).is_empty());
    }
}
