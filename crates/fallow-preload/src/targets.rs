//! Which TCP destinations go onto channels: `FALLOW_PRELOAD_TARGETS=127.0.0.1:6379,[::1]:6379,...`.
//! `localhost:PORT` stands for both loopback addresses, and an IPv4-mapped IPv6 address matches its IPv4
//! form. Each target's server is found on the Unix socket `fallow_proto::socket_path::socket_path(port)`
//! (`$FALLOW_SOCKET` overrides it for every port).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;

/// The environment variable listing the redirected destinations.
pub const TARGETS_ENV: &str = "FALLOW_PRELOAD_TARGETS";
/// More targets than this are ignored (with a message): the list is scanned on every connect.
pub const TARGETS_MAX: usize = 64;

/// Parses a target list; entries that do not parse are returned as errors for the caller to report.
pub fn parse(list: &str) -> (Vec<SocketAddr>, Vec<String>) {
    let mut targets = Vec::new();
    let mut errors = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if let Some(port) = entry.strip_prefix("localhost:") {
            match port.parse::<u16>() {
                Ok(port) => {
                    targets.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
                    targets.push(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port));
                }
                Err(_) => errors.push(entry.to_string()),
            }
            continue;
        }
        match entry.parse::<SocketAddr>() {
            Ok(address) => targets.push(address),
            Err(_) => errors.push(entry.to_string()),
        }
    }
    if targets.len() > TARGETS_MAX {
        errors.push(format!("more than {TARGETS_MAX} targets"));
        targets.truncate(TARGETS_MAX);
    }
    (targets, errors)
}

/// This process's targets, read once.
pub fn targets() -> &'static [SocketAddr] {
    static TARGETS: OnceLock<Vec<SocketAddr>> = OnceLock::new();
    TARGETS.get_or_init(|| {
        let list = std::env::var(TARGETS_ENV).unwrap_or_default();
        let (targets, errors) = parse(&list);
        for error in errors {
            crate::log::always(&["fallow-preload: ignoring target ", &error]);
        }
        targets
    })
}

/// The socket address in `address`, when it is IPv4 or IPv6.
///
/// # Safety
/// `address` must point at `length` readable bytes.
pub unsafe fn decode(
    address: *const libc::sockaddr,
    length: libc::socklen_t,
) -> Option<SocketAddr> {
    if address.is_null() || (length as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family is readable (checked above); each arm checks the full length.
    let family = unsafe { (*address).sa_family } as i32;
    match family {
        libc::AF_INET if length as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            let v4 = unsafe { std::ptr::read_unaligned(address as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(v4.sin_port)))
        }
        libc::AF_INET6 if length as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let v6 = unsafe { std::ptr::read_unaligned(address as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(v6.sin6_port)))
        }
        _ => None,
    }
}

/// True when `address` is one of `targets` (an IPv4-mapped IPv6 address counts as its IPv4 form).
pub fn matches(targets: &[SocketAddr], address: SocketAddr) -> bool {
    let canonical = |a: SocketAddr| match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    };
    let wanted = canonical(address);
    targets.iter().any(|t| canonical(*t) == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_with_localhost_and_errors() {
        let (targets, errors) =
            parse("127.0.0.1:6379, [::1]:11211,localhost:7000,,nonsense,1.2.3.4:99999");
        assert_eq!(targets.len(), 4);
        assert_eq!(errors, ["nonsense", "1.2.3.4:99999"]);
        assert!(matches(&targets, "127.0.0.1:7000".parse().unwrap()));
        assert!(matches(&targets, "[::1]:7000".parse().unwrap()));
        assert!(matches(
            &targets,
            "[::ffff:127.0.0.1]:6379".parse().unwrap()
        ));
        assert!(!matches(&targets, "127.0.0.1:6380".parse().unwrap()));
        assert!(!matches(&targets, "10.0.0.1:6379".parse().unwrap()));
    }

    #[test]
    fn too_many_targets_are_cut_with_a_message() {
        let list: Vec<String> = (0..100)
            .map(|p| format!("127.0.0.1:{}", 1000 + p))
            .collect();
        let (targets, errors) = parse(&list.join(","));
        assert_eq!(targets.len(), TARGETS_MAX);
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn socket_addresses_decode_from_c_structures() {
        let v4 = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 6379u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let length = std::mem::size_of_val(&v4) as libc::socklen_t;
        let decoded = unsafe { decode(&v4 as *const _ as *const libc::sockaddr, length) };
        assert_eq!(decoded, Some("127.0.0.1:6379".parse().unwrap()));
        let short = unsafe { decode(&v4 as *const _ as *const libc::sockaddr, 4) };
        assert_eq!(short, None, "a truncated address is not a target");
    }
}
