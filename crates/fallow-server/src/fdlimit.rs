//! The open-file limit and `maxclients`, as Redis handles them: every client is a descriptor, and the server
//! keeps `RESERVED_FDS` for itself (listeners, epoll, the spare descriptor, /proc reads, the log). At start
//! the soft `RLIMIT_NOFILE` is raised toward `maxclients + RESERVED_FDS`, up to the hard limit; when that is
//! not enough `maxclients` is lowered to what fits, with one warning. CONFIG SET maxclients does the same
//! but refuses instead of lowering.
use std::io;

/// Descriptors kept for the server's own use (Redis's CONFIG_MIN_RESERVED_FDS).
pub const RESERVED_FDS: u64 = 32;

fn nofile_limits() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

fn set_soft_nofile(soft: u64, hard: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How many clients an open-file limit holds, at most `maxclients`.
pub fn clients_fitting(open_files_limit: u64, maxclients: usize) -> usize {
    let room = open_files_limit.saturating_sub(RESERVED_FDS);
    room.min(maxclients as u64) as usize
}

/// What `fit` found: the soft limit now in force and the clients it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    pub open_files_limit: u64,
    pub maxclients: usize,
}

/// Raises the soft open-file limit toward what `maxclients` needs (never above the hard limit, never
/// lowering it) and says how many clients the limit then holds.
pub fn fit(maxclients: usize) -> io::Result<Fit> {
    let needed = (maxclients as u64).saturating_add(RESERVED_FDS);
    let (soft, hard) = nofile_limits()?;
    if soft < needed {
        // RLIM_INFINITY is u64::MAX, so `min` also covers an unlimited hard limit.
        let target = needed.min(hard);
        if target > soft {
            if let Err(error) = set_soft_nofile(target, hard) {
                tracing::debug!(%error, target, "could not raise the open-file limit");
            }
        }
    }
    let (soft, _) = nofile_limits()?;
    Ok(Fit {
        open_files_limit: soft,
        maxclients: clients_fitting(soft, maxclients),
    })
}

/// At start: fits `maxclients` to the open-file limit, lowering it with one warning (Redis's text) when the
/// hard limit is too low. Err when not even one client fits.
pub fn fit_at_start(maxclients: &mut usize) -> Result<(), String> {
    let requested = *maxclients;
    let fit =
        fit(requested).map_err(|error| format!("cannot read the open-file limit: {error}"))?;
    if fit.maxclients == requested {
        return Ok(());
    }
    if fit.maxclients == 0 {
        return Err(format!(
            "Your current 'ulimit -n' of {} is not enough for the server to start. Please increase your \
open file limit to at least {}. Exiting.",
            fit.open_files_limit,
            RESERVED_FDS + 1
        ));
    }
    tracing::warn!(
        "You requested maxclients of {requested} requiring at least {} max file descriptors. Current \
maximum open files is {} (the hard limit). maxclients has been reduced to {} to compensate for low \
ulimit. If you need higher maxclients increase 'ulimit -n'.",
        requested as u64 + RESERVED_FDS,
        fit.open_files_limit,
        fit.maxclients
    );
    *maxclients = fit.maxclients;
    Ok(())
}

/// For CONFIG SET maxclients: Err(Redis's message) when the open-file limit cannot be raised enough.
pub fn check_runtime(maxclients: usize) -> Result<(), String> {
    let fit =
        fit(maxclients).map_err(|error| format!("cannot read the open-file limit: {error}"))?;
    if fit.maxclients < maxclients {
        return Err(format!(
            "The operating system is not able to handle the specified number of clients, try with {}",
            fit.maxclients
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_fit_after_the_reserve() {
        assert_eq!(clients_fitting(256, 10_000), 224);
        assert_eq!(clients_fitting(64, 10_000), 32);
        assert_eq!(clients_fitting(1 << 20, 10_000), 10_000);
        assert_eq!(clients_fitting(10_032, 10_000), 10_000);
        assert_eq!(clients_fitting(20, 10_000), 0);
        assert_eq!(clients_fitting(u64::MAX, 10_000), 10_000, "unlimited");
    }

    #[test]
    fn fit_within_this_process_limit() {
        // Asking for what already fits changes nothing and reports the request back.
        let (soft, _) = nofile_limits().unwrap();
        let small = clients_fitting(soft, 8);
        assert_eq!(fit(small).unwrap().maxclients, small);
        assert!(check_runtime(small).is_ok());
        let huge = fit(usize::MAX / 2).unwrap();
        assert!(huge.maxclients < usize::MAX / 2);
        assert!(check_runtime(usize::MAX / 2)
            .unwrap_err()
            .contains("try with"));
    }
}
