//! `libfallow_preload.so`: run an unmodified program with
//! `LD_PRELOAD=libfallow_preload.so FALLOW_PRELOAD_TARGETS=127.0.0.1:6379` and its TCP connections to
//! the listed addresses become shared-memory channels to the co-located fallow (`fallow-shm`), opened
//! with SHM.OPEN on the target's Unix socket. Anything the shim cannot set up stays on TCP.
//!
//! The program keeps a real descriptor per connection (a duplicate of the channel's client doorbell,
//! an eventfd), so numbers, `poll`/`select`/`epoll`, `dup`, `close` and `fork` keep working; the shim
//! interposes the calls whose meaning changes (see `hooks`) and passes every other descriptor through.
//!
//! Inside the shim nothing calls the C library's versions of the interposed functions: it uses raw
//! system calls (`fallow_shm::sys`, `libc::syscall`) or the next definitions (`real`).
pub mod channel;
pub mod epoll;
pub mod hooks;
pub mod io;
pub mod log;
pub mod open;
pub mod poll;
pub mod real;
pub mod sockopt;
pub mod spin;
pub mod targets;
