//! The database is the crontab: whoever can write it decides what `runner` executes. Like cron
//! with crontabs, refuse to execute jobs from a database that someone else could have written.
//!
//! "Written" includes SQLite's sidecar files: in WAL mode, on open SQLite replays whatever valid
//! frames it finds in `<db>-wal`, whoever owns that file. So the directory must be writable by
//! nobody else, sticky bit or not (in a sticky world-writable directory like /tmp anyone can
//! create `runner.db-wal` while the database is closed, and with it replace every page of the
//! database), and existing sidecar files must be ours and private too.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::Result;

use crate::exit::Failure;
use crate::store::sqlite_files::{sidecar, SIDECARS};

/// Refuse a database file that is group- or world-writable or owned by another user, that lives
/// in a directory others can write (sticky or not) or that another user (other than root) owns,
/// or whose `-wal`/`-shm`/`-journal` file is not a private regular file of ours. Symlinks are
/// resolved first: SQLite opens, and puts its sidecar files next to, the file they point to.
pub fn check_executable_database(path: &Path) -> Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let real = std::fs::canonicalize(path)
        .map_err(|e| Failure::database(format!("cannot inspect {}: {e}", path.display())))?;
    let shown = if real == path {
        path.display().to_string()
    } else {
        format!("{} (which is {})", path.display(), real.display())
    };
    let file = std::fs::metadata(&real)
        .map_err(|e| Failure::database(format!("cannot inspect {shown}: {e}")))?;
    let fix = real.display();
    if file.uid() != me {
        return Err(refuse(format!(
            "{shown} is owned by uid {}, not by you (uid {me}); run runner as its owner, or `chown {me} {fix}`",
            file.uid()
        )));
    }
    if file.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "{shown} is writable by group or others (mode {:04o}); fix it with `chmod 600 {fix}`",
            file.mode() & 0o7777
        )));
    }
    let dir = real
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    let dir_meta = std::fs::metadata(dir)
        .map_err(|e| Failure::database(format!("cannot inspect {}: {e}", dir.display())))?;
    if dir_meta.uid() != me && dir_meta.uid() != 0 {
        return Err(refuse(format!(
            "its directory {} is owned by uid {}, who could replace the database; move it to a directory you own",
            dir.display(),
            dir_meta.uid()
        )));
    }
    if dir_meta.mode() & 0o022 != 0 {
        // A shared sticky directory (/tmp) must not be chmod-ed: the only fix is to move.
        let fix = if dir_meta.mode() & 0o1000 != 0 {
            " (the sticky bit does not help: others can still create the database's -wal file, \
             which SQLite reads as part of the database); move the database to a directory only you \
             can write (e.g. ~/.local/state/runner)"
                .to_string()
        } else {
            format!(
                "; move the database to a directory only you can write (e.g. ~/.local/state/runner), \
                 or fix the directory with `chmod go-w {}`",
                dir.display()
            )
        };
        return Err(refuse(format!(
            "its directory {} is writable by group or others (mode {:04o}), who could replace the database{fix}",
            dir.display(),
            dir_meta.mode() & 0o7777,
        )));
    }
    for suffix in SIDECARS {
        check_sidecar(&sidecar(&real, suffix), me)?;
    }
    Ok(())
}

/// A sidecar file that exists must be a regular file of ours that nobody else can write.
fn check_sidecar(path: &Path, me: u32) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(()); // absent: SQLite creates it with the database's mode, in our directory
    };
    let shown = path.display();
    if !meta.file_type().is_file() {
        return Err(refuse(format!(
            "{shown} is not a regular file; remove it (SQLite reads it as part of the database)"
        )));
    }
    if meta.uid() != me {
        return Err(refuse(format!(
            "{shown} is owned by uid {}, not by you (uid {me}); SQLite reads it as part of the database: \
             remove it if no runner is running",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "{shown} is writable by group or others (mode {:04o}); SQLite reads it as part of the database: \
             fix it with `chmod 600 {shown}`",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

fn refuse(reason: String) -> anyhow::Error {
    Failure::database(format!(
        "refusing to execute jobs from this database: {reason} (anyone who can write the database can \
         make runner execute commands as you)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn db_in(dir: &Path, mode: u32) -> std::path::PathBuf {
        let path = dir.join("runner.db");
        std::fs::write(&path, b"").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn private_file_in_private_dir_is_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(check_executable_database(&db_in(dir.path(), 0o600)).is_ok());
        assert!(check_executable_database(&db_in(dir.path(), 0o644)).is_ok());
    }

    #[test]
    fn group_or_world_writable_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for mode in [0o620, 0o602, 0o666] {
            let error = check_executable_database(&db_in(dir.path(), mode)).expect_err("refused");
            assert!(error.to_string().contains("chmod 600"), "{error}");
        }
    }

    #[test]
    fn writable_directory_is_refused_even_if_sticky() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = db_in(dir.path(), 0o600);
        for mode in [0o777, 0o1777, 0o770] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let error = check_executable_database(&db)
                .expect_err("refused")
                .to_string();
            assert!(error.contains("move the database"), "{error}");
            if mode & 0o1000 == 0 {
                assert!(error.contains("chmod go-w"), "{error}");
            } else {
                // A shared sticky directory such as /tmp must never be chmod-ed: only moving fixes it.
                assert!(!error.contains("chmod"), "{error}");
            }
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        assert!(check_executable_database(&db).is_ok());
    }

    #[test]
    fn sidecar_files_must_be_private_regular_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = db_in(dir.path(), 0o600);
        let wal = dir.path().join("runner.db-wal");
        std::fs::write(&wal, b"").expect("write");
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(check_executable_database(&db).is_ok());
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let error = check_executable_database(&db).expect_err("refused");
        assert!(error.to_string().contains("runner.db-wal"), "{error}");
        std::fs::remove_file(&wal).expect("rm");
        std::os::unix::fs::symlink("/dev/null", dir.path().join("runner.db-shm")).expect("symlink");
        let error = check_executable_database(&db).expect_err("refused");
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn symlinks_are_judged_by_their_target() {
        let private = tempfile::tempdir().expect("tempdir");
        let shared = tempfile::tempdir().expect("tempdir");
        let target = db_in(shared.path(), 0o600);
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        let link = private.path().join("runner.db");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let error = check_executable_database(&link).expect_err("refused");
        let shared_dir = std::fs::canonicalize(shared.path()).expect("canonicalize");
        assert!(
            error
                .to_string()
                .contains(&shared_dir.display().to_string()),
            "{error}"
        );
    }
}
