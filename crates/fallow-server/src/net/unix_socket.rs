//! The RESP Unix socket: where it goes (`Config::unix_socket_path`, the rule tools share), making its
//! directory, never taking over a live server's socket, removing only a stale one, and removing it at
//! shutdown only while it is still ours.
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};

/// How long the liveness probe of an existing socket waits for a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The socket file a bind created, to remove that file (and no other) at shutdown.
pub struct SocketFile {
    path: PathBuf,
    /// (device, inode) of the file bind created.
    identity: (u64, u64),
}

/// Binds the socket at `path`. `from_default`: the path is the default one, so a directory that already
/// exists must be this user's and not writable by others (it may be under a shared /tmp).
/// `perm`: the socket's permission bits (0: the umask's).
pub async fn bind(
    path: &Path,
    perm: u32,
    from_default: bool,
) -> io::Result<(UnixListener, SocketFile)> {
    prepare_directory(path, perm, from_default)?;
    clear_stale(path).await?;
    let listener = UnixListener::bind(path)?;
    if perm != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm))?;
    }
    let metadata = std::fs::symlink_metadata(path)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        identity: (metadata.dev(), metadata.ino()),
    };
    Ok((listener, file))
}

impl SocketFile {
    /// Removes the socket file unless something else has replaced it since.
    pub fn remove(&self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|metadata| (metadata.dev(), metadata.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The mode of a directory fallow creates for its socket: the owner's, plus search permission for the
/// group or others exactly when the socket's permissions let them connect (0: as the umask allows).
pub fn directory_mode(perm: u32) -> u32 {
    if perm == 0 {
        return 0o755;
    }
    let mut mode = 0o700;
    if perm & 0o060 != 0 {
        mode |= 0o010;
    }
    if perm & 0o006 != 0 {
        mode |= 0o001;
    }
    mode
}

fn prepare_directory(path: &Path, perm: u32, from_default: bool) -> io::Result<()> {
    let Some(directory) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) else {
        return Ok(());
    };
    if !directory.exists() {
        let mode = directory_mode(perm);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(directory)?;
        // The umask may have taken bits away; the mode is set exactly.
        return std::fs::set_permissions(directory, std::fs::Permissions::from_mode(mode));
    }
    if from_default {
        check_private_directory(directory)?;
    }
    Ok(())
}

/// A default directory that exists already must be ours and closed to writers other than us, or
/// someone else could have put it there to replace our socket.
fn check_private_directory(directory: &Path) -> io::Result<()> {
    let metadata = std::fs::symlink_metadata(directory)?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !metadata.is_dir() || metadata.uid() != uid || metadata.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a directory of this user closed to other writers; refusing to put the socket \
there (choose one with --unixsocket)",
            directory.display()
        )));
    }
    Ok(())
}

/// An existing file at `path`: a live server's socket stops the start, a stale socket (connection
/// refused) is removed, anything that is not a socket is left alone and stops the start.
async fn clear_stale(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !metadata.file_type().is_socket() {
        return Err(io::Error::other(format!(
            "{} exists and is not a socket; refusing to remove it (choose another path with --unixsocket)",
            path.display()
        )));
    }
    let live = || {
        io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another server is listening on {}; use --unixsocket to choose another path",
                path.display()
            ),
        )
    };
    match tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(path)).await {
        // A full backlog (WouldBlock) or a slow answer is a live server too.
        Ok(Ok(_)) | Err(_) => Err(live()),
        Ok(Err(error)) if error.kind() == io::ErrorKind::WouldBlock => Err(live()),
        Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing a stale Unix socket");
            std::fs::remove_file(path)
        }
        Ok(Err(error)) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(Err(error)) => Err(io::Error::other(format!(
            "cannot tell whether {} is in use: {error}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_admits_whom_the_socket_admits() {
        assert_eq!(directory_mode(0o700), 0o700);
        assert_eq!(directory_mode(0o770), 0o710);
        assert_eq!(directory_mode(0o777), 0o711);
        assert_eq!(directory_mode(0o766), 0o711);
        assert_eq!(directory_mode(0), 0o755);
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fallow-unix-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn live_stale_and_regular_files() {
        let dir = scratch("cases");
        let path = dir.join("s.sock");
        let (first, _) = bind(&path, 0o700, false).await.unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "the directory is created private");
        let refused = bind(&path, 0o700, false).await.err().unwrap();
        assert!(refused.to_string().contains("another server is listening"));
        assert!(path.exists(), "the live socket is kept");
        drop(first);
        let (_second, second) = bind(&path, 0o770, false).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(
            mode, 0o770,
            "the stale socket was replaced, with unixsocketperm applied"
        );
        second.remove();
        assert!(!path.exists());
        std::fs::write(&path, b"data").unwrap();
        let refused = bind(&path, 0o700, false).await.err().unwrap();
        assert!(refused.to_string().contains("not a socket"));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn shutdown_leaves_a_replaced_socket() {
        let dir = scratch("replaced");
        let path = dir.join("s.sock");
        let (_first, first) = bind(&path, 0o700, false).await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let (_second, second) = bind(&path, 0o700, false).await.unwrap();
        first.remove();
        assert!(
            path.exists(),
            "the first server must not remove the second's socket"
        );
        second.remove();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_default_directory_open_to_others_is_refused() {
        let dir = scratch("open");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = bind(&dir.join("s.sock"), 0o700, true).await.err().unwrap();
        assert!(refused.to_string().contains("refusing"));
        assert!(bind(&dir.join("s.sock"), 0o700, false).await.is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
