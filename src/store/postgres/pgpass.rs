//! The password file, as libpq reads it (`PGPASSFILE`, else `~/.pgpass`): the `postgres` crate
//! reads neither it nor `PGPASSWORD`, and no well-kept crate does this one small thing, so here
//! it is, following libpq's rules (see "The Password File" in the PostgreSQL manual):
//!
//! - one entry a line, `hostname:port:database:username:password`; lines starting with `#` are
//!   comments; `\:` and `\\` stand for `:` and `\`;
//! - `*` in any of the first four fields matches anything; the first matching line wins;
//! - a connection through a Unix socket matches the host name `localhost`;
//! - a file that group or others can read or write is ignored, with a warning, as libpq does.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a connection is, for matching against the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    /// The host name, or `localhost` for a Unix socket.
    pub host: &'a str,
    pub port: u16,
    pub database: &'a str,
    pub user: &'a str,
}

/// The password file libpq would read: `PGPASSFILE`, else `~/.pgpass`.
pub fn default_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PGPASSFILE").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| Path::new(&home).join(".pgpass"))
}

/// The password for `target` from the file at `path`, if the file exists, is private and has a
/// matching line. A file others can read is ignored (the warning says why).
pub fn lookup(path: &Path, target: &Target<'_>) -> Option<String> {
    let metadata = std::fs::metadata(path).ok()?;
    if !metadata.is_file() {
        crate::complain!(
            "runner: warning: password file {} is not a plain file; ignoring it",
            path.display()
        );
        return None;
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        crate::complain!(
            "runner: warning: password file {} has group or world access; ignoring it \
             (permissions should be u=rw (0600) or less)",
            path.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    find(&text, target)
}

/// The password of the first line of `text` that matches `target`.
pub fn find(text: &str, target: &Target<'_>) -> Option<String> {
    let port = target.port.to_string();
    let wanted = [target.host, port.as_str(), target.database, target.user];
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = split_fields(line)?;
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, value)| field == "*" || field == value);
            matches.then(|| fields[4].clone())
        })
        .filter(|password| !password.is_empty())
}

/// The five fields of a line, unescaped; `None` for a line with fewer (libpq skips it). Like
/// libpq, the password ends at the next unescaped `:`.
fn split_fields(line: &str) -> Option<[String; 5]> {
    let mut fields: Vec<String> = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => fields.last_mut()?.push(escaped),
                None => fields.last_mut()?.push('\\'),
            },
            ':' if fields.len() == 5 => break,
            ':' => fields.push(String::new()),
            other => fields.last_mut()?.push(other),
        }
    }
    fields.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Target<'static> = Target {
        host: "db.example",
        port: 5432,
        database: "runner",
        user: "app",
    };

    #[test]
    fn the_first_matching_line_wins() {
        let text = "# a comment\n\
                    other:5432:runner:app:wrong\n\
                    db.example:5432:runner:app:first\n\
                    *:*:*:*:second\n";
        assert_eq!(find(text, &TARGET).as_deref(), Some("first"));
        let elsewhere = Target {
            host: "db2",
            ..TARGET
        };
        assert_eq!(find(text, &elsewhere).as_deref(), Some("second"));
    }

    #[test]
    fn wildcards_match_any_field_and_the_port_is_compared_as_text() {
        let text = "*:6543:*:app:on-6543\ndb.example:*:runner:*:any-port\n";
        assert_eq!(find(text, &TARGET).as_deref(), Some("any-port"));
        let on_6543 = Target {
            port: 6543,
            ..TARGET
        };
        assert_eq!(find(text, &on_6543).as_deref(), Some("on-6543"));
        let stranger = Target {
            user: "someone",
            port: 1,
            ..TARGET
        };
        assert_eq!(find(text, &stranger).as_deref(), Some("any-port"));
    }

    #[test]
    fn escapes_and_colons_follow_libpq() {
        // `\:` and `\\` in any field; an unescaped `:` ends the password.
        let text = r"db.example:5432:runner:app:pa\:ss\\word:ignored";
        assert_eq!(find(text, &TARGET).as_deref(), Some(r"pa:ss\word"));
        let odd_user = Target {
            user: "a:b",
            ..TARGET
        };
        assert_eq!(
            find(r"*:*:*:a\:b:secret", &odd_user).as_deref(),
            Some("secret")
        );
    }

    #[test]
    fn short_lines_comments_and_empty_passwords_give_nothing() {
        assert_eq!(find("db.example:5432:runner:app", &TARGET), None);
        assert_eq!(find("#db.example:5432:runner:app:x", &TARGET), None);
        assert_eq!(find("db.example:5432:runner:app:", &TARGET), None);
        assert_eq!(find("", &TARGET), None);
    }

    #[test]
    fn a_file_others_can_read_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(lookup(&path, &TARGET).as_deref(), Some("secret"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(lookup(&path, &TARGET), None);
        assert_eq!(lookup(&dir.path().join("missing"), &TARGET), None);
    }
}
