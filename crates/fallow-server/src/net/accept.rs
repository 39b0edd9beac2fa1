//! Accept failures, above all running out of descriptors. When `accept` fails with EMFILE or ENFILE the
//! pending connections stay in the listen backlog and the listener stays readable: retrying at once spins,
//! waiting leaves the clients hanging. The classic remedy: keep one spare descriptor open; when out of them,
//! close it, accept each pending connection, tell it why and close it, then reopen the spare. Warnings are
//! rate-limited, since a flood of connections repeats them many times a second.
use crate::log_limit::{repeated, RateLimited};
use crate::server::Server;
use parking_lot::Mutex;
use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One descriptor held back for shedding the backlog; shared by every listener.
static SPARE: Mutex<Option<File>> = Mutex::new(None);
/// Pause after an accept failure that shedding did not resolve, so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// Most connections refused per shedding round; the accept loop comes back for the rest.
const SHED_BATCH_MAX: u64 = 1024;
static OUT_OF_DESCRIPTORS_LOG: RateLimited = RateLimited::new(Duration::from_secs(10));
static ACCEPT_FAILED_LOG: RateLimited = RateLimited::new(Duration::from_secs(10));

/// Opens the spare descriptor (at start, and again after each use).
pub fn reserve_spare() {
    let mut spare = SPARE.lock();
    if spare.is_none() {
        *spare = File::open("/dev/null").ok();
    }
}

fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Handles a failed accept on `listener`: out of descriptors, the pending connections get `refusal` and
/// are closed (counted as rejected); otherwise, or when that freed nothing, a short pause.
pub async fn failed(server: &Server, error: io::Error, listener: RawFd, refusal: &[u8]) {
    if is_out_of_descriptors(&error) {
        let refused = shed_backlog(listener, refusal);
        for counter in [
            &server.stats.connections_received,
            &server.stats.connections_rejected,
        ] {
            counter.fetch_add(refused, Ordering::Relaxed);
        }
        if let Some(suppressed) = OUT_OF_DESCRIPTORS_LOG.check() {
            tracing::warn!(
                %error,
                refused,
                "out of file descriptors: pending connections are refused with an error; lower \
            maxclients or raise 'ulimit -n'{}",
                repeated(suppressed)
            );
        }
        if refused > 0 {
            return;
        }
    } else if let Some(suppressed) = ACCEPT_FAILED_LOG.check() {
        tracing::warn!(%error, "accept failed{}", repeated(suppressed));
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Frees the spare descriptor and refuses the connections waiting on `listener` (non-blocking, as every
/// tokio listener is) with `refusal`; returns how many.
fn shed_backlog(listener: RawFd, refusal: &[u8]) -> u64 {
    let mut spare = SPARE.lock();
    drop(spare.take());
    let mut refused = 0;
    while refused < SHED_BATCH_MAX {
        // SAFETY: accept4 on a listening descriptor we own; null address pointers are allowed.
        let client = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if client < 0 {
            // EAGAIN: the backlog is empty; EMFILE: another thread took the freed descriptor.
            break;
        }
        refuse_and_close(client, refusal);
        refused += 1;
    }
    *spare = File::open("/dev/null").ok();
    refused
}

/// Best effort: one non-blocking send, and reading what the client already sent so the close is a FIN
/// (closing with unread input would reset the connection and could discard the message).
fn refuse_and_close(client: RawFd, refusal: &[u8]) {
    let mut unread = [0u8; 4096];
    // SAFETY: `client` is a socket we just accepted and own; the buffers outlive the calls.
    unsafe {
        libc::send(
            client,
            refusal.as_ptr().cast(),
            refusal.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
        libc::recv(
            client,
            unread.as_mut_ptr().cast(),
            unread.len(),
            libc::MSG_DONTWAIT,
        );
        libc::close(client);
    }
}
