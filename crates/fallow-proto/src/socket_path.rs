//! Where a fallow server's Unix socket is when nobody names one. The server binds there by default and
//! every tool and client of the workspace looks there (or at `$FALLOW_SOCKET`), so the rule lives here
//! once; `python/fallow/socket_path.py` mirrors it and a test compares the two.
//!
//! The default path for RESP port P:
//! - `$XDG_RUNTIME_DIR/fallow/fallow-P.sock` when `XDG_RUNTIME_DIR` is set (an absolute path);
//! - `/run/fallow/fallow-P.sock` for root without it;
//! - `${TMPDIR:-/tmp}/fallow-UID/fallow-P.sock` for any other user without it (a directory of the user's
//!   own, so the shared temporary directory holds no socket others could replace).
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable that tells tools and clients where the server's socket is.
pub const SOCKET_ENV: &str = "FALLOW_SOCKET";

/// What the rule reads from the process, gathered so tests can pass any combination.
#[derive(Clone, Debug, Default)]
pub struct SocketEnvironment {
    pub fallow_socket: Option<OsString>,
    pub xdg_runtime_dir: Option<OsString>,
    pub tmpdir: Option<OsString>,
    /// Effective user id.
    pub uid: u32,
}

impl SocketEnvironment {
    /// This process's environment and effective user.
    pub fn current() -> SocketEnvironment {
        SocketEnvironment {
            fallow_socket: std::env::var_os(SOCKET_ENV),
            xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR"),
            tmpdir: std::env::var_os("TMPDIR"),
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: unsafe { libc::geteuid() },
        }
    }
}

/// An absolute directory from an environment variable; empty or relative values are ignored, as the
/// XDG base directory specification asks.
fn absolute_dir(value: &Option<OsString>) -> Option<&Path> {
    let path = Path::new(value.as_deref()?);
    path.is_absolute().then_some(path)
}

/// The default socket path of the server on `port` in `environment` (ignores `FALLOW_SOCKET`).
pub fn default_socket_path_in(environment: &SocketEnvironment, port: u16) -> PathBuf {
    let file = format!("fallow-{port}.sock");
    if let Some(runtime) = absolute_dir(&environment.xdg_runtime_dir) {
        return runtime.join("fallow").join(file);
    }
    if environment.uid == 0 {
        return Path::new("/run/fallow").join(file);
    }
    let temporary = absolute_dir(&environment.tmpdir).unwrap_or(Path::new("/tmp"));
    temporary
        .join(format!("fallow-{}", environment.uid))
        .join(file)
}

/// Where a tool or client looks for the server on `port`: `$FALLOW_SOCKET` when set, else the default.
pub fn socket_path_in(environment: &SocketEnvironment, port: u16) -> PathBuf {
    match &environment.fallow_socket {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => default_socket_path_in(environment, port),
    }
}

/// The default socket path of the server on `port` for this process.
pub fn default_socket_path(port: u16) -> PathBuf {
    default_socket_path_in(&SocketEnvironment::current(), port)
}

/// Where a tool or client of this process looks for the server on `port`.
pub fn socket_path(port: u16) -> PathBuf {
    socket_path_in(&SocketEnvironment::current(), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(xdg: Option<&str>, tmpdir: Option<&str>, uid: u32) -> SocketEnvironment {
        SocketEnvironment {
            fallow_socket: None,
            xdg_runtime_dir: xdg.map(OsString::from),
            tmpdir: tmpdir.map(OsString::from),
            uid,
        }
    }

    #[test]
    fn xdg_runtime_dir_comes_first() {
        let env = environment(Some("/run/user/1000"), Some("/var/tmp"), 1000);
        assert_eq!(
            default_socket_path_in(&env, 6379),
            Path::new("/run/user/1000/fallow/fallow-6379.sock")
        );
        let root = environment(Some("/run/user/0"), None, 0);
        assert_eq!(
            default_socket_path_in(&root, 7000),
            Path::new("/run/user/0/fallow/fallow-7000.sock")
        );
    }

    #[test]
    fn root_without_xdg_uses_run() {
        let env = environment(None, Some("/var/tmp"), 0);
        assert_eq!(
            default_socket_path_in(&env, 6379),
            Path::new("/run/fallow/fallow-6379.sock")
        );
    }

    #[test]
    fn other_users_without_xdg_get_a_directory_of_their_own() {
        assert_eq!(
            default_socket_path_in(&environment(None, None, 1000), 6380),
            Path::new("/tmp/fallow-1000/fallow-6380.sock")
        );
        assert_eq!(
            default_socket_path_in(&environment(None, Some("/var/tmp"), 1000), 6380),
            Path::new("/var/tmp/fallow-1000/fallow-6380.sock")
        );
    }

    #[test]
    fn empty_or_relative_directories_are_ignored() {
        assert_eq!(
            default_socket_path_in(&environment(Some(""), Some("tmp"), 1000), 1),
            Path::new("/tmp/fallow-1000/fallow-1.sock")
        );
        assert_eq!(
            default_socket_path_in(&environment(Some("run"), None, 0), 1),
            Path::new("/run/fallow/fallow-1.sock")
        );
    }

    #[test]
    fn fallow_socket_overrides_for_tools() {
        let mut env = environment(Some("/run/user/5"), None, 5);
        env.fallow_socket = Some("/srv/fallow.sock".into());
        assert_eq!(socket_path_in(&env, 6379), Path::new("/srv/fallow.sock"));
        assert_eq!(
            default_socket_path_in(&env, 6379),
            Path::new("/run/user/5/fallow/fallow-6379.sock"),
            "the server's default ignores FALLOW_SOCKET"
        );
        env.fallow_socket = Some("".into());
        assert_eq!(
            socket_path_in(&env, 6379),
            Path::new("/run/user/5/fallow/fallow-6379.sock"),
            "an empty FALLOW_SOCKET is unset"
        );
    }
}
