//! The exported C functions. Each looks its descriptor up in the table and either passes the call to the
//! next definition untouched or serves it from the channel. No panic crosses into C: a panic becomes
//! `EIO`.
// Each exported function is the C library function of the same name, with that function's contract.
#![allow(clippy::missing_safety_doc)]
use crate::channel::{self, lookup, Channel};
use crate::{epoll, io as chio, open, poll, real, sockopt, targets};
use libc::{
    c_int, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t,
    size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn set_errno(code: i32) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = code };
}

/// Runs `f`, turning an error into errno and -1, and a panic into EIO.
fn guard<T: TryFrom<usize> + From<i8>>(f: impl FnOnce() -> io::Result<usize>) -> T {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    match outcome {
        Ok(Ok(n)) => T::try_from(n).unwrap_or(T::from(-1)),
        Ok(Err(error)) => {
            set_errno(error.raw_os_error().unwrap_or(libc::EIO));
            T::from(-1)
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::from(-1)
        }
    }
}

/// The channel behind `fd`. One inherited across fork stays in the table so that the child's reads and
/// writes fail (ECONNRESET) instead of reaching the eventfd under the number.
fn live(fd: c_int) -> Option<Arc<Channel>> {
    lookup(fd)
}

/// # Safety
/// `buf` is valid for `len` bytes (or `len` is 0).
unsafe fn slice_mut<'a>(buf: *mut c_void, len: size_t) -> &'a mut [u8] {
    if len == 0 || buf.is_null() {
        &mut []
    } else {
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) }
    }
}

/// # Safety
/// `buf` is valid for `len` bytes (or `len` is 0).
unsafe fn slice<'a>(buf: *const c_void, len: size_t) -> &'a [u8] {
    if len == 0 || buf.is_null() {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
    }
}

/// # Safety
/// `iov` holds `count` valid iovecs.
unsafe fn iovecs_mut<'a>(iov: *const iovec, count: c_int) -> io::Result<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&count) {
        return Err(channel::errno(libc::EINVAL));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let iov = unsafe { std::slice::from_raw_parts(iov, count as usize) };
    Ok(iov
        .iter()
        .map(|v| unsafe { slice_mut(v.iov_base, v.iov_len) })
        .collect())
}

/// # Safety
/// `iov` holds `count` valid iovecs.
unsafe fn iovecs<'a>(iov: *const iovec, count: c_int) -> io::Result<Vec<&'a [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&count) {
        return Err(channel::errno(libc::EINVAL));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let iov = unsafe { std::slice::from_raw_parts(iov, count as usize) };
    Ok(iov
        .iter()
        .map(|v| unsafe { slice(v.iov_base, v.iov_len) })
        .collect())
}

// ---------------------------------------------------------------------------------------------- connect

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, address: *const sockaddr, length: socklen_t) -> c_int {
    if lookup(fd).is_some() {
        set_errno(libc::EISCONN);
        return -1;
    }
    let targets = targets::targets();
    if !targets.is_empty() {
        // SAFETY: the caller passes `length` readable bytes.
        let peer = unsafe { targets::decode(address, length) };
        if let Some(peer) = peer.filter(|p| targets::matches(targets, *p)) {
            let redirected =
                std::panic::catch_unwind(|| open::try_redirect(fd, peer)).unwrap_or(false);
            if redirected {
                return 0;
            }
        }
    }
    unsafe { real::connect(fd, address, length) }
}

// ---------------------------------------------------------------------------------------------- reads

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    match live(fd) {
        None => unsafe { real::read(fd, buf, count) },
        Some(c) => guard(|| chio::receive(&c, unsafe { slice_mut(buf, count) }, 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    buflen: size_t,
) -> ssize_t {
    match live(fd) {
        None => unsafe { real::read_chk(fd, buf, count, buflen) },
        Some(c) => guard(|| chio::receive(&c, unsafe { slice_mut(buf, count.min(buflen)) }, 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::recv(fd, buf, len, flags) },
        Some(c) => guard(|| chio::receive(&c, unsafe { slice_mut(buf, len) }, flags)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    match live(fd) {
        None => unsafe { real::recv_chk(fd, buf, len, buflen, flags) },
        Some(c) => guard(|| chio::receive(&c, unsafe { slice_mut(buf, len.min(buflen)) }, flags)),
    }
}

/// A connected TCP socket names no source: the address length comes back 0.
unsafe fn no_source(length: *mut socklen_t) {
    if !length.is_null() {
        unsafe { *length = 0 };
    }
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    address: *mut sockaddr,
    length: *mut socklen_t,
) -> ssize_t {
    match live(fd) {
        None => unsafe { real::recvfrom(fd, buf, len, flags, address, length) },
        Some(c) => guard(|| {
            let n = chio::receive(&c, unsafe { slice_mut(buf, len) }, flags)?;
            unsafe { no_source(length) };
            Ok(n)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    address: *mut sockaddr,
    length: *mut socklen_t,
) -> ssize_t {
    match live(fd) {
        None => unsafe { real::recvfrom_chk(fd, buf, len, buflen, flags, address, length) },
        Some(c) => guard(|| {
            let n = chio::receive(&c, unsafe { slice_mut(buf, len.min(buflen)) }, flags)?;
            unsafe { no_source(length) };
            Ok(n)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::readv(fd, iov, count) },
        Some(c) => guard(|| chio::receive_vectored(&c, &mut unsafe { iovecs_mut(iov, count) }?, 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, message: *mut msghdr, flags: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::recvmsg(fd, message, flags) },
        Some(c) => guard(|| {
            if message.is_null() {
                return Err(channel::errno(libc::EFAULT));
            }
            let m = unsafe { &mut *message };
            let mut bufs = unsafe { iovecs_mut(m.msg_iov, m.msg_iovlen as c_int) }?;
            let n = chio::receive_vectored(&c, &mut bufs, flags)?;
            m.msg_namelen = 0;
            m.msg_controllen = 0;
            m.msg_flags = 0;
            Ok(n)
        }),
    }
}

// ---------------------------------------------------------------------------------------------- writes

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    match live(fd) {
        None => unsafe { real::write(fd, buf, count) },
        Some(c) => guard(|| chio::send(&c, unsafe { slice(buf, count) }, 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::send(fd, buf, len, flags) },
        Some(c) => guard(|| chio::send(&c, unsafe { slice(buf, len) }, flags)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    address: *const sockaddr,
    length: socklen_t,
) -> ssize_t {
    match live(fd) {
        None => unsafe { real::sendto(fd, buf, len, flags, address, length) },
        // A connected TCP socket ignores a destination address.
        Some(c) => guard(|| chio::send(&c, unsafe { slice(buf, len) }, flags)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, count: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::writev(fd, iov, count) },
        Some(c) => guard(|| chio::send_vectored(&c, &unsafe { iovecs(iov, count) }?, 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, message: *const msghdr, flags: c_int) -> ssize_t {
    match live(fd) {
        None => unsafe { real::sendmsg(fd, message, flags) },
        Some(c) => guard(|| {
            if message.is_null() {
                return Err(channel::errno(libc::EFAULT));
            }
            let m = unsafe { &*message };
            let bufs = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
            chio::send_vectored(&c, &bufs, flags)
        }),
    }
}

// ---------------------------------------------------------------------------------------------- descriptors

/// Forgets `fd` as a channel (and as an epoll set); the channel closes with its last descriptor.
fn forget(fd: c_int) {
    let _ = std::panic::catch_unwind(|| {
        epoll::forget(fd);
        drop(channel::remove(fd));
    });
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    forget(fd);
    unsafe { real::close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        for (fd, channel) in channel::remove_range(first, last) {
            epoll::forget(fd);
            drop(channel);
        }
    });
    unsafe { real::close_range(first, last, flags) }
}

/// After the kernel made `new` a duplicate of `old`: the table follows.
fn follow_duplicate(old: c_int, new: c_int, result: c_int) -> c_int {
    if result >= 0 && new != old {
        let _ = std::panic::catch_unwind(|| {
            if let Some(channel) = lookup(old) {
                drop(channel::insert(result, channel));
            }
        });
    }
    result
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let result = unsafe { real::dup(fd) };
    follow_duplicate(fd, result, result)
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && (lookup(old).is_some() || lookup(new).is_some()) {
        forget(new);
    }
    let result = unsafe { real::dup2(old, new) };
    follow_duplicate(old, new, result)
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && (lookup(old).is_some() || lookup(new).is_some()) {
        forget(new);
    }
    let result = unsafe { real::dup3(old, new, flags) };
    follow_duplicate(old, new, result)
}

/// fcntl on a channel: the status flags (O_NONBLOCK) are the channel's, duplicates join the table, the
/// rest (FD_CLOEXEC...) goes to the descriptor itself.
fn fcntl_channel(
    fd: c_int,
    channel: &Channel,
    command: c_int,
    argument: usize,
    next: unsafe fn(c_int, c_int, usize) -> c_int,
) -> c_int {
    match command {
        libc::F_GETFL => {
            let nonblocking = channel.nonblocking.load(Ordering::Relaxed);
            libc::O_RDWR | if nonblocking { libc::O_NONBLOCK } else { 0 }
        }
        libc::F_SETFL => {
            let nonblocking = argument as c_int & libc::O_NONBLOCK != 0;
            channel.nonblocking.store(nonblocking, Ordering::Relaxed);
            0
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let result = unsafe { next(fd, command, argument) };
            follow_duplicate(fd, result, result)
        }
        _ => unsafe { next(fd, command, argument) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, command: c_int, argument: usize) -> c_int {
    match live(fd) {
        None => unsafe { real::fcntl(fd, command, argument) },
        Some(c) => fcntl_channel(fd, &c, command, argument, real::fcntl),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, command: c_int, argument: usize) -> c_int {
    match live(fd) {
        None => unsafe { real::fcntl64(fd, command, argument) },
        Some(c) => fcntl_channel(fd, &c, command, argument, real::fcntl64),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, argument: usize) -> c_int {
    let Some(c) = live(fd) else {
        return unsafe { real::ioctl(fd, request, argument) };
    };
    let out = argument as *mut c_int;
    match request {
        libc::FIONBIO if !out.is_null() => {
            let on = unsafe { *out } != 0;
            c.nonblocking.store(on, Ordering::Relaxed);
            0
        }
        libc::FIONREAD if !out.is_null() => {
            let n = chio::readable_bytes(&c).min(c_int::MAX as usize);
            unsafe { *out = n as c_int };
            0
        }
        _ => unsafe { real::ioctl(fd, request, argument) },
    }
}

// ---------------------------------------------------------------------------------------------- sockets

#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    length: socklen_t,
) -> c_int {
    match live(fd) {
        None => unsafe { real::setsockopt(fd, level, name, value, length) },
        Some(c) => guard(|| unsafe { sockopt::set(&c, level, name, value, length) }.map(|()| 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    length: *mut socklen_t,
) -> c_int {
    match live(fd) {
        None => unsafe { real::getsockopt(fd, level, name, value, length) },
        Some(c) => guard(|| unsafe { sockopt::get(&c, level, name, value, length) }.map(|()| 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(
    fd: c_int,
    address: *mut sockaddr,
    length: *mut socklen_t,
) -> c_int {
    match live(fd) {
        None => unsafe { real::getpeername(fd, address, length) },
        Some(c) => guard(|| unsafe { sockopt::write_address(c.peer, address, length) }.map(|()| 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(
    fd: c_int,
    address: *mut sockaddr,
    length: *mut socklen_t,
) -> c_int {
    match live(fd) {
        None => unsafe { real::getsockname(fd, address, length) },
        Some(c) => guard(|| unsafe { sockopt::local_name(&c, address, length) }.map(|()| 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(c) = live(fd) else {
        return unsafe { real::shutdown(fd, how) };
    };
    guard(|| {
        let (read_side, write_side) = match how {
            libc::SHUT_RD => (true, false),
            libc::SHUT_WR => (false, true),
            libc::SHUT_RDWR => (true, true),
            _ => return Err(channel::errno(libc::EINVAL)),
        };
        if read_side {
            c.shut_read.store(true, Ordering::Relaxed);
        }
        if write_side && !c.shut_write.swap(true, Ordering::Relaxed) {
            // The server sees the end of the requests, as a TCP server sees a FIN.
            let io = c.io();
            io.chan.mapping.mark_closed(fallow_shm::Side::Client);
            fallow_shm::sys::eventfd_ring(c.server_bell_fd);
        }
        Ok(0)
    })
}

// ---------------------------------------------------------------------------------------------- readiness

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    match live(fd) {
        None => {
            let result = unsafe { real::epoll_ctl(epfd, op, fd, event) };
            // Only a process that may redirect keeps books (the library is inert without targets).
            if result == 0 && op == libc::EPOLL_CTL_ADD && !targets::targets().is_empty() {
                let _ = std::panic::catch_unwind(|| epoll::note_other(epfd));
            }
            result
        }
        Some(c) => guard(|| {
            let event = (!event.is_null()).then(|| unsafe { std::ptr::read_unaligned(event) });
            epoll::control_channel(epfd, op, fd, c, event).map(|()| 0)
        }),
    }
}

unsafe fn epoll_wait_any(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout_ms: c_int,
    mask: *const sigset_t,
) -> c_int {
    if max <= 0 || events.is_null() || !epoll::any_set_holds_channels() {
        return unsafe { real::epoll_pwait(epfd, events, max, timeout_ms, mask) };
    }
    guard(|| {
        let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
        epoll::wait(epfd, out, poll::deadline_ms(timeout_ms), mask)
    })
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout_ms: c_int,
) -> c_int {
    if !channel::any() {
        return unsafe { real::epoll_wait(epfd, events, max, timeout_ms) };
    }
    unsafe { epoll_wait_any(epfd, events, max, timeout_ms, std::ptr::null()) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout_ms: c_int,
    mask: *const sigset_t,
) -> c_int {
    if !channel::any() {
        return unsafe { real::epoll_pwait(epfd, events, max, timeout_ms, mask) };
    }
    unsafe { epoll_wait_any(epfd, events, max, timeout_ms, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !channel::any() || max <= 0 || events.is_null() || !epoll::any_set_holds_channels() {
        return unsafe { real::epoll_pwait2(epfd, events, max, timeout, mask) };
    }
    guard(|| {
        let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
        // The shim's own kernel waits take milliseconds (rounded up), enough for a deadline.
        epoll::wait(epfd, out, unsafe { poll::deadline_timespec(timeout) }, mask)
    })
}

/// # Safety
/// `fds` holds `count` pollfds.
unsafe fn poll_fds<'a>(fds: *mut pollfd, count: nfds_t) -> Option<&'a mut [pollfd]> {
    if fds.is_null() || count == 0 || count > 1 << 20 {
        return None;
    }
    Some(unsafe { std::slice::from_raw_parts_mut(fds, count as usize) })
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, count: nfds_t, timeout_ms: c_int) -> c_int {
    match unsafe { poll_fds(fds, count) }.filter(|f| poll::names_a_channel(f)) {
        None => unsafe { real::poll(fds, count, timeout_ms) },
        Some(f) => guard(|| poll::poll(f, poll::deadline_ms(timeout_ms), std::ptr::null())),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    count: nfds_t,
    timeout_ms: c_int,
    fdslen: size_t,
) -> c_int {
    match unsafe { poll_fds(fds, count) }.filter(|f| poll::names_a_channel(f)) {
        None => unsafe { real::poll_chk(fds, count, timeout_ms, fdslen) },
        Some(f) => guard(|| poll::poll(f, poll::deadline_ms(timeout_ms), std::ptr::null())),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    count: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    match unsafe { poll_fds(fds, count) }.filter(|f| poll::names_a_channel(f)) {
        None => unsafe { real::ppoll(fds, count, timeout, mask) },
        Some(f) => guard(|| poll::poll(f, unsafe { poll::deadline_timespec(timeout) }, mask)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    count: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    match unsafe { poll_fds(fds, count) }.filter(|f| poll::names_a_channel(f)) {
        None => unsafe { real::ppoll_chk(fds, count, timeout, mask, fdslen) },
        Some(f) => guard(|| poll::poll(f, unsafe { poll::deadline_timespec(timeout) }, mask)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    if !unsafe { poll::sets_name_a_channel(nfds, read, write, except) } {
        return unsafe { real::select(nfds, read, write, except, timeout) };
    }
    guard(|| {
        let deadline = (!timeout.is_null()).then(|| {
            let t = unsafe { *timeout };
            std::time::Instant::now()
                + std::time::Duration::new(
                    t.tv_sec.max(0) as u64,
                    (t.tv_usec.clamp(0, 999_999) * 1000) as u32,
                )
        });
        let n = unsafe { poll::select(nfds, read, write, except, deadline, std::ptr::null()) }?;
        if let Some(d) = deadline {
            // Linux's select leaves the time not slept in the timeout.
            let left = d.saturating_duration_since(std::time::Instant::now());
            unsafe {
                (*timeout).tv_sec = left.as_secs() as libc::time_t;
                (*timeout).tv_usec = left.subsec_micros() as libc::suseconds_t;
            }
        }
        Ok(n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !unsafe { poll::sets_name_a_channel(nfds, read, write, except) } {
        return unsafe { real::pselect(nfds, read, write, except, timeout, mask) };
    }
    guard(|| unsafe {
        poll::select(
            nfds,
            read,
            write,
            except,
            poll::deadline_timespec(timeout),
            mask,
        )
    })
}
