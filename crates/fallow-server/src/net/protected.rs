//! Protected mode, as Redis's: while it is on and the default user needs no password, only loopback and
//! Unix-socket clients are answered; any other TCP client gets an explanation and is closed. It is decided
//! per connection at accept, from two atomics the server keeps current on CONFIG SET and ACL changes.
use crate::clients::ClientKind;
use std::net::IpAddr;

/// Redis 7.0's text with fallow's names (and fallow's way to make a change permanent: it has no
/// CONFIG REWRITE); the `-DENIED` prefix is what clients recognise.
pub const RESP_DENIED: &[u8] = b"-DENIED fallow is running in protected mode because protected mode is enabled \
and no password is set for the default user. In this mode connections are only accepted from the loopback \
interface. If you want to connect from external computers to fallow you may adopt one of the following \
solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the \
loopback interface by connecting to fallow from the same host the server is running, however MAKE SURE \
fallow is not publicly accessible from internet if you do so. Add 'protected-mode = \"no\"' to the \
configuration file to make this change permanent. 2) Alternatively you can just disable the protected \
mode by editing the fallow configuration file, and setting the protected-mode option to 'no', and then \
restarting the server. 3) If you started the server manually just for testing, restart it with the \
'--protected-mode no' option. 4) Setup an authentication password for the default user (requirepass). \
NOTE: You only need to do one of the above things in order for the server to start accepting connections \
from the outside.\r\n";

/// The memcached listener's form: one SERVER_ERROR line.
pub const MEMCACHE_DENIED: &[u8] = b"SERVER_ERROR fallow is running in protected mode because protected mode \
is enabled and no password is set for the default user; connections are only accepted from the loopback \
interface. Set requirepass (and memcache-auth yes) or run with '--protected-mode no'.\r\n";

/// The body of the metrics endpoint's 403.
pub const HTTP_DENIED_BODY: &str = "fallow is running in protected mode because protected mode is enabled \
and no password is set for the default user; connections are only accepted from the loopback interface. \
Set requirepass or run with '--protected-mode no' to scrape from other hosts.\n";

/// What a refused client of `kind` is told.
pub fn denial(kind: ClientKind) -> &'static [u8] {
    match kind {
        ClientKind::Resp => RESP_DENIED,
        ClientKind::Memcache => MEMCACHE_DENIED,
    }
}

/// Whether protected mode holds: switched on, and a new connection would be let in without a password
/// (the default user is enabled and `nopass`, i.e. `requirepass` is empty and ACL SETUSER gave it none).
pub fn in_force(protected_mode: bool, default_user_needs_no_password: bool) -> bool {
    protected_mode && default_user_needs_no_password
}

/// Whether a client may connect: one on the Unix socket (`peer` None) or from a loopback address
/// (127.0.0.0/8, ::1, and those as IPv4-mapped IPv6) always; any other only while protected mode is not
/// in force.
pub fn admits(peer: Option<IpAddr>, in_force: bool) -> bool {
    !in_force || peer.is_none_or(is_loopback)
}

fn is_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;

    /// What `Server` mirrors from the users: does the default user need no password?
    fn open_default(acl: &Acl) -> bool {
        !acl.default_user_requires_auth()
    }

    fn acl_with(requirepass: &str, rules: &[(&str, &[&str])]) -> Acl {
        let mut acl = Acl::new(requirepass);
        for (user, user_rules) in rules {
            let entry = acl
                .users
                .entry(user.to_string())
                .or_insert_with(|| crate::acl::User::new(user));
            for rule in *user_rules {
                entry.apply_rule(rule).unwrap();
            }
        }
        acl
    }

    #[test]
    fn peer_by_config_by_users() {
        let loopback: Vec<Option<IpAddr>> = ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"]
            .iter()
            .map(|text| Some(text.parse().unwrap()))
            .chain([None])
            .collect();
        let remote: Vec<Option<IpAddr>> = [
            "192.0.2.2",
            "10.200.0.2",
            "0.0.0.0",
            "::ffff:10.0.0.1",
            "fe80::1",
            "2001:db8::1",
        ]
        .iter()
        .map(|text| Some(text.parse().unwrap()))
        .collect();
        let no_password = acl_with("", &[]);
        let password = acl_with("s3cret", &[]);
        let other_user_only = acl_with("", &[("alice", &["on", ">pw", "+@all", "~*"])]);
        let default_given_password = acl_with("", &[("default", &[">pw"])]);
        let default_disabled = acl_with("", &[("default", &["off"])]);
        // (users, whether a remote client is refused with protected mode on)
        let cases = [
            (&no_password, true),
            (&password, false),
            (&other_user_only, true),
            (&default_given_password, false),
            (&default_disabled, false),
        ];
        for (acl, remote_refused) in cases {
            for protected_mode in [true, false] {
                let force = in_force(protected_mode, open_default(acl));
                for &peer in &loopback {
                    assert!(admits(peer, force), "{peer:?} always admitted");
                }
                for &peer in &remote {
                    assert_eq!(
                        admits(peer, force),
                        !(protected_mode && remote_refused),
                        "{peer:?} protected-mode {protected_mode}"
                    );
                }
            }
        }
    }

    #[test]
    fn denial_texts_keep_their_prefixes() {
        assert!(RESP_DENIED.starts_with(b"-DENIED "));
        assert!(RESP_DENIED.ends_with(b"\r\n"));
        assert!(!RESP_DENIED[..RESP_DENIED.len() - 2].contains(&b'\n'));
        assert!(MEMCACHE_DENIED.starts_with(b"SERVER_ERROR "));
        assert!(!MEMCACHE_DENIED[..MEMCACHE_DENIED.len() - 2].contains(&b'\n'));
    }
}
