//! epoll over sets that hold channels.
//!
//! `epoll_ctl` on a channel records the program's interest (events, data) here and registers, in the
//! kernel's set, the channel's doorbell for EPOLLIN and its lifeline, both under tagged data words the
//! shim recognises and removes from what the program sees. `epoll_wait` reports channels from their
//! rings (synthesized events) and the other descriptors from the kernel; while a reply is due it spins
//! (the client's budget), then marks the channels sleeping and sleeps in the kernel's epoll_wait, which
//! the doorbell ends. Edge-triggered interest is honoured by reporting a channel again only after a read
//! or write since its last report, or new bytes; EPOLLONESHOT disables the interest until EPOLL_CTL_MOD.
use crate::channel::{errno, lookup, Channel};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The high half of the data word on the shim's own registrations.
const TAG: u64 = 0xFA11_0E5C_0000_0000;
const TAG_MASK: u64 = 0xFFFF_FFFF_0000_0000;
/// Set in the low half for a lifeline (else it is a doorbell); the rest is the program's descriptor.
const TAG_LIFELINE: u64 = 0x8000_0000;

struct Member {
    fd: i32,
    /// False after EPOLL_CTL_DEL: the kernel registration stays (ae deletes and re-adds interest on
    /// every request; two system calls each time would cost more than the whole round trip) until the
    /// descriptor closes.
    active: bool,
    channel: Arc<Channel>,
    events: u32,
    data: u64,
    /// EPOLLONESHOT fired: nothing is reported until EPOLL_CTL_MOD.
    disabled: bool,
    // Edge-triggered bookkeeping: what was reported last and the counters then.
    reported_in: bool,
    reported_out: bool,
    reported_hup: bool,
    read_epoch: u64,
    readable: usize,
    write_epoch: u64,
}

impl Member {
    /// Takes the program's interest (ADD of a dormant member, or MOD), starting edge tracking afresh.
    fn interest(&mut self, event: libc::epoll_event) {
        self.active = true;
        self.events = event.events;
        self.data = event.u64;
        self.disabled = false;
        self.reported_in = false;
        self.reported_out = false;
        self.reported_hup = false;
    }
}

#[derive(Default)]
struct EpollSet {
    members: Vec<Member>,
    /// Some descriptor that is not a channel was added: the kernel must be asked too.
    others: bool,
}

static SETS: parking_lot::Mutex<BTreeMap<i32, EpollSet>> =
    parking_lot::const_mutex(BTreeMap::new());
/// Sets holding at least one channel; epoll_wait on any set goes straight to the kernel when 0.
static SETS_WITH_CHANNELS: AtomicUsize = AtomicUsize::new(0);
/// Entries in SETS; close() skips the lock when 0.
static SETS_TRACKED: AtomicUsize = AtomicUsize::new(0);

fn sets() -> parking_lot::MutexGuard<'static, BTreeMap<i32, EpollSet>> {
    SETS.lock()
}

/// For the fork handlers (see `channel`): holds the sets' lock across fork.
pub fn lock_for_fork() {
    std::mem::forget(SETS.lock());
}

/// Releases what `lock_for_fork` took, in the parent and in the child.
pub fn unlock_after_fork() {
    // SAFETY: lock_for_fork took the lock and forgot its guard; nothing else released it.
    unsafe { SETS.force_unlock() };
}

fn recount(sets: &BTreeMap<i32, EpollSet>) {
    SETS_TRACKED.store(sets.len(), Ordering::Relaxed);
    let with = sets.values().filter(|s| !s.members.is_empty()).count();
    SETS_WITH_CHANNELS.store(with, Ordering::Relaxed);
}

fn real_ctl(epfd: i32, op: i32, fd: i32, events: u32, data: u64) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: data };
    // SAFETY: a valid event for the call.
    let result = unsafe { crate::real::epoll_ctl(epfd, op, fd, &mut event) };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// epoll_ctl for a descriptor that is a channel.
pub fn control_channel(
    epfd: i32,
    op: i32,
    fd: i32,
    channel: Arc<Channel>,
    event: Option<libc::epoll_event>,
) -> io::Result<()> {
    let mut sets = sets();
    let set = sets.entry(epfd).or_default();
    let position = set.members.iter().position(|m| m.fd == fd);
    match op {
        libc::EPOLL_CTL_ADD => {
            let event = event.ok_or_else(|| errno(libc::EFAULT))?;
            match position {
                Some(p) if set.members[p].active => return Err(errno(libc::EEXIST)),
                Some(p) => set.members[p].interest(event),
                None => {
                    real_ctl(
                        epfd,
                        libc::EPOLL_CTL_ADD,
                        fd,
                        libc::EPOLLIN as u32,
                        TAG | fd as u32 as u64,
                    )?;
                    // Another duplicate of the channel in the same set registered the lifeline already.
                    let lifeline_tag = TAG | TAG_LIFELINE | fd as u32 as u64;
                    let _ = real_ctl(
                        epfd,
                        libc::EPOLL_CTL_ADD,
                        channel.lifeline_fd,
                        libc::EPOLLIN as u32,
                        lifeline_tag,
                    );
                    let mut member = Member {
                        fd,
                        active: true,
                        channel,
                        events: 0,
                        data: 0,
                        disabled: false,
                        reported_in: false,
                        reported_out: false,
                        reported_hup: false,
                        read_epoch: 0,
                        readable: 0,
                        write_epoch: 0,
                    };
                    member.interest(event);
                    set.members.push(member);
                }
            }
        }
        libc::EPOLL_CTL_MOD => {
            let event = event.ok_or_else(|| errno(libc::EFAULT))?;
            match position {
                Some(p) if set.members[p].active => set.members[p].interest(event),
                _ => return Err(errno(libc::ENOENT)),
            }
        }
        libc::EPOLL_CTL_DEL => match position {
            Some(p) if set.members[p].active => set.members[p].active = false,
            _ => return Err(errno(libc::ENOENT)),
        },
        _ => return Err(errno(libc::EINVAL)),
    }
    recount(&sets);
    Ok(())
}

/// Notes that `epfd` holds a descriptor that is not a channel (EPOLL_CTL_ADD passed to the kernel).
pub fn note_other(epfd: i32) {
    let mut sets = sets();
    sets.entry(epfd).or_default().others = true;
    recount(&sets);
}

/// Forgets `fd` as a channel member of every set (it is being closed) and `fd` as a set.
pub fn forget(fd: i32) {
    if SETS_TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut sets = sets();
    sets.remove(&fd);
    for (epfd, set) in sets.iter_mut() {
        if let Some(position) = set.members.iter().position(|m| m.fd == fd) {
            let member = set.members.remove(position);
            let _ = real_ctl(*epfd, libc::EPOLL_CTL_DEL, fd, 0, 0);
            let _ = real_ctl(*epfd, libc::EPOLL_CTL_DEL, member.channel.lifeline_fd, 0, 0);
        }
    }
    recount(&sets);
}

/// True when some epoll set holds a channel (else epoll_wait goes straight to the kernel).
pub fn any_set_holds_channels() -> bool {
    SETS_WITH_CHANNELS.load(Ordering::Relaxed) != 0
}

/// The events a member shows now (0: none to report), updating its edge-triggered and one-shot state.
fn member_events(member: &mut Member) -> u32 {
    if member.disabled || !member.active {
        return 0;
    }
    let channel = &member.channel;
    if channel.inherited() {
        return (libc::EPOLLERR | libc::EPOLLHUP) as u32;
    }
    let interest = member.events;
    let mut io = channel.io();
    let readable = interest & libc::EPOLLIN as u32 != 0 && channel.read_ready(&io);
    let writable = interest & libc::EPOLLOUT as u32 != 0 && channel.write_ready(&mut io);
    let hung_up = channel.hung_up(&io);
    let edge = interest & libc::EPOLLET as u32 != 0;
    let bytes = if edge {
        io.peeked.len() + io.chan.readable_bytes()
    } else {
        0
    };
    drop(io);
    let mut events = 0u32;
    let read_epoch = channel.read_epoch.load(Ordering::Relaxed);
    let write_epoch = channel.write_epoch.load(Ordering::Relaxed);
    let new_in =
        !edge || !member.reported_in || read_epoch != member.read_epoch || bytes > member.readable;
    let new_out = !edge || !member.reported_out || write_epoch != member.write_epoch;
    if readable && new_in {
        events |= libc::EPOLLIN as u32;
    }
    if writable && new_out {
        events |= libc::EPOLLOUT as u32;
    }
    if hung_up && (!edge || !member.reported_hup) {
        events |= (libc::EPOLLHUP as u32) | (interest & libc::EPOLLRDHUP as u32);
    }
    member.reported_in = readable && (member.reported_in || events & libc::EPOLLIN as u32 != 0);
    member.reported_out = writable && (member.reported_out || events & libc::EPOLLOUT as u32 != 0);
    member.reported_hup |= hung_up;
    member.read_epoch = read_epoch;
    member.readable = bytes;
    member.write_epoch = write_epoch;
    if events != 0 && interest & libc::EPOLLONESHOT as u32 != 0 {
        member.disabled = true;
    }
    events
}

/// What one look at a set found.
struct Look {
    /// Events written at the front of `out`.
    ready: usize,
    /// The set holds descriptors that are not channels.
    others: bool,
    /// A channel in it has a request out whose reply is not read yet (worth spinning for).
    reply_due: bool,
}

/// Writes the members' events into `out`; None when the set holds no channel (the kernel answers alone).
fn synthesize(epfd: i32, out: &mut [libc::epoll_event]) -> Option<Look> {
    let mut sets = sets();
    let set = sets.get_mut(&epfd).filter(|s| !s.members.is_empty())?;
    let mut look = Look {
        ready: 0,
        others: set.others,
        reply_due: false,
    };
    for member in set.members.iter_mut().filter(|m| m.active) {
        look.reply_due |= member.channel.reply_due.load(Ordering::Relaxed);
        if look.ready == out.len() {
            continue;
        }
        let events = member_events(member);
        if events != 0 {
            out[look.ready] = libc::epoll_event {
                events,
                u64: member.data,
            };
            look.ready += 1;
        }
    }
    Some(look)
}

/// Removes the shim's tagged events from `events` (noting lifelines that fired, draining doorbells
/// nobody waits on); returns how many of the program's remain at the front.
fn filter_tags(epfd: i32, events: &mut [libc::epoll_event]) -> usize {
    let mut kept = 0;
    for i in 0..events.len() {
        let event = events[i];
        let data = event.u64;
        if data & TAG_MASK != TAG {
            events[kept] = event;
            kept += 1;
            continue;
        }
        let fd = (data & 0x7FFF_FFFF) as i32;
        let member = sets()
            .get(&epfd)
            .and_then(|s| {
                s.members
                    .iter()
                    .find(|m| m.fd == fd)
                    .map(|m| m.channel.clone())
            })
            .or_else(|| lookup(fd));
        if let Some(channel) = member {
            if data & TAG_LIFELINE != 0 {
                channel.lifeline_down.store(true, Ordering::Relaxed);
                // A hung-up socket stays readable for good: leaving it registered would end every
                // later wait at once while the program keeps the descriptor.
                let _ = real_ctl(epfd, libc::EPOLL_CTL_DEL, channel.lifeline_fd, 0, 0);
            } else {
                channel.drain_if_unwatched();
            }
        }
    }
    kept
}

fn real_wait(
    epfd: i32,
    out: &mut [libc::epoll_event],
    timeout_ms: i32,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    if out.is_empty() {
        return Ok(0);
    }
    // SAFETY: `out` is valid for out.len() events.
    let n = unsafe {
        crate::real::epoll_pwait(epfd, out.as_mut_ptr(), out.len() as i32, timeout_ms, mask)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(filter_tags(epfd, &mut out[..n as usize]))
}

/// Milliseconds left to `deadline`, rounded up (epoll's unit); -1 for none.
fn timeout_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        }
    }
}

/// Marks every member sleeping; returns the channels to wake after and whether one was ready already.
fn prepare(epfd: i32) -> (Vec<Arc<Channel>>, bool) {
    let sets = sets();
    let mut prepared = Vec::new();
    let mut already = false;
    if let Some(set) = sets.get(&epfd) {
        for member in set
            .members
            .iter()
            .filter(|m| !m.disabled && !m.channel.inherited())
        {
            let want_read = member.events & libc::EPOLLIN as u32 != 0;
            let want_write = member.events & libc::EPOLLOUT as u32 != 0;
            already |= member.channel.prepare_to_sleep(want_read, want_write);
            prepared.push(member.channel.clone());
        }
    }
    (prepared, already)
}

/// epoll_wait/epoll_pwait: sets holding channels are answered here, the rest by the kernel alone.
pub fn wait(
    epfd: i32,
    out: &mut [libc::epoll_event],
    deadline: Option<Instant>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let mut spin: Option<crate::spin::Spin> = None;
    let mut spinning = true;
    loop {
        let Some(look) = synthesize(epfd, out) else {
            return real_wait(epfd, out, timeout_ms(deadline), mask);
        };
        let spin = spin.get_or_insert_with(|| {
            crate::spin::Spin::new(look.reply_due && deadline.is_none_or(|d| d > Instant::now()))
        });
        if look.ready > 0 {
            spin.ready();
            let more = if look.others {
                real_wait(epfd, &mut out[look.ready..], 0, mask)?
            } else {
                0
            };
            return Ok(look.ready + more);
        }
        // While spinning, the kernel is asked about the other descriptors only now and then.
        if look.others && (!spinning || spin.rounds().is_multiple_of(32)) {
            let n = real_wait(epfd, out, 0, mask)?;
            if n > 0 {
                return Ok(n);
            }
        }
        if spinning {
            spinning = spin.again();
            if spinning {
                continue;
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(0);
        }
        let (prepared, already) = prepare(epfd);
        let timeout = if already { 0 } else { timeout_ms(deadline) };
        let slept = real_wait(epfd, out, timeout, mask);
        for channel in &prepared {
            channel.woke();
        }
        let n = slept?;
        let more = synthesize(epfd, &mut out[n..]).map_or(0, |look| look.ready);
        if n + more > 0 {
            return Ok(n + more);
        }
    }
}
