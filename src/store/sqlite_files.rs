//! The files behind a SQLite database, as this user can use them: the database, its `-wal`,
//! `-shm` and `-journal` files, and the directory SQLite creates them in. Used to decide when a
//! read-only open is safe, and to name the file at fault (and its fix) when SQLite only says
//! "attempt to write a readonly database".

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags};

/// SQLite's sidecar files next to a database: what they contain, SQLite reads as the database.
pub const SIDECARS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// `<db><suffix>`, e.g. `runner.db-wal`.
pub fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The directory SQLite creates the sidecar files in.
pub fn directory(db: &Path) -> PathBuf {
    match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn can(path: &Path, mode: AccessFlags) -> bool {
    access(path, mode).is_ok()
}

pub fn writable(path: &Path) -> bool {
    can(path, AccessFlags::W_OK)
}

/// Bytes in the `-wal` file: committed changes not yet copied into the database file.
pub fn wal_bytes(db: &Path) -> u64 {
    std::fs::metadata(sidecar(db, "-wal")).map_or(0, |m| m.len())
}

/// Whether SQLite's immutable mode (no locks, no `-shm`, the `-wal` ignored) reads everything
/// committed: only when the `-wal` holds nothing. (A writer that starts meanwhile writes to a new
/// `-wal`, not into the file being read, until a checkpoint; reads are short.)
pub fn immutable_read_sees_everything(db: &Path) -> bool {
    wal_bytes(db) == 0
}

/// Whether anyone has the database open now, as far as the files show: an open WAL database
/// keeps its `-shm` file.
pub fn maybe_in_use(db: &Path) -> bool {
    sidecar(db, "-shm").exists()
}

/// `mode 0444, owner uid 65534`.
fn describe(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => format!("mode {:04o}, owner uid {}", m.mode() & 0o7777, m.uid()),
        Err(e) => e.to_string(),
    }
}

/// What stops this user from writing a file of theirs whose permission bits allow it.
const NOT_THE_MODE: &str = "its mode allows writing, so something else forbids it: an immutable \
                            attribute (`lsattr`) or a read-only mount";

/// How this user gets write access to `path`: `chmod` what is theirs, else its owner must act.
fn make_writable(path: &Path) -> String {
    let me = nix::unistd::geteuid().as_raw();
    match std::fs::metadata(path) {
        // Permission bits that already allow it: an immutable attribute or a read-only mount.
        Ok(m) if m.uid() == me && m.mode() & 0o200 != 0 => NOT_THE_MODE.to_string(),
        Ok(m) if m.uid() == me => format!("`chmod u+w {}`", path.display()),
        Ok(m) => format!(
            "it belongs to uid {}: run runner as that user, or have them make it writable by this user",
            m.uid()
        ),
        Err(_) => "make it writable by this user".to_string(),
    }
}

/// A `-wal` or `-shm` file this user cannot read (while it can read the database): SQLite reads
/// both as part of the database. `None` when there is none. (They take the database's mode when
/// SQLite creates them, and an idle tick, which leaves them, gives them the database's mode
/// again: see `match_database_mode`.)
pub fn unreadable_sidecar(db: &Path) -> Option<String> {
    let unreadable = ["-wal", "-shm"]
        .map(|suffix| sidecar(db, suffix))
        .into_iter()
        .find(|file| file.exists() && !can(file, AccessFlags::R_OK))?;
    Some(format!(
        "cannot read {}: {} is not readable by this user ({}), and SQLite reads it as part of the \
         database; the next `runner tick` gives it the database's mode ({}), or have its owner do \
         that with `chmod`",
        db.display(),
        unreadable.display(),
        describe(&unreadable),
        describe(db),
    ))
}

/// Give the `-wal` and `-shm` files the database's permission bits, as SQLite does when it
/// creates them, for files that outlive the connection (an idle tick leaves them, see
/// `SqliteStore`'s `Drop`): whoever may read the database may read them too, after a `chmod` of
/// the database as well, and nobody else. Best effort: a reader says what to fix.
pub fn match_database_mode(db: &Path) {
    let Ok(mode) = std::fs::metadata(db).map(|m| m.mode() & 0o777) else {
        return;
    };
    for suffix in ["-wal", "-shm"] {
        let file = sidecar(db, suffix);
        // Not through a symlink: only a regular file of ours is SQLite's.
        if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file() && m.mode() & 0o777 != mode) {
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode));
        }
    }
}

/// Why reading fails where SQLite must create `-shm` in a directory this user cannot write, and
/// the `-wal` holds changes that reading the database file alone would miss. `None` when that is
/// not the situation.
pub fn unreadable_wal(db: &Path) -> Option<String> {
    let dir = directory(db);
    let shm = sidecar(db, "-shm");
    let wal = wal_bytes(db);
    if writable(&dir) || shm.exists() || wal == 0 {
        return None;
    }
    Some(format!(
        "cannot read {}: directory {} is not writable by this user ({}), and SQLite needs to create {} \
         there to read a database in WAL mode; {} holds {wal} bytes of changes not yet in the \
         database file, so the file alone would show an old state. Make the directory writable \
         ({}); the next runner command that can write there folds those changes into the database",
        db.display(),
        dir.display(),
        describe(&dir),
        shm.display(),
        sidecar(db, "-wal").display(),
        make_writable(&dir),
    ))
}

/// What stops this user from writing the database, each naming the file or directory at fault
/// and its fix. Empty when nothing visible does (e.g. the disk is mounted read-only).
pub fn write_problems(db: &Path) -> Vec<String> {
    let me = nix::unistd::geteuid().as_raw();
    let mut problems = Vec::new();
    if db.exists() && !writable(db) {
        problems.push(format!(
            "{} is not writable by this user ({}): {}",
            db.display(),
            describe(db),
            make_writable(db)
        ));
    }
    for suffix in SIDECARS {
        let file = sidecar(db, suffix);
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        if can(&file, AccessFlags::R_OK | AccessFlags::W_OK) {
            continue;
        }
        let fix = if meta.uid() == me && meta.mode() & 0o600 == 0o600 {
            NOT_THE_MODE.to_string()
        } else if meta.uid() == me {
            format!("`chmod 600 {}`", file.display())
        } else if suffix == "-shm" {
            format!(
                "it belongs to uid {}: remove it while no runner uses the database (it holds no \
                 data; SQLite creates it again), or have root `chown` it to the database's owner",
                meta.uid()
            )
        } else {
            format!(
                "it belongs to uid {}: have root `chown` it to the database's owner (do not delete \
                 it: it may hold committed changes)",
                meta.uid()
            )
        };
        problems.push(format!(
            "{} is not writable by this user ({}), and SQLite must write it to change the database: {fix}",
            file.display(),
            describe(&file)
        ));
    }
    let dir = directory(db);
    if !writable(&dir) {
        problems.push(format!(
            "directory {} is not writable by this user ({}), and SQLite creates the database's -wal \
             and -shm files there: {}",
            dir.display(),
            describe(&dir),
            make_writable(&dir)
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_sit_next_to_the_database() {
        assert_eq!(
            sidecar(Path::new("/srv/runner.db"), "-shm"),
            PathBuf::from("/srv/runner.db-shm")
        );
        assert_eq!(directory(Path::new("runner.db")), PathBuf::from("."));
        assert_eq!(
            directory(Path::new("/srv/runner.db")),
            PathBuf::from("/srv")
        );
    }

    #[test]
    fn a_writable_database_has_no_write_problems() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("runner.db");
        std::fs::write(&db, b"").expect("write");
        assert!(write_problems(&db).is_empty());
        assert!(immutable_read_sees_everything(&db));
        std::fs::write(sidecar(&db, "-wal"), b"frames").expect("write");
        assert!(!immutable_read_sees_everything(&db));
    }
}
