//! Socket options and names of a redirected socket. Options go to the shadow (the program's own TCP
//! socket, never connected), so they validate and default as TCP's do; the receive and send timeouts are
//! also remembered for the channel's blocking waits. `SO_ERROR` is 0: the connect succeeded.
use crate::channel::Channel;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// `address` as a C socket address and its length.
pub fn encode(address: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, large enough for either family.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let length = match address {
        SocketAddr::V4(v4) => {
            let c = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe {
                std::ptr::write_unaligned(&mut storage as *mut _ as *mut libc::sockaddr_in, c)
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let c = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe {
                std::ptr::write_unaligned(&mut storage as *mut _ as *mut libc::sockaddr_in6, c)
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, length as libc::socklen_t)
}

/// Copies `address` out as the C calls do: truncated to `*length`, which is set to the full size.
///
/// # Safety
/// `out` must be writable for `*length` bytes and `length` valid.
pub unsafe fn write_address(
    address: SocketAddr,
    out: *mut libc::sockaddr,
    length: *mut libc::socklen_t,
) -> io::Result<()> {
    if out.is_null() || length.is_null() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    let (storage, full) = encode(address);
    // SAFETY: the caller's buffer holds *length bytes; at most that many are copied.
    unsafe {
        let room = (*length as usize).min(full as usize);
        std::ptr::copy_nonoverlapping(&storage as *const _ as *const u8, out as *mut u8, room);
        *length = full;
    }
    Ok(())
}

fn check(result: libc::c_long) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// setsockopt on a redirected socket.
///
/// # Safety
/// As setsockopt's contract.
pub unsafe fn set(
    channel: &Channel,
    level: i32,
    name: i32,
    value: *const libc::c_void,
    length: libc::socklen_t,
) -> io::Result<()> {
    // SAFETY: forwarded with the caller's pointer and length.
    check(unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            channel.shadow_fd,
            level,
            name,
            value,
            length,
        )
    })?;
    let timeout = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => Some(&channel.receive_timeout_ns),
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => Some(&channel.send_timeout_ns),
        _ => None,
    };
    if let Some(slot) = timeout {
        // The kernel accepted it, so it was a whole timeval.
        // SAFETY: value points at a timeval (the kernel checked the length).
        let tv = unsafe { std::ptr::read_unaligned(value as *const libc::timeval) };
        let ns = (tv.tv_sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(tv.tv_usec.max(0) as u64 * 1000);
        slot.store(ns, Ordering::Relaxed);
    }
    Ok(())
}

/// getsockopt on a redirected socket.
///
/// # Safety
/// As getsockopt's contract.
pub unsafe fn get(
    channel: &Channel,
    level: i32,
    name: i32,
    value: *mut libc::c_void,
    length: *mut libc::socklen_t,
) -> io::Result<()> {
    if (level, name) == (libc::SOL_SOCKET, libc::SO_ERROR) {
        if value.is_null() || length.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        // SAFETY: the caller's buffer holds *length bytes.
        unsafe {
            let zero = 0 as libc::c_int;
            let room = (*length as usize).min(std::mem::size_of::<libc::c_int>());
            std::ptr::copy_nonoverlapping(&zero as *const _ as *const u8, value as *mut u8, room);
            *length = room as libc::socklen_t;
        }
        return Ok(());
    }
    // SAFETY: forwarded with the caller's pointers.
    check(unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            channel.shadow_fd,
            level,
            name,
            value,
            length,
        )
    })
}

/// getsockname: the shadow's loopback address.
///
/// # Safety
/// As getsockname's contract.
pub unsafe fn local_name(
    channel: &Channel,
    out: *mut libc::sockaddr,
    length: *mut libc::socklen_t,
) -> io::Result<()> {
    // SAFETY: forwarded with the caller's pointers.
    check(unsafe { libc::syscall(libc::SYS_getsockname, channel.shadow_fd, out, length) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_copy_out_truncated_to_the_callers_room_with_the_full_length() {
        let address: SocketAddr = "[::1]:6379".parse().unwrap();
        let (_, full) = encode(address);
        assert_eq!(full as usize, std::mem::size_of::<libc::sockaddr_in6>());
        let mut room = [0xAAu8; 8];
        let mut length = room.len() as libc::socklen_t;
        // SAFETY: `room` holds `length` bytes.
        unsafe {
            write_address(
                address,
                room.as_mut_ptr() as *mut libc::sockaddr,
                &mut length,
            )
        }
        .unwrap();
        assert_eq!(length, full, "the full size is reported");
        let family = u16::from_ne_bytes([room[0], room[1]]);
        assert_eq!(family as i32, libc::AF_INET6);
        assert_eq!(u16::from_be_bytes([room[2], room[3]]), 6379);
        // SAFETY: null pointers are refused before any write.
        let refused = unsafe { write_address(address, std::ptr::null_mut(), &mut length) };
        assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EFAULT));
    }

    #[test]
    fn ipv4_addresses_round_trip_through_the_c_structure() {
        let address: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let (storage, length) = encode(address);
        // SAFETY: storage holds `length` bytes of an address.
        let decoded = unsafe {
            crate::targets::decode(&storage as *const _ as *const libc::sockaddr, length)
        };
        assert_eq!(decoded, Some(address));
    }
}
