//! fallow's shared-memory channel (YASMIN's per-connection channel, DESIGN.md "Transports").
//!
//! A client on fallow's Unix socket sends `SHM.OPEN`; the server answers with a memfd holding two
//! single-producer/single-consumer byte rings (requests, replies) and two eventfd doorbells, passed with
//! `SCM_RIGHTS`. The bytes on the rings are ordinary RESP (or memcached) traffic. Each side spins while it
//! expects the other to answer soon, then marks itself sleeping and waits on its doorbell; a side that moves
//! an index rings the other's doorbell only when that one sleeps, so a busy channel makes no system call.
//!
//! Every index a peer writes is checked before use (`ring`): a peer that lies about its indices or writes
//! garbage can only make its own channel fail. The Unix socket stays open as the channel's lifeline.
//!
//! The crate makes system calls with `libc::syscall` rather than through libc's wrappers: the preload
//! library interposes `read`, `write`, `close`, `poll`... and links this crate, so calling the wrappers
//! from here would re-enter the shim.
pub mod client;
pub mod layout;
pub mod ring;
pub mod server;
pub mod sys;
pub mod wait;

pub use client::{ClientChannel, OpenError, OpenOptions};
pub use layout::{Layout, Side};
pub use ring::{Consumer, Producer, RingError};
pub use wait::{AdaptiveSpin, SpinPolicy};
