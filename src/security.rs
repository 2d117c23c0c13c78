//! The database is the crontab: whoever can write it decides what `runner` executes. Like cron
//! with crontabs, refuse to execute jobs from a database that someone else could have written.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::Result;

use crate::exit::Failure;

/// Refuse a database file that is group- or world-writable or owned by another user, or that
/// lives in a directory others can write (unless sticky, like /tmp) or that another user owns.
pub fn check_executable_database(path: &Path) -> Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let shown = path.display();
    let file = std::fs::metadata(path)
        .map_err(|e| Failure::database(format!("cannot inspect {shown}: {e}")))?;
    if file.uid() != me {
        return Err(refuse(format!(
            "{shown} is owned by uid {}, not by you (uid {me}); run runner as its owner, or `chown {me} {shown}`",
            file.uid()
        )));
    }
    if file.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "{shown} is writable by group or others (mode {:04o}); fix it with `chmod 600 {shown}`",
            file.mode() & 0o7777
        )));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir_meta = std::fs::metadata(dir)
        .map_err(|e| Failure::database(format!("cannot inspect {}: {e}", dir.display())))?;
    let sticky = dir_meta.mode() & 0o1000 != 0;
    if dir_meta.uid() != me && dir_meta.uid() != 0 {
        return Err(refuse(format!(
            "its directory {} is owned by uid {}, who could replace the database; move it to a directory you own",
            dir.display(),
            dir_meta.uid()
        )));
    }
    if dir_meta.mode() & 0o022 != 0 && !sticky {
        return Err(refuse(format!(
            "its directory {} is writable by group or others (mode {:04o}), who could replace the database; \
             fix it with `chmod go-w {}`",
            dir.display(),
            dir_meta.mode() & 0o7777,
            dir.display()
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
    fn writable_directory_is_refused_unless_sticky() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = db_in(dir.path(), 0o600);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        assert!(check_executable_database(&db).is_err());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        assert!(check_executable_database(&db).is_ok());
    }
}
