//! `poll`/`ppoll`/`select`/`pselect` over descriptors some of which are channels.
//!
//! A channel's readiness is computed from its rings ("synthesized"): its eventfd is always writable and
//! readable only when the server rang it, so the kernel's answer for it means nothing by itself. Each call
//! checks the channels (and, with a zero timeout, the other descriptors); while a reply is due it spins
//! for the client's budget; then it marks the channels sleeping and really waits on the other descriptors,
//! the channels' doorbells and their lifelines, and checks again when woken.
use crate::channel::{lookup, Channel};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `revents` a channel shows for `events`.
pub fn channel_revents(channel: &Channel, events: i16) -> i16 {
    if channel.inherited() {
        return libc::POLLERR | libc::POLLHUP;
    }
    let mut io = channel.io();
    let mut revents = 0;
    let hung_up = channel.hung_up(&io);
    if events & (libc::POLLIN | libc::POLLRDNORM) != 0 && channel.read_ready(&io) {
        revents |= events & (libc::POLLIN | libc::POLLRDNORM);
    }
    if events & (libc::POLLOUT | libc::POLLWRNORM) != 0 && channel.write_ready(&mut io) {
        revents |= events & (libc::POLLOUT | libc::POLLWRNORM);
    }
    if hung_up {
        revents |= libc::POLLHUP | (events & libc::POLLRDHUP);
    }
    revents
}

struct Watched {
    index: usize,
    channel: Arc<Channel>,
}

/// Converts an optional deadline into ppoll's timespec.
fn remaining(deadline: Option<Instant>) -> Option<libc::timespec> {
    deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        }
    })
}

fn real_ppoll(
    fds: &mut [libc::pollfd],
    timeout: Option<libc::timespec>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: a valid pollfd array; the timeout and mask are null or valid.
    let n = unsafe {
        crate::real::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timeout_ptr,
            mask,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// True when `fds` names a channel (skips the table when there are none).
pub fn names_a_channel(fds: &[libc::pollfd]) -> bool {
    crate::channel::any() && fds.iter().any(|p| p.fd >= 0 && lookup(p.fd).is_some())
}

/// poll over `fds` (some channels), with `deadline` (None: forever) and the signal mask for the sleep.
pub fn poll(
    fds: &mut [libc::pollfd],
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let watched: Vec<Watched> = fds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.fd >= 0)
        .filter_map(|(index, p)| lookup(p.fd).map(|channel| Watched { index, channel }))
        .collect();
    // The kernel's view: channels wait on their doorbell (the descriptor itself) and their lifeline.
    let mut real: Vec<libc::pollfd> = fds.to_vec();
    for p in real.iter_mut() {
        p.revents = 0;
    }
    for w in &watched {
        real[w.index].events = libc::POLLIN;
        real.push(libc::pollfd {
            fd: w.channel.lifeline_fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }
    let others = fds.iter().filter(|p| p.fd >= 0).count() > watched.len();
    let is_channel = |i: usize| watched.iter().any(|w| w.index == i);
    let mut spin = crate::spin::Spin::new(
        deadline.is_none_or(|d| d > Instant::now())
            && watched
                .iter()
                .any(|w| w.channel.reply_due.load(Ordering::Relaxed)),
    );
    let mut spinning = true;
    loop {
        let channels_ready = synthesize(fds, &watched);
        // While spinning, the kernel is asked about the other descriptors only now and then: a system
        // call costs more than many ring checks.
        let ask_kernel =
            others && (channels_ready > 0 || !spinning || spin.rounds().is_multiple_of(32));
        let others_ready = if ask_kernel {
            real_ppoll(&mut real, remaining(Some(Instant::now())), mask)?
        } else {
            0
        };
        if channels_ready > 0 || others_ready > 0 {
            spin.ready();
            return Ok(merge(fds, &real, &is_channel));
        }
        if spinning {
            spinning = spin.again();
            if spinning {
                continue;
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(merge(fds, &real, &is_channel));
        }
        let woken = sleep(&watched, fds, &mut real, deadline, mask)?;
        if woken > 0 || synthesize(fds, &watched) > 0 {
            return Ok(merge(fds, &real, &is_channel));
        }
    }
}

/// Marks the channels sleeping and waits in the kernel; returns the other descriptors that fired.
fn sleep(
    watched: &[Watched],
    fds: &[libc::pollfd],
    real: &mut [libc::pollfd],
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let mut already = false;
    for w in watched {
        let events = fds[w.index].events;
        let want_read = events & (libc::POLLIN | libc::POLLRDNORM) != 0;
        let want_write = events & (libc::POLLOUT | libc::POLLWRNORM) != 0;
        already |= w.channel.prepare_to_sleep(want_read, want_write);
    }
    let timeout = if already {
        remaining(Some(Instant::now()))
    } else {
        remaining(deadline)
    };
    for p in real.iter_mut() {
        p.revents = 0;
    }
    let result = real_ppoll(real, timeout, mask);
    for (n, w) in watched.iter().enumerate() {
        w.channel.woke();
        if real[fds.len() + n].revents != 0 {
            w.channel.lifeline_down.store(true, Ordering::Relaxed);
        }
    }
    result?;
    let is_channel = |i: usize| watched.iter().any(|w| w.index == i);
    Ok(real[..fds.len()]
        .iter()
        .enumerate()
        .filter(|(i, p)| !is_channel(*i) && p.revents != 0)
        .count())
}

/// Writes the channels' revents into `fds`; returns how many show something.
fn synthesize(fds: &mut [libc::pollfd], watched: &[Watched]) -> usize {
    let mut ready = 0;
    for w in watched {
        let revents = channel_revents(&w.channel, fds[w.index].events);
        fds[w.index].revents = revents;
        if revents != 0 {
            ready += 1;
        }
    }
    ready
}

/// Copies the kernel's revents for the other descriptors into `fds`; counts the entries that show any.
fn merge(
    fds: &mut [libc::pollfd],
    real: &[libc::pollfd],
    is_channel: &dyn Fn(usize) -> bool,
) -> usize {
    let mut count = 0;
    for (i, p) in fds.iter_mut().enumerate() {
        if !is_channel(i) {
            p.revents = if p.fd >= 0 { real[i].revents } else { 0 };
        }
        if p.revents != 0 {
            count += 1;
        }
    }
    count
}

/// A deadline `timeout_ms` from now (negative: none).
pub fn deadline_ms(timeout_ms: i32) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

/// A deadline from a timespec (null: none).
///
/// # Safety
/// `timeout` is null or valid.
pub unsafe fn deadline_timespec(timeout: *const libc::timespec) -> Option<Instant> {
    if timeout.is_null() {
        return None;
    }
    // SAFETY: non-null and valid by the caller's contract.
    let t = unsafe { *timeout };
    Some(
        Instant::now()
            + Duration::new(
                t.tv_sec.max(0) as u64,
                t.tv_nsec.clamp(0, 999_999_999) as u32,
            ),
    )
}

/// select/pselect as a poll: the sets become pollfds and back. `nfds` is at most FD_SETSIZE.
///
/// # Safety
/// The sets are null or valid fd_sets.
pub unsafe fn select(
    nfds: i32,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let limit = nfds.clamp(0, libc::FD_SETSIZE as i32);
    let is_set =
        |set: *mut libc::fd_set, fd: i32| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
    let mut fds = Vec::new();
    for fd in 0..limit {
        let mut events = 0;
        if is_set(read, fd) {
            events |= libc::POLLIN;
        }
        if is_set(write, fd) {
            events |= libc::POLLOUT;
        }
        if is_set(except, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    poll(&mut fds, deadline, mask)?;
    for set in [read, write, except] {
        if !set.is_null() {
            // SAFETY: a valid fd_set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &fds {
        // A descriptor shows in the sets it was asked about only (a hang-up reads as readable).
        let marks = [
            (
                read,
                libc::POLLIN,
                libc::POLLIN | libc::POLLHUP | libc::POLLERR,
            ),
            (write, libc::POLLOUT, libc::POLLOUT | libc::POLLERR),
            (except, libc::POLLPRI, libc::POLLPRI),
        ];
        for (set, asked, shows) in marks {
            if p.events & asked != 0 && p.revents & shows != 0 {
                // SAFETY: the program set this descriptor in this set, so the set is valid and
                // fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        }
    }
    Ok(count)
}

/// True when any descriptor below `nfds` in the sets is a channel.
///
/// # Safety
/// The sets are null or valid fd_sets.
pub unsafe fn sets_name_a_channel(
    nfds: i32,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
) -> bool {
    if !crate::channel::any() {
        return false;
    }
    let limit = nfds.clamp(0, libc::FD_SETSIZE as i32);
    (0..limit).any(|fd| {
        [read, write, except]
            .iter()
            .any(|set| !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) })
            && lookup(fd).is_some()
    })
}
