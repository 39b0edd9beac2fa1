//! The system calls the channel needs, made with `libc::syscall` (see the crate's comment: the preload
//! library interposes libc's wrappers). Each returns `io::Error` from errno.
use std::io;

fn check(result: libc::c_long) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result as usize)
    }
}

/// Retries a call interrupted by a signal.
fn retry(mut call: impl FnMut() -> libc::c_long) -> io::Result<usize> {
    loop {
        match check(call()) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

pub fn close(fd: i32) {
    // SAFETY: closing a descriptor this crate owns; errors (EBADF, EINTR) leave nothing to do.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

pub fn read(fd: i32, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes.
    retry(|| unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) })
}

pub fn write(fd: i32, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes.
    retry(|| unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) })
}

/// Writes all of `buf` to a blocking descriptor.
pub fn write_all(fd: i32, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = write(fd, buf)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// A memfd of `len_bytes` zeroed bytes, sealed against growing and shrinking (the peer maps a fixed size).
pub fn memfd_sealed(name: &str, len_bytes: usize) -> io::Result<i32> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: name is a valid C string.
    let fd = check(unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), flags) })? as i32;
    let sealed = (|| {
        // SAFETY: fd is the memfd just created.
        check(unsafe { libc::syscall(libc::SYS_ftruncate, fd, len_bytes as libc::off_t) })?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        check(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_ADD_SEALS, seals) })
    })();
    match sealed {
        Ok(_) => Ok(fd),
        Err(error) => {
            close(fd);
            Err(error)
        }
    }
}

/// The size of a file (a received memfd), by fstat.
pub fn file_bytes(fd: i32) -> io::Result<usize> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut stat as *mut libc::stat) })?;
    Ok(stat.st_size as usize)
}

/// The seals on a memfd.
pub fn seals(fd: i32) -> io::Result<i32> {
    // SAFETY: F_GET_SEALS takes no argument.
    Ok(check(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GET_SEALS) })? as i32)
}

pub fn mmap_shared(fd: i32, len_bytes: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh shared mapping of fd; the kernel picks the address.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(base as *mut u8)
}

pub fn munmap(base: *mut u8, len_bytes: usize) {
    // SAFETY: unmapping a mapping this crate made; nothing refers to it any more (Mapping's drop).
    unsafe { libc::munmap(base as *mut libc::c_void, len_bytes) };
}

/// A non-blocking eventfd (a doorbell).
pub fn eventfd() -> io::Result<i32> {
    let flags = libc::EFD_CLOEXEC | libc::EFD_NONBLOCK;
    // SAFETY: no pointers.
    Ok(check(unsafe { libc::syscall(libc::SYS_eventfd2, 0, flags) })? as i32)
}

/// Adds one to an eventfd's counter (a full counter already wakes its waiter: EAGAIN is fine).
pub fn eventfd_ring(fd: i32) {
    let _ = write(fd, &1u64.to_ne_bytes());
}

/// Resets an eventfd's counter; true when it was non-zero.
pub fn eventfd_drain(fd: i32) -> bool {
    let mut value = [0u8; 8];
    matches!(read(fd, &mut value), Ok(8))
}

/// `ppoll` on `fds` for at most `timeout` (None = forever), without a signal mask: the count of
/// descriptors with events, their `revents` filled in. EINTR is returned as an error for the caller to
/// decide (a socket call reports it, a wait may simply look again).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> io::Result<usize> {
    let timeout = timeout.map(|left| libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    });
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` are valid pollfds; timeout_ptr is null or points at `timeout`.
    check(unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len(),
            timeout_ptr,
            std::ptr::null::<libc::sigset_t>(),
            0,
        )
    })
}

/// Waits until `fd` is readable or `timeout_ns` passes (None = forever). Ok(true) when readable; a
/// signal ends the wait early with Ok(false).
pub fn wait_readable(fd: i32, timeout_ns: Option<u64>) -> io::Result<bool> {
    let mut pollfd = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    match ppoll(&mut pollfd, timeout_ns.map(std::time::Duration::from_nanos)) {
        Ok(n) => Ok(n > 0),
        Err(error) if error.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(error) => Err(error),
    }
}

/// A blocking Unix stream socket connected to `path` (close-on-exec).
pub fn unix_connect(path: &std::path::Path) -> io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= address.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: no pointers.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        )
    })? as i32;
    let length = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: address is a valid sockaddr_un of `length` bytes.
    let connected = retry(|| unsafe {
        libc::syscall(
            libc::SYS_connect,
            fd,
            &address as *const libc::sockaddr_un,
            length as libc::socklen_t,
        )
    });
    match connected {
        Ok(_) => Ok(fd),
        Err(error) => {
            close(fd);
            Err(error)
        }
    }
}

/// The most descriptors one message carries (the channel passes three).
pub const FDS_PER_MESSAGE_MAX: usize = 4;

/// Sends `bytes` with `fds` attached (SCM_RIGHTS) in one message; returns the bytes sent.
pub fn send_with_fds(socket: i32, bytes: &[u8], fds: &[i32]) -> io::Result<usize> {
    assert!(fds.len() <= FDS_PER_MESSAGE_MAX);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE/CMSG_LEN compute sizes; `control` (64 bytes) holds 4 fds' space.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        assert!(space <= std::mem::size_of_val(&control));
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        message.msg_controllen = space as _;
        // SAFETY: the control buffer is set and large enough for one header with the fds.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(header) as *mut i32,
                fds.len(),
            );
        }
    }
    // SAFETY: message points at iov and control, both alive for the call.
    retry(|| unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            socket,
            &message as *const libc::msghdr,
            libc::MSG_NOSIGNAL,
        )
    })
}

/// Receives bytes into `buf` and any descriptors passed with them (appended to `fds`, close-on-exec).
/// Descriptors beyond `FDS_PER_MESSAGE_MAX` are closed.
pub fn recv_with_fds(socket: i32, buf: &mut [u8], fds: &mut Vec<i32>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: message points at iov and control, both alive for the call.
    let received = retry(|| unsafe {
        libc::syscall(
            libc::SYS_recvmsg,
            socket,
            &mut message as *mut libc::msghdr,
            libc::MSG_CMSG_CLOEXEC,
        )
    })?;
    // SAFETY: walking the control headers the kernel filled in.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data_bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header) as *const i32;
                for index in 0..data_bytes / std::mem::size_of::<i32>() {
                    let fd = std::ptr::read_unaligned(data.add(index));
                    if fds.len() < FDS_PER_MESSAGE_MAX {
                        fds.push(fd);
                    } else {
                        close(fd);
                    }
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    Ok(received)
}
