//! Tier-2 reads through io_uring: a connection submits its record reads from its own thread (no hand-off
//! to a blocking thread and back, which costs two thread wake-ups per read: ~30 µs on these VMs, as much
//! as the device itself), and the completions signal an eventfd that the server's event loop polls; the
//! task that drains them runs the readers' callbacks on the thread that woke.
//!
//! One ring serves the whole process, its submission and completion queues behind one mutex (held for a
//! push and an `io_uring_enter`, or for draining; never across a wait). Every read in flight owns its
//! aligned buffer here until its completion arrives, so a reader that gave up (a connection that closed)
//! never leaves the kernel writing into freed memory; dropping the ring waits for what is in flight.
use super::device::{AlignedBuf, Device};
use super::{Slot, Tier2Error};
use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

/// Called once with a read's outcome: the checked record's bytes.
pub type ReadDone = Box<dyn FnOnce(Result<Vec<u8>, Tier2Error>) + Send>;

/// One read the kernel is working on.
struct InFlight {
    buffer: AlignedBuf,
    slot: Slot,
    /// Where the record starts in `buffer`.
    record_start: usize,
    started: Instant,
    done: ReadDone,
}

/// A read whose completion was reaped: the record's bytes (unchecked), for `Tier2::reap_reads`.
pub struct Completed {
    pub slot: Slot,
    pub started: Instant,
    pub bytes: Result<Vec<u8>, Tier2Error>,
    pub done: ReadDone,
}

struct Ring {
    ring: IoUring,
    in_flight: HashMap<u64, InFlight>,
    next_id: u64,
    /// Why a submission failed: nothing more is submitted (see `submit`).
    broken: Option<String>,
    /// Buffers of entries left in the submission queue when it broke (never freed: the kernel could
    /// still be handed them by the `Drop` wait).
    stranded: Vec<AlignedBuf>,
}

/// The process's tier-2 read ring.
pub struct UringReads {
    ring: Mutex<Ring>,
    /// Signalled by the kernel for every completion (non-blocking, close-on-exec).
    completions: OwnedFd,
    /// Reads in flight at most (the submission queue's size; completions, twice that, never overflow).
    pub entries: u32,
}

impl UringReads {
    /// A ring of `entries` submission slots with an eventfd for its completions; `Err` when the kernel
    /// refuses io_uring (too old, disabled by `kernel.io_uring_disabled`, or a seccomp filter).
    pub fn new(entries: u32) -> std::io::Result<UringReads> {
        let ring = IoUring::builder().build(entries)?;
        // SAFETY: eventfd returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor this value now owns.
        let completions = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(completions.as_raw_fd())?;
        Ok(UringReads {
            ring: Mutex::new(Ring {
                ring,
                in_flight: HashMap::new(),
                next_id: 0,
                broken: None,
                stranded: Vec::new(),
            }),
            completions,
            entries,
        })
    }

    /// The eventfd to poll for readability; `reap` after it fires (after `clear_completions`).
    pub fn completions_fd(&self) -> RawFd {
        self.completions.as_raw_fd()
    }

    /// Resets the eventfd's counter (non-blocking; nothing to do when it is already 0).
    pub fn clear_completions(&self) -> std::io::Result<()> {
        let mut counter = [0u8; 8];
        // SAFETY: reads 8 bytes into a buffer of 8.
        let read = unsafe { libc::read(self.completions_fd(), counter.as_mut_ptr().cast(), 8) };
        if read < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Why the ring stopped taking reads, if it did (the server then reads on its thread pool).
    pub fn failure(&self) -> Option<String> {
        self.ring.lock().broken.clone()
    }

    /// Takes no more reads (`why` is reported by `failure`).
    pub fn stop(&self, why: &str) {
        self.ring
            .lock()
            .broken
            .get_or_insert_with(|| why.to_string());
    }

    /// Submits a read of the blocks holding `slot`'s record; `done` runs from a later `reap`. Gives
    /// `done` back when the ring cannot take the read now (full, or the kernel refused the submission):
    /// the caller reads another way.
    pub fn submit(&self, device: &Device, slot: Slot, done: ReadDone) -> Result<(), ReadDone> {
        let (first_block, read_bytes, record_start) = slot.blocks();
        let mut buffer = AlignedBuf::zeroed(read_bytes);
        let mut ring = self.ring.lock();
        if ring.broken.is_some() || ring.in_flight.len() >= self.entries as usize {
            return Err(done);
        }
        let id = ring.next_id;
        let read = opcode::Read::new(
            types::Fd(device.raw_fd()),
            buffer.as_mut_ptr(),
            buffer.len() as u32,
        )
        .offset(first_block)
        .build()
        .user_data(id);
        // SAFETY: the buffer stays alive and unmoved (its memory is on the heap or mapped) in
        // `in_flight` until the completion for `id` is reaped, or until `Drop` has waited for it.
        if unsafe { ring.ring.submission().push(&read) }.is_err() {
            return Err(done);
        }
        ring.next_id += 1;
        ring.in_flight.insert(
            id,
            InFlight {
                buffer,
                slot,
                record_start,
                started: Instant::now(),
                done,
            },
        );
        if let Err(error) = submit_retrying(&mut ring.ring) {
            // The kernel took nothing, but the entry stays in the queue, where any later submission
            // would pass it on: submit nothing more, keep its buffer for good, and read another way.
            ring.broken = Some(error.to_string());
            let flight = ring.in_flight.remove(&id).expect("just inserted");
            ring.stranded.push(flight.buffer);
            return Err(flight.done);
        }
        Ok(())
    }

    /// Takes every completed read off the ring (their callbacks are the caller's to run, outside the
    /// ring's lock).
    pub fn reap(&self) -> Vec<Completed> {
        let mut ring = self.ring.lock();
        let completed: Vec<(u64, i32)> = ring
            .ring
            .completion()
            .map(|entry| (entry.user_data(), entry.result()))
            .collect();
        completed
            .into_iter()
            .filter_map(|(id, result)| {
                let flight = ring.in_flight.remove(&id)?;
                Some(Completed {
                    slot: flight.slot,
                    started: flight.started,
                    bytes: flight.record(result),
                    done: flight.done,
                })
            })
            .collect()
    }
}

impl InFlight {
    /// The record's bytes from a completion's result (bytes read, or -errno). A short read past the
    /// end of the file reads as zeros, as `Device::read_at` does (the record check then refuses it).
    fn record(&self, result: i32) -> Result<Vec<u8>, Tier2Error> {
        if result < 0 {
            return Err(Tier2Error::Io(
                std::io::Error::from_raw_os_error(-result).to_string(),
            ));
        }
        let end = self.record_start + self.slot.padded_bytes();
        let available = (result as usize).clamp(self.record_start, end);
        // One pass over the value: copied, and only a short read's tail zeroed.
        let mut bytes = Vec::with_capacity(self.slot.padded_bytes());
        bytes.extend_from_slice(&self.buffer[self.record_start..available]);
        bytes.resize(self.slot.padded_bytes(), 0);
        Ok(bytes)
    }
}

/// `io_uring_enter` for what was pushed, again on EINTR (a signal) and EAGAIN/EBUSY (the kernel short
/// of memory for a moment; completions never overflow: reads in flight stay below the ring's size).
fn submit_retrying(ring: &mut IoUring) -> std::io::Result<usize> {
    const ATTEMPTS_MAX: usize = 8;
    let mut attempt = 0;
    loop {
        match ring.submit() {
            Err(error)
                if attempt + 1 < ATTEMPTS_MAX
                    && matches!(
                        error.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
            {
                attempt += 1;
            }
            other => return other,
        }
    }
}

impl Drop for UringReads {
    fn drop(&mut self) {
        // The kernel may still write into buffers of reads in flight: wait for each before freeing it.
        let ring = self.ring.get_mut();
        if ring.broken.is_some() {
            // Waiting would submit the stranded entry; its buffer and those in flight are kept.
            std::mem::forget(std::mem::take(&mut ring.in_flight));
            std::mem::forget(std::mem::take(&mut ring.stranded));
            return;
        }
        while !ring.in_flight.is_empty() {
            match ring.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => {
                    // Cannot wait: the buffers the kernel may still fill are kept, not freed.
                    std::mem::forget(std::mem::take(&mut ring.in_flight));
                    return;
                }
            }
            let completed: Vec<u64> = ring.ring.completion().map(|e| e.user_data()).collect();
            for id in completed {
                if let Some(flight) = ring.in_flight.remove(&id) {
                    (flight.done)(Err(Tier2Error::Io("tier 2 closed".into())));
                }
            }
        }
    }
}
