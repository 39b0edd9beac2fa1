//! Diagnostics on standard error, written with a raw system call (`eprintln!` would go through the
//! interposed `write`). `FALLOW_PRELOAD_DEBUG=1` turns on one line per redirected or refused connection.
use std::sync::OnceLock;

/// The environment variable that turns on the connection log.
pub const DEBUG_ENV: &str = "FALLOW_PRELOAD_DEBUG";

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os(DEBUG_ENV).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Writes the parts and a newline to standard error in one system call.
pub fn always(parts: &[&str]) {
    let mut line = String::with_capacity(128);
    for part in parts {
        line.push_str(part);
    }
    line.push('\n');
    // SAFETY: writing a valid buffer to fd 2; a failure leaves nothing to do.
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

/// As `always`, when the debug log is on.
pub fn debug(parts: &[&str]) {
    if enabled() {
        always(parts);
    }
}
