//! CPU pinning for the one-connection items. A side that spins before it sleeps and a peer that shares its
//! core cannot both run: each round trip then costs both spin budgets (about 2 × 50 µs) instead of the
//! ring's nanoseconds. So the client thread gets the last CPU and the server (fallow's threads, or the ring
//! echo) the others, the usual split of a co-located client and server.
use std::io;

/// CPUs this process may use now.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set and its size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Restricts thread `tid` (0 = the calling thread) to `cpus`.
pub fn pin(tid: i32, cpus: &[usize]) -> io::Result<()> {
    assert!(!cpus.is_empty(), "a thread needs a CPU");
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        assert!(cpu < libc::CPU_SETSIZE as usize);
        // SAFETY: cpu is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: a valid set and its size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restricts every thread of process `pid` to `cpus` (threads it starts later inherit their parent's).
pub fn pin_process(pid: u32, cpus: &[usize]) -> io::Result<()> {
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: i32 = entry?
            .file_name()
            .to_string_lossy()
            .parse()
            .map_err(io::Error::other)?;
        match pin(tid, cpus) {
            // A thread that ended since the listing.
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
            other => other?,
        }
    }
    Ok(())
}

/// The split: (client CPU, server CPUs), or None with fewer than two CPUs.
pub fn split() -> Option<(usize, Vec<usize>)> {
    let mut cpus = allowed_cpus();
    let client = cpus.pop()?;
    (!cpus.is_empty()).then_some((client, cpus))
}

/// The calling thread on the client CPU and the given processes on the server CPUs, until dropped (then
/// all of them may use every CPU they could before).
pub struct Pinned {
    pids: Vec<u32>,
    all: Vec<usize>,
}

impl Pinned {
    pub fn new(client: usize, server: &[usize], pids: &[u32]) -> io::Result<Pinned> {
        let pinned = Pinned {
            pids: pids.to_vec(),
            all: allowed_cpus(),
        };
        pin(0, &[client])?;
        for &pid in pids {
            pin_process(pid, server)?;
        }
        Ok(pinned)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.all.is_empty() {
            return;
        }
        let _ = pin(0, &self.all);
        for &pid in &self.pids {
            let _ = pin_process(pid, &self.all);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_cpu_sees_only_it() {
        let all = allowed_cpus();
        assert!(!all.is_empty());
        let first = all[0];
        std::thread::spawn(move || {
            pin(0, &[first]).unwrap();
            assert_eq!(allowed_cpus(), vec![first]);
        })
        .join()
        .unwrap();
    }
}
