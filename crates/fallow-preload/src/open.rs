//! `connect` to a target: open a channel on the target's Unix socket and put its doorbell on the
//! program's descriptor number. Any failure leaves the socket untouched for the real connect.
use crate::channel::{self, Channel};
use crate::log;
use fallow_shm::{sys, ClientChannel, OpenOptions};
use std::net::SocketAddr;
use std::sync::Arc;

fn syscall_fcntl(fd: i32, command: i32, argument: libc::c_long) -> libc::c_long {
    // SAFETY: fcntl with an integer argument.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, command, argument) }
}

/// True when `fd` is a stream socket (SOCK_STREAM), asked of the kernel directly.
fn is_stream_socket(fd: i32) -> bool {
    let mut kind: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: kind and length are valid for the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut kind as *mut libc::c_int,
            &mut length as *mut libc::socklen_t,
        )
    };
    result == 0 && kind == libc::SOCK_STREAM
}

/// Binds the shadow socket to the loopback address of its family (an ephemeral port), so that
/// `getsockname` answers like a connected loopback socket. Skipped when the program bound it already.
fn bind_shadow_to_loopback(shadow: i32, peer: SocketAddr) {
    // SAFETY: sockaddr_storage is plain data.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut length = std::mem::size_of_val(&storage) as libc::socklen_t;
    // SAFETY: storage and length are valid for the call.
    let named = unsafe {
        libc::syscall(
            libc::SYS_getsockname,
            shadow,
            &mut storage as *mut _ as *mut libc::sockaddr,
            &mut length as *mut libc::socklen_t,
        )
    };
    // SAFETY: getsockname filled `length` bytes.
    let bound = named == 0
        && unsafe { crate::targets::decode(&storage as *const _ as *const libc::sockaddr, length) }
            .is_some_and(|a| a.port() != 0);
    if bound {
        return;
    }
    let local = match peer {
        SocketAddr::V4(_) => SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 0),
        SocketAddr::V6(_) => SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), 0),
    };
    let (storage, length) = crate::sockopt::encode(local);
    // SAFETY: storage holds `length` bytes of a socket address; a failure only leaves it unbound.
    unsafe {
        libc::syscall(
            libc::SYS_bind,
            shadow,
            &storage as *const _ as *const libc::sockaddr,
            length,
        )
    };
}

/// Tries to redirect `fd`'s connection to `peer` onto a channel; true when it did (connect returns 0).
pub fn try_redirect(fd: i32, peer: SocketAddr) -> bool {
    if !is_stream_socket(fd) {
        return false;
    }
    let path = fallow_proto::socket_path::socket_path(peer.port());
    let options = OpenOptions {
        spin: channel::spin_policy(),
        port: Some(peer.port()),
        ..OpenOptions::default()
    };
    let chan = match ClientChannel::open(&path, &options) {
        Ok(chan) => chan,
        Err(error) => {
            log::debug(&[
                "fallow-preload: ",
                &peer.to_string(),
                " stays on TCP (",
                &path.display().to_string(),
                ": ",
                &error.to_string(),
                ")",
            ]);
            return false;
        }
    };
    let status_flags = syscall_fcntl(fd, libc::F_GETFL, 0);
    let descriptor_flags = syscall_fcntl(fd, libc::F_GETFD, 0);
    if status_flags < 0 || descriptor_flags < 0 {
        return false;
    }
    // The program's socket lives on as the shadow, under a new number of our own.
    let shadow = syscall_fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
    if shadow < 0 {
        return false;
    }
    let shadow = shadow as i32;
    let cloexec = if descriptor_flags & libc::FD_CLOEXEC as libc::c_long != 0 {
        libc::O_CLOEXEC
    } else {
        0
    };
    // SAFETY: dup3 of our doorbell onto the program's number (atomically replacing the socket there).
    let duplicated = unsafe { libc::syscall(libc::SYS_dup3, chan.client_bell_fd(), fd, cloexec) };
    if duplicated < 0 {
        sys::close(shadow);
        return false;
    }
    bind_shadow_to_loopback(shadow, peer);
    let nonblocking = status_flags & libc::O_NONBLOCK as libc::c_long != 0;
    let protocol = format!("{:?}", chan.protocol());
    let replaced = channel::insert(fd, Arc::new(Channel::new(chan, shadow, peer, nonblocking)));
    drop(replaced);
    log::debug(&[
        "fallow-preload: fd ",
        &fd.to_string(),
        " to ",
        &peer.to_string(),
        " is a shared-memory channel (",
        &protocol,
        ", ",
        &path.display().to_string(),
        ")",
    ]);
    true
}
