//! `runner init`: create or migrate the database, and say which it did.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Result;

use super::{emit, Ctx};
use crate::store::{Location, OpenMode, SchemaVersions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print nothing on success (what was created or migrated is otherwise printed).
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let existed = match &ctx.location {
        Location::Sqlite(path) => path.exists(),
        Location::Postgres(_) => true,
    };
    let store = ctx.open(OpenMode::CreateIfMissing)?;
    ctx.warn_if_unsafe_for_tick();
    if args.quiet {
        return Ok(());
    }
    let what = match &ctx.location {
        Location::Sqlite(path) => Database::Sqlite {
            path,
            existed,
            mode: std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o7777)
                .ok(),
        },
        Location::Postgres(_) => Database::Postgres {
            shown: store.describe(),
        },
    };
    emit(&format!("{}\n", report(&what, store.schema())))
}

/// The database `init` worked on, as its report names it.
enum Database<'a> {
    Sqlite {
        path: &'a Path,
        /// The file was there before `init` (perhaps empty: then its schema is created).
        existed: bool,
        /// Its permission bits, if they could be read.
        mode: Option<u32>,
    },
    /// The URL with its password masked.
    Postgres { shown: String },
}

/// One line: what `init` did (created, migrated, nothing to do), where, with which mode and
/// schema version.
fn report(database: &Database, schema: SchemaVersions) -> String {
    let SchemaVersions { found, current } = schema;
    match database {
        Database::Sqlite {
            path,
            existed,
            mode,
        } => {
            let path = crate::display::escape_line(&path.display().to_string());
            let mode = mode.map_or_else(|| "mode unknown".to_string(), |m| format!("mode {m:04o}"));
            match (found, existed) {
                (0, false) => format!("created {path} ({mode}, schema version {current})"),
                (0, true) => {
                    format!(
                        "created the runner schema in {path} ({mode}, schema version {current})"
                    )
                }
                _ if found < current => {
                    format!("migrated {path} from schema version {found} to {current} ({mode})")
                }
                _ => format!("database {path} is up to date ({mode}, schema version {current})"),
            }
        }
        Database::Postgres { shown } => {
            let shown = crate::display::escape_line(shown);
            match found {
                0 => format!("created the runner schema in {shown} (schema version {current})"),
                _ if found < current => {
                    format!("migrated {shown} from schema version {found} to {current}")
                }
                _ => format!("database {shown} is up to date (schema version {current})"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(existed: bool) -> Database<'static> {
        Database::Sqlite {
            path: Path::new("/var/lib/runner/runner.db"),
            existed,
            mode: Some(0o600),
        }
    }

    #[test]
    fn the_report_says_what_was_done_where() {
        let v = |found, current| SchemaVersions { found, current };
        assert_eq!(
            report(&sqlite(false), v(0, 4)),
            "created /var/lib/runner/runner.db (mode 0600, schema version 4)"
        );
        assert_eq!(
            report(&sqlite(true), v(0, 4)),
            "created the runner schema in /var/lib/runner/runner.db (mode 0600, schema version 4)"
        );
        assert_eq!(
            report(&sqlite(true), v(3, 4)),
            "migrated /var/lib/runner/runner.db from schema version 3 to 4 (mode 0600)"
        );
        assert_eq!(
            report(&sqlite(true), v(4, 4)),
            "database /var/lib/runner/runner.db is up to date (mode 0600, schema version 4)"
        );
        let pg = Database::Postgres {
            shown: "postgres://app:***@db:5432/runner".into(),
        };
        assert_eq!(
            report(&pg, v(0, 2)),
            "created the runner schema in postgres://app:***@db:5432/runner (schema version 2)"
        );
        assert_eq!(
            report(&pg, v(2, 2)),
            "database postgres://app:***@db:5432/runner is up to date (schema version 2)"
        );
    }
}
