//! The interposed functions' next definitions (normally glibc's), found with `dlsym(RTLD_NEXT)` on first
//! use and cached. The shim calls these, or raw system calls, never its own exported names: calling
//! `read` from inside `read` would recurse.
use libc::{
    c_int, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t,
    size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` (a NUL-terminated symbol name). A symbol the C library
/// lacks cannot be called by the program either, so a miss only happens for functions the shim itself
/// calls: it stops the process with a message rather than jumping to address 0.
fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    debug_assert!(name.ends_with('\0'));
    // SAFETY: name is NUL-terminated; dlsym has no other preconditions.
    let address = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const libc::c_char) };
    if address.is_null() {
        crate::log::always(&[
            "fallow-preload: no next definition of ",
            name.trim_end_matches('\0'),
        ]);
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
    slot.store(address as usize, Ordering::Relaxed);
    address as usize
}

macro_rules! next {
    ($($name:ident = $symbol:literal: fn($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            /// The next definition of the symbol of the same name.
            ///
            /// # Safety
            /// As the C function's contract.
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let address = resolve(&SLOT, concat!($symbol, "\0"));
                // SAFETY: the symbol has this C signature (glibc's prototype).
                let function: unsafe extern "C" fn($($ty),*) -> $ret =
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(address) };
                unsafe { function($($arg),*) }
            }
        )*
    };
}

// fcntl and ioctl are variadic in C; on the x86-64 and AArch64 Linux ABIs a variadic callee reads its
// third argument from the same register a fixed one uses, so a fixed three-argument signature is the same
// call.
next! {
    connect = "connect": fn(fd: c_int, address: *const sockaddr, length: socklen_t) -> c_int;
    read = "read": fn(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t;
    read_chk = "__read_chk": fn(fd: c_int, buf: *mut c_void, count: size_t, buflen: size_t) -> ssize_t;
    readv = "readv": fn(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t;
    recv = "recv": fn(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    recv_chk = "__recv_chk": fn(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    recvfrom = "recvfrom": fn(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, address: *mut sockaddr, length: *mut socklen_t) -> ssize_t;
    recvfrom_chk = "__recvfrom_chk": fn(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int, address: *mut sockaddr, length: *mut socklen_t) -> ssize_t;
    recvmsg = "recvmsg": fn(fd: c_int, message: *mut msghdr, flags: c_int) -> ssize_t;
    write = "write": fn(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t;
    writev = "writev": fn(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t;
    send = "send": fn(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
    sendto = "sendto": fn(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, address: *const sockaddr, length: socklen_t) -> ssize_t;
    sendmsg = "sendmsg": fn(fd: c_int, message: *const msghdr, flags: c_int) -> ssize_t;
    close = "close": fn(fd: c_int) -> c_int;
    close_range = "close_range": fn(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    dup = "dup": fn(fd: c_int) -> c_int;
    dup2 = "dup2": fn(old: c_int, new: c_int) -> c_int;
    dup3 = "dup3": fn(old: c_int, new: c_int, flags: c_int) -> c_int;
    fcntl = "fcntl": fn(fd: c_int, command: c_int, argument: usize) -> c_int;
    fcntl64 = "fcntl64": fn(fd: c_int, command: c_int, argument: usize) -> c_int;
    ioctl = "ioctl": fn(fd: c_int, request: c_ulong, argument: usize) -> c_int;
    setsockopt = "setsockopt": fn(fd: c_int, level: c_int, name: c_int, value: *const c_void, length: socklen_t) -> c_int;
    getsockopt = "getsockopt": fn(fd: c_int, level: c_int, name: c_int, value: *mut c_void, length: *mut socklen_t) -> c_int;
    getpeername = "getpeername": fn(fd: c_int, address: *mut sockaddr, length: *mut socklen_t) -> c_int;
    getsockname = "getsockname": fn(fd: c_int, address: *mut sockaddr, length: *mut socklen_t) -> c_int;
    shutdown = "shutdown": fn(fd: c_int, how: c_int) -> c_int;
    epoll_ctl = "epoll_ctl": fn(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int;
    epoll_wait = "epoll_wait": fn(epfd: c_int, events: *mut epoll_event, max: c_int, timeout_ms: c_int) -> c_int;
    epoll_pwait = "epoll_pwait": fn(epfd: c_int, events: *mut epoll_event, max: c_int, timeout_ms: c_int, mask: *const sigset_t) -> c_int;
    epoll_pwait2 = "epoll_pwait2": fn(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    poll = "poll": fn(fds: *mut pollfd, count: nfds_t, timeout_ms: c_int) -> c_int;
    poll_chk = "__poll_chk": fn(fds: *mut pollfd, count: nfds_t, timeout_ms: c_int, fdslen: size_t) -> c_int;
    ppoll = "ppoll": fn(fds: *mut pollfd, count: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    ppoll_chk = "__ppoll_chk": fn(fds: *mut pollfd, count: nfds_t, timeout: *const timespec, mask: *const sigset_t, fdslen: size_t) -> c_int;
    select = "select": fn(nfds: c_int, read: *mut fd_set, write: *mut fd_set, except: *mut fd_set, timeout: *mut timeval) -> c_int;
    pselect = "pselect": fn(nfds: c_int, read: *mut fd_set, write: *mut fd_set, except: *mut fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int;
}
