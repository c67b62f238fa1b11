//! The SQLite file holds stored responses and whatever the application keeps beside them: only
//! its owner may read it. SQLite creates the WAL and shared-memory files
//! with the main file's mode, so the main file is created 0600 before
//! SQLite opens it; a file (or WAL, SHM) that other users can read is
//! tightened to its owner's bits, with a log line.

use std::io;
use std::path::Path;

use tracing::warn;

/// Creates `path` with mode 0600 if it is missing, else takes the group's
/// and others' bits off it and off its `-wal` and `-shm` files.
#[cfg(unix)]
pub(super) fn ensure_private(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};

    if path.as_os_str() == ":memory:" || path.as_os_str().is_empty() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => return Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = Path::new(&file);
        let mode = match std::fs::metadata(file) {
            Ok(meta) => meta.permissions().mode() & 0o777,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        if mode & 0o077 != 0 {
            let tightened = mode & 0o700;
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(tightened))?;
            warn!(
                file = %file.display(),
                from = format!("{mode:04o}"),
                to = format!("{tightened:04o}"),
                "the SQLite file was readable by other users: mode tightened"
            );
        }
    }
    Ok(())
}

/// Elsewhere the platform's defaults apply.
#[cfg(not(unix))]
pub(super) fn ensure_private(_: &Path) -> io::Result<()> {
    Ok(())
}
