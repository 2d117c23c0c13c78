//! `runner doctor`: check what makes a cron setup fail silently, and say how to fix each finding.
//!
//! The checks are pure functions over what was gathered (crontab text, process names, file
//! metadata, the store's last tick); `gather` does the I/O. Cron's view of the world is
//! reconstructed the way Debian's cron builds it: the crontab's variable lines in order, `HOME`
//! and `LOGNAME` from passwd, `PATH=/usr/bin:/bin` and `SHELL=/bin/sh` unless the crontab sets
//! them, no `XDG_*`.
//!
//! Test-only overrides (so tests need not touch the real /etc or /proc): `RUNNER_DOCTOR_ETC`
//! replaces `/etc` (for `crontab` and `cron.d/`; its owner stands for root, whom cron requires to
//! own the files there), `RUNNER_DOCTOR_CRONTAB` is a file read instead of `crontab -l` (a
//! missing file: no crontab), `RUNNER_DOCTOR_PROC` replaces `/proc`.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Result;
use serde::Serialize;

use super::Ctx;
use crate::display::escape_line;
use crate::store::{Location, WriteDenied};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Machine-readable output: `{ok, findings, database, checks: [{check, status, message,
    /// fix}]}`.
    #[arg(long)]
    pub json: bool,
}

/// Cron's `PATH` when the crontab does not set one (Debian's cron, `_PATH_DEFPATH`).
pub const CRON_DEFAULT_PATH: &str = "/usr/bin:/bin";
/// `status` warns when the last tick is older than this: cron wakes the tick every minute.
const TICK_STALE_SECS: i64 = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Fail,
    /// Could not be checked because an earlier check failed (e.g. no database), or does not
    /// apply to this database (a file's permissions, on PostgreSQL).
    Skipped,
}

/// One check's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    /// Null unless the check failed: present always, as in every other `--json` output.
    pub fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, message: String) -> Check {
        Check {
            check,
            status: Status::Ok,
            message,
            fix: None,
        }
    }
    fn fail(check: &'static str, message: String, fix: String) -> Check {
        Check {
            check,
            status: Status::Fail,
            message,
            fix: Some(fix),
        }
    }
    fn skipped(check: &'static str, message: String) -> Check {
        Check {
            check,
            status: Status::Skipped,
            message,
            fix: None,
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    ok: bool,
    findings: usize,
    database: String,
    checks: &'a [Check],
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    // It asks `crontab -l` and `sh` (whether each command resolves), and reads their exit status.
    crate::process::hear_children_exit();
    // Absolute: the fixes below are pasted into a crontab, whose working directory is another.
    let database = ctx.location.absolute();
    let checks = diagnose(ctx, &database)?;
    let findings = checks.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        super::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&Report {
                ok: findings == 0,
                findings,
                database: database.to_string(),
                checks: &checks,
            })?
        ))?;
    } else {
        say!("database: {}", escape_line(&database.to_string()));
        for check in &checks {
            let tag = match check.status {
                Status::Ok => "ok  ",
                Status::Fail => "FAIL",
                Status::Skipped => "skip",
            };
            say!("{tag}  {}: {}", check.check, check.message);
            if let Some(fix) = &check.fix {
                say!("      fix: {fix}");
            }
        }
    }
    if findings == 0 {
        if !args.json {
            say!("all checks passed");
        }
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "{findings} finding(s): cron may not be running your schedules"
        ))
    }
}

// ---- crontabs (pure) ----

/// A job line of a crontab, with the variables cron gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronEntry {
    /// `/etc/cron.d/runner:27`, or `crontab -l:3`.
    pub source: String,
    /// Its time fields as written: `* * * * *`, `@reboot`.
    pub schedule: String,
    /// The user field of system crontabs; `None` in a user's own crontab.
    pub user: Option<String>,
    pub command: String,
    /// The crontab's variable lines above this entry, in order (later ones win).
    pub env: Vec<(String, String)>,
    /// Why cron skips the file this line is in, if it does (see [`cron_ignores`]).
    pub ignored: Option<Ignored>,
}

impl CronEntry {
    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Cron's `HOME` for this entry, its shell's working directory too: the crontab's `HOME=`
    /// line, else `passwd_home`, its user's (cron sets it from passwd only when the crontab does
    /// not).
    fn home(&self, passwd_home: PathBuf) -> PathBuf {
        self.var("HOME")
            .filter(|home| !home.is_empty())
            .map_or(passwd_home, PathBuf::from)
    }
}

/// The job lines of a crontab. `system`: `/etc/crontab` and `/etc/cron.d` files, whose lines
/// carry a user field after the time fields.
pub fn parse_crontab(text: &str, source: &str, system: bool) -> Vec<CronEntry> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut entries = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let starts_job = line.starts_with(|c: char| c.is_ascii_digit() || c == '*' || c == '@');
        if !starts_job {
            if let Some((name, value)) = line.split_once('=') {
                let name = name.trim();
                if !name.is_empty() && !name.contains(char::is_whitespace) {
                    env.push((name.to_string(), unquote(value.trim()).to_string()));
                }
            }
            continue;
        }
        let time_fields = if line.starts_with('@') { 1 } else { 5 };
        let mut rest = line;
        let mut fields = Vec::new();
        for _ in 0..time_fields + usize::from(system) {
            let trimmed = rest.trim_start();
            let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
            fields.push(&trimmed[..end]);
            rest = &trimmed[end..];
        }
        let command = rest.trim();
        if command.is_empty() {
            continue;
        }
        entries.push(CronEntry {
            source: format!("{source}:{}", index + 1),
            schedule: fields[..time_fields].join(" "),
            user: system.then(|| fields.last().copied().unwrap_or_default().to_string()),
            command: command.to_string(),
            env: env.clone(),
            ignored: None,
        });
    }
    entries
}

/// Why cron skips a system crontab file, and the commands that make it read the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    pub reason: String,
    pub fix: String,
}

/// What Debian's cron looks at before it reads a system crontab (`/etc/crontab`, `/etc/cron.d/*`).
#[derive(Debug, Clone)]
pub struct CrontabFile {
    pub path: PathBuf,
    /// In `/etc/cron.d`, where cron reads only names made of letters, digits, `_` and `-`.
    pub in_cron_d: bool,
    /// The owner (uid, name) of the path itself when it is a symbolic link.
    pub link_owner: Option<(u32, String)>,
    /// The owner (uid, name) of the file the path leads to.
    pub owner: (u32, String),
    pub mode: u32,
    pub hard_links: u64,
    pub regular: bool,
}

/// Why Debian's cron would skip `file`, as cron(8) says and cron 3.0pl1 does: a `/etc/cron.d`
/// name of other characters than letters, digits, `_` and `-` (a dot among them); a symbolic link
/// not owned by root; a file that is not regular, not owned by root, writable by group or others,
/// or with more than one hard link. `root`: the owner cron requires (root; under
/// `RUNNER_DOCTOR_ETC`, the owner of that directory, so tests need not run as root).
pub fn cron_ignores(file: &CrontabFile, root: &(u32, String)) -> Option<Ignored> {
    let path = escape_line(&file.path.display().to_string());
    let root_name = &root.1;
    let mut reasons = Vec::new();
    let mut fixes = Vec::new();
    let name = file
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if file.in_cron_d && !name.chars().all(allowed) {
        let renamed: String = name
            .chars()
            .map(|c| if allowed(c) { c } else { '-' })
            .collect();
        reasons.push("its name has characters other than letters, digits, `_` and `-`".to_string());
        fixes.push(format!(
            "`sudo mv {path} {}`",
            escape_line(&file.path.with_file_name(renamed).display().to_string())
        ));
    }
    if let Some((uid, owner)) = &file.link_owner {
        if *uid != root.0 {
            reasons.push(format!(
                "it is a symbolic link owned by {owner}, not {root_name}"
            ));
            fixes.push(format!("`sudo chown -h {root_name} {path}`"));
        }
    }
    if !file.regular {
        reasons.push("it is not a regular file".to_string());
        fixes.push("make it a regular file".to_string());
    }
    if file.owner.0 != root.0 {
        reasons.push(format!("it is owned by {}, not {root_name}", file.owner.1));
        fixes.push(format!("`sudo chown {root_name} {path}`"));
    }
    if file.mode & 0o022 != 0 {
        reasons.push(format!(
            "it is writable by group or others (mode {:04o})",
            file.mode & 0o7777
        ));
        fixes.push(format!("`sudo chmod go-w {path}`"));
    }
    if file.hard_links > 1 {
        reasons.push(format!("it has {} hard links", file.hard_links));
        fixes.push(format!(
            "give it a single link: `sudo cp -p {path} {path}.new && sudo mv {path}.new {path}`"
        ));
    }
    (!reasons.is_empty()).then(|| Ignored {
        reason: format!("cron ignores {path}: {}", reasons.join(", and ")),
        fix: fixes.join("; "),
    })
}

/// What keeps a `runner tick` line from waking runner every minute: the file cron ignores, a
/// schedule other than every minute, a database name the tick refuses (it then exits 2 every
/// minute), or, for a user whose home is `home`, a crontab's `RUNNER_DB=` or `XDG_STATE_HOME=`
/// that only the shell would expand ([`unexpanded_variable`]). `(finding, fix)` pairs; none for
/// a line that works.
pub fn tick_line_findings(
    entry: &CronEntry,
    line: &TickLine,
    home: Option<&Path>,
) -> Vec<(String, String)> {
    let mut findings = Vec::new();
    if let Some(ignored) = &entry.ignored {
        findings.push((ignored.reason.clone(), ignored.fix.clone()));
    }
    if let Some(cut) = &line.percent_cut {
        findings.push(percent_finding(entry, line, cut));
    }
    if let (Some(variable), Some(home)) = (unexpanded_variable(entry, line), home) {
        findings.push(unexpanded_finding(entry, line, variable, home));
    }
    if let Some(why) = refused_database(entry, line) {
        findings.push((
            format!("the tick refuses the database it names (exit 2): {why}"),
            "name the database as runner takes it: a file path (./NAME for a name with a colon) \
             or a postgres:// URL"
                .to_string(),
        ));
    }
    let every_minute = crate::schedule::CronSchedule::parse(&entry.schedule)
        .is_ok_and(|schedule| schedule.fires_every_minute());
    if !every_minute {
        findings.push((
            format!(
                "its schedule `{}` is not every minute",
                escape_line(&passwords_masked(&entry.schedule))
            ),
            "make the line's time fields `* * * * *`: runner needs a tick every minute to start runs on time".to_string(),
        ));
    }
    findings
}

/// Text taken from a crontab (a command, a line's time or user field) as doctor shows it: the
/// value of every assignment of a password ([`password_assignments_masked`]) and the password of
/// every PostgreSQL URL in it masked as `***`, the URL's by [`crate::store::masked_url`] (the
/// one function that masks a URL), wherever the URL stands (`--db URL`, `--db=URL`,
/// `RUNNER_DB=URL`, in quotes), the rest as written. A URL runs to the next blank outside quotes
/// or quote that opens or closes (a quoted password may hold a blank), or to the next URL; its
/// scheme is matched in any case, as one the tick refuses (`POSTGRES://`) still holds a password.
fn passwords_masked(text: &str) -> String {
    let text = &password_assignments_masked(text);
    let lower = text.to_ascii_lowercase();
    let url_starts: Vec<usize> = lower
        .match_indices("postgres")
        .filter(|(at, scheme)| {
            let after = &lower[at + scheme.len()..];
            after.starts_with("://") || after.starts_with("ql://")
        })
        .map(|(at, _)| at)
        .collect();
    let ends = shell_word_breaks(text);
    let mut shown = String::with_capacity(text.len());
    let mut copied = 0;
    for (index, &start) in url_starts.iter().enumerate() {
        let word_end = ends
            .iter()
            .copied()
            .find(|&end| end > start)
            .unwrap_or(text.len());
        let end = url_starts
            .get(index + 1)
            .map_or(word_end, |&next| next.min(word_end));
        shown.push_str(&text[copied..start]);
        shown.push_str(&crate::store::masked_url(&text[start..end]));
        copied = end;
    }
    shown.push_str(&text[copied..]);
    shown
}

/// `PGPASSWORD=secret` -> `PGPASSWORD=***`: the value of each word of `text` that assigns a
/// variable whose name ends in `PASSWORD` (in any case: `PGPASSWORD`, `DB_password`), quotes and
/// all, to the end of the word (a blank outside quotes).
fn password_assignments_masked(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in shell_words(text) {
        let word = &text[start..end];
        let Some((name, _)) = word.split_once('=').filter(|_| is_assignment(word)) else {
            continue;
        };
        let is_password = name.len() >= "PASSWORD".len()
            && name[name.len() - "PASSWORD".len()..].eq_ignore_ascii_case("PASSWORD");
        if is_password {
            let value_start = start + name.len() + 1;
            shown.push_str(&text[copied..value_start]);
            shown.push_str("***");
            copied = end;
        }
    }
    shown.push_str(&text[copied..]);
    shown
}

/// The words of a shell command, as `(start, end)` byte ranges: each runs to the next blank
/// outside quotes, none escaped. An unclosed quote runs to the end.
fn shell_words(text: &str) -> Vec<(usize, usize)> {
    let mut words = Vec::new();
    let mut start = None;
    let mut quote = None;
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => {}
            (_, '\\') => {
                start.get_or_insert(at);
                chars.next();
            }
            (Some(open), _) if c == open => quote = None,
            (Some(_), _) => {}
            (None, _) if c.is_whitespace() => {
                if let Some(begun) = start.take() {
                    words.push((begun, at));
                }
            }
            (None, _) => {
                start.get_or_insert(at);
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
            }
        }
    }
    if let Some(begun) = start {
        words.push((begun, text.len()));
    }
    words
}

/// Where a word's text ends in a shell command: a blank outside quotes, and a quote that opens
/// or closes, none escaped. An unclosed quote runs to the end (so a URL in it is masked to the
/// end, rather than in part).
fn shell_word_breaks(text: &str) -> Vec<usize> {
    let mut breaks = Vec::new();
    let mut quote = None;
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => {
                quote = None;
                breaks.push(at);
            }
            (Some('\''), _) => {}
            (_, '\\') => {
                chars.next();
            }
            (Some(open), _) if c == open => {
                quote = None;
                breaks.push(at);
            }
            (Some(_), _) => {}
            (None, '\'' | '"') => {
                quote = Some(c);
                breaks.push(at);
            }
            (None, _) if c.is_whitespace() => breaks.push(at),
            (None, _) => {}
        }
    }
    breaks
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// A shell command's words as `sh` would split them (no expansion), or on whitespace when its
/// quoting does not parse.
fn words(command: &str) -> Vec<String> {
    shlex::split(command)
        .unwrap_or_else(|| command.split_whitespace().map(str::to_string).collect())
}

/// A cron line that runs `runner tick`: the binary as written and the `--db` it passes, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickLine {
    pub binary: String,
    pub db_flag: Option<String>,
    /// `RUNNER_DB=...` put before the command (`RUNNER_DB=x runner tick`, `env RUNNER_DB=x ...`).
    pub db_assigned: Option<String>,
    /// When an unescaped `%` cuts the line short, so that cron runs another command than the
    /// `runner tick` written ([`cron_tick_line`]): what cron gives the shell instead.
    pub percent_cut: Option<CronCommand>,
}

/// A crontab line's command as cron runs it (crontab(5), and Debian's cron does so in
/// `do_command.c`): cron gives `/bin/sh -c` the command up to its first `%` not escaped with a
/// backslash, each `\%` before it as `%`, and sends the rest to the command's standard input,
/// each further `%` a newline. A backslash before anything else is left for the shell. Variable
/// lines (`RUNNER_DB=...`) are not commands: cron takes their `%` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronCommand {
    /// What cron gives the shell.
    pub shell: String,
    /// What the line was written to run: the whole command, each `%` kept and `\%` as `%`. The
    /// same as `shell` unless an unescaped `%` ends it.
    pub meant: String,
}

pub fn cron_command(written: &str) -> CronCommand {
    let mut shell = String::with_capacity(written.len());
    let mut meant = String::with_capacity(written.len());
    let mut cut = false;
    let mut escaped = false;
    for c in written.chars() {
        if escaped {
            escaped = false;
            if c == '%' {
                // The backslash before it goes: `\%` is a `%`.
                meant.pop();
                if !cut {
                    shell.pop();
                }
            }
        } else if c == '\\' {
            escaped = true;
        } else if c == '%' {
            cut = true;
        }
        meant.push(c);
        if !cut {
            shell.push(c);
        }
    }
    CronCommand { shell, meant }
}

/// The `runner tick` line a crontab command runs, as cron runs it ([`cron_command`]); or, when an
/// unescaped `%` cuts the line it was written to be short (`--db /srv/a%b.db tick` runs
/// `--db /srv/a`), that line, with what cron runs instead in its `percent_cut` (a finding).
pub fn cron_tick_line(written: &str) -> Option<TickLine> {
    let command = cron_command(written);
    let runs = tick_line(&command.shell);
    match tick_line(&command.meant) {
        Some(meant) if runs.as_ref() != Some(&meant) => Some(TickLine {
            percent_cut: Some(command),
            ..meant
        }),
        _ => runs,
    }
}

/// The finding of a `runner tick` line an unescaped `%` cuts short (`cut`), and its fix: the
/// command with each such `%` written `\%`, or, when the `%` is in the database the line names,
/// that database set on a variable line of its own, where cron leaves `%` alone. What cron runs
/// is shown only when the line holds no password, as a cut can end inside one (`p%2Dx`), where
/// masking no longer finds it.
fn percent_finding(entry: &CronEntry, line: &TickLine, cut: &CronCommand) -> (String, String) {
    let runs = if passwords_masked(&cut.meant) == cut.meant {
        format!("`{}`", escape_line(&cut.shell))
    } else {
        "what comes before the `%`".to_string()
    };
    let mut escaped = String::with_capacity(entry.command.len() + 1);
    let mut after_backslash = false;
    for c in entry.command.chars() {
        if c == '%' && !after_backslash {
            escaped.push('\\');
        }
        after_backslash = c == '\\' && !after_backslash;
        escaped.push(c);
    }
    let mut fix = format!(
        "cron turns an unescaped % into a newline: write it \\% (`{}`)",
        escape_line(&passwords_masked(&escaped))
    );
    let database = line.db_flag.as_ref().or(line.db_assigned.as_ref());
    if let Some(database) = database.filter(|d| d.contains('%')) {
        fix.push_str(&format!(
            ", or set `{}` on a line of its own above the line (cron takes a variable line's % \
             as written) and drop it from the command",
            escape_line(&passwords_masked(&format!("RUNNER_DB={database}")))
        ));
    }
    (
        format!(
            "cron runs only {runs}: it ends a command at its first unescaped % and sends the \
             rest to the command's standard input"
        ),
        fix,
    )
}

/// The finding of a crontab's variable line that only a shell would expand, on a tick line of a
/// user whose home is `home` (cron's working directory), and its fix: the path written out.
fn unexpanded_finding(
    entry: &CronEntry,
    line: &TickLine,
    variable: Unexpanded,
    home: &Path,
) -> (String, String) {
    let (name, value) = (variable.name(), variable.value());
    let opens = match variable {
        Unexpanded::Database(value) => format!(
            "names the file {}",
            escape_line(&home.join(value).display().to_string())
        ),
        Unexpanded::StateHome(value) => {
            let database = escape_line(&cron_database(entry, line, home).to_string());
            match Path::new(value).is_absolute() {
                true => format!(
                    "names the directory {}: the tick uses {database}",
                    escape_line(value)
                ),
                // As the XDG spec says (and `Location::state_home` does).
                false => format!(
                    "is not an absolute path, which runner ignores: the tick uses {database}"
                ),
            }
        }
    };
    let expanded = under_cron_home(value, home);
    let written_out = expanded.to_string_lossy();
    let fix = if written_out.contains('$') || written_out.starts_with('~') {
        format!(
            "write the {} out in full in that variable line, as an absolute path",
            match variable {
                Unexpanded::Database(_) => "database's path",
                Unexpanded::StateHome(_) => "directory",
            }
        )
    } else {
        format!(
            "write the path out in full in that variable line: `{name}={}`",
            escape_line(&written_out)
        )
    };
    (
        format!(
            "cron takes its variable lines as written, expanding nothing: `{name}={}` {opens}",
            escape_line(value),
        ),
        fix,
    )
}

pub fn tick_line(command: &str) -> Option<TickLine> {
    let words = words(command);
    // Not an assignment before it: `RUNNER_DB=postgres://h/runner` ends in `runner` too.
    let at = words.iter().position(|w| {
        !is_assignment(w) && Path::new(w).file_name().is_some_and(|n| n == "runner")
    })?;
    let args = &words[at + 1..];
    if !args.iter().any(|a| a == "tick") {
        return None;
    }
    let db_flag = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--db" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--db=").map(str::to_string)
        }
    });
    let db_assigned = words[..at]
        .iter()
        .rev()
        .find_map(|w| w.strip_prefix("RUNNER_DB=").map(str::to_string));
    Some(TickLine {
        binary: words[at].clone(),
        db_flag,
        db_assigned,
        percent_cut: None,
    })
}

/// The database a cron entry's tick uses: `--db`, else `RUNNER_DB` (set on the command or in the
/// crontab), else the default under cron's environment (`XDG_STATE_HOME` only if the crontab sets
/// it; cron never does). Relative paths and `~` resolve against `home` (cron's working directory);
/// a `postgres://` URL is taken as the tick takes it.
pub fn cron_database(entry: &CronEntry, line: &TickLine, home: &Path) -> Location {
    if let Some((value, named_in)) = chosen_database(entry, line).filter(|(v, _)| !v.is_empty()) {
        return match Location::parse(&value) {
            Location::Sqlite(_) => Location::Sqlite(match named_in {
                NamedIn::Command => under_cron_home(&value, home),
                // Cron expands nothing in it: `$HOME/x.db` is a file of that name, from cron's
                // working directory.
                NamedIn::VariableLine => home.join(&value),
            }),
            postgres @ Location::Postgres(_) => postgres,
        };
    }
    Location::Sqlite(
        match Location::state_home(entry.var("XDG_STATE_HOME").map(std::ffi::OsStr::new)) {
            Some(state) => state.join("runner/runner.db"),
            None => home.join(".local/state/runner/runner.db"),
        },
    )
}

/// Where a cron line names its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamedIn {
    /// A word of its command (`--db`, `RUNNER_DB=` before the binary): the shell expands `$HOME`
    /// and a leading `~/` in it.
    Command,
    /// A variable line of the crontab: cron takes it as written (crontab(5)), expanding nothing.
    VariableLine,
}

/// The database a cron entry's tick names, as written, and where: `--db`, else `RUNNER_DB` set
/// on the command, else in the crontab.
fn chosen_database(entry: &CronEntry, line: &TickLine) -> Option<(String, NamedIn)> {
    line.db_flag
        .clone()
        .or_else(|| line.db_assigned.clone())
        .map(|value| (value, NamedIn::Command))
        .or_else(|| {
            entry
                .var("RUNNER_DB")
                .map(|value| (value.to_string(), NamedIn::VariableLine))
        })
}

/// A crontab's variable line that picks a tick line's database, holding what only a shell would
/// expand (`$HOME/x.db`, `~/state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unexpanded<'a> {
    /// `RUNNER_DB=`, naming the database: the tick opens a file of that very name under the home
    /// directory.
    Database(&'a str),
    /// `XDG_STATE_HOME=`, where the default database is: runner ignores a relative value and
    /// takes an absolute one as written.
    StateHome(&'a str),
}

impl<'a> Unexpanded<'a> {
    fn name(self) -> &'static str {
        match self {
            Unexpanded::Database(_) => "RUNNER_DB",
            Unexpanded::StateHome(_) => "XDG_STATE_HOME",
        }
    }

    fn value(self) -> &'a str {
        match self {
            Unexpanded::Database(value) | Unexpanded::StateHome(value) => value,
        }
    }
}

/// The variable line that picks this line's database (`RUNNER_DB=`, else, for the default
/// database, `XDG_STATE_HOME=`), when it holds what only a shell would expand: cron takes it as
/// written, so the tick uses another database than the one surely meant.
fn unexpanded_variable<'a>(entry: &'a CronEntry, line: &TickLine) -> Option<Unexpanded<'a>> {
    let variable = match chosen_database(entry, line) {
        Some((value, NamedIn::VariableLine))
            if matches!(Location::parse(&value), Location::Sqlite(_)) =>
        {
            Unexpanded::Database(entry.var("RUNNER_DB")?)
        }
        Some(_) => return None,
        None => Unexpanded::StateHome(entry.var("XDG_STATE_HOME")?),
    };
    let value = variable.value();
    (value.contains('$') || value.starts_with('~')).then_some(variable)
}

/// How to point a tick line at `database`, the simplest way that works for that line: a value on
/// its command (`--db`, else `RUNNER_DB=` before the binary) wins over the crontab's variable
/// lines, so it is that value to change; else the crontab's `RUNNER_DB=` line above it, or a new
/// one (a variable line applies to the lines below it only).
fn repoint_fix(entry: &CronEntry, line: &TickLine, database: &Location) -> String {
    let shown = |value: &str| escape_line(&passwords_masked(value));
    let (what, value) = match (&line.db_flag, &line.db_assigned) {
        (Some(value), _) => ("the `--db` value of", value.as_str()),
        (None, Some(value)) => ("the `RUNNER_DB=` value on the command of", value.as_str()),
        (None, None) => match entry.var("RUNNER_DB").filter(|value| !value.is_empty()) {
            Some(value) => ("the `RUNNER_DB=` line above", value),
            None => {
                return format!(
                    "set `RUNNER_DB={}` on a line of its own above {}",
                    shown(&database.to_string()),
                    entry.source
                )
            }
        },
    };
    format!(
        "change {what} {} from `{}` to `{}`",
        entry.source,
        shown(value),
        shown(&database.to_string())
    )
}

/// The first word of its command that a system crontab line has where its user goes: a line
/// written for a user's crontab, whose first word cron takes for the user. Either a `NAME=value`
/// assignment (`* * * * * RUNNER_DB=... runner tick`: no user has such a name), or runner itself
/// (`* * * * * /usr/bin/runner tick`) when the command left (`tick`) runs no tick without it.
/// The line lacks its user field, and runs no tick: cron finds no such user and skips it, or, as
/// a system user named `runner` exists, runs `tick` as that user.
fn command_word_for_user(entry: &CronEntry) -> Option<&str> {
    let word = entry.user.as_deref()?;
    let binary_for_user = || {
        cron_tick_line(&entry.command).is_none()
            && cron_tick_line(&format!("{word} {}", entry.command)).is_some()
    };
    (is_assignment(word) || binary_for_user()).then_some(word)
}

/// The `runner tick` line a cron entry runs, if it does; a line that lacks its user field
/// ([`command_word_for_user`]) is one too, with that word put back in its command.
fn entry_tick_line(entry: &CronEntry) -> Option<TickLine> {
    cron_tick_line(&entry.command).or_else(|| {
        let word = command_word_for_user(entry)?;
        cron_tick_line(&format!("{word} {}", entry.command))
    })
}

/// The `runner tick` line a system crontab holds commented out, as the runner package installs
/// its `/etc/cron.d/runner` (`# * * * * * runner ... /usr/bin/runner tick`): the first such line,
/// read as if uncommented, with its 1-based line number in `text`. A comment that is no job line
/// with a user field and a tick (`# m h dom mon dow user command`, `# sudo ... runner init`) is
/// none.
pub fn commented_tick_line(text: &str, source: &str) -> Option<(usize, CronEntry)> {
    let mut uncommented = String::with_capacity(text.len());
    let mut commented = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match line.trim_start().strip_prefix('#') {
            Some(rest) => {
                uncommented.push_str(rest.trim_start_matches('#'));
                commented.push(index + 1);
            }
            None => uncommented.push_str(line),
        }
        uncommented.push('\n');
    }
    parse_crontab(&uncommented, source, true)
        .into_iter()
        .filter_map(|entry| {
            let number = entry.source.rsplit_once(':')?.1.parse().ok()?;
            let ticks = cron_tick_line(&entry.command).is_some();
            (ticks && commented.contains(&number)).then_some((number, entry))
        })
        .next()
}

/// Why the tick refuses the database a cron line names, if it does (it then exits 2 and ticks no
/// database): the tick's own check, [`super::named_database`], on the value the line names.
fn refused_database(entry: &CronEntry, line: &TickLine) -> Option<String> {
    super::named_database(&chosen_database(entry, line)?.0).err()
}

/// A `runner tick` line of a crontab, with what doctor makes of it, found once.
struct SeenTickLine<'a> {
    entry: &'a CronEntry,
    line: TickLine,
    /// Its user's name from passwd and the home cron gives it ([`runs_as`]); `None` when no
    /// such user exists, or the line lacks its user field ([`command_word_for_user`]).
    user: Option<(String, PathBuf)>,
    /// The database its tick uses; `None` when its user does not exist or the tick refuses the
    /// database the line names.
    database: Option<Location>,
    /// The tick refuses the database the line names ([`refused_database`]): it ticks none.
    refused: bool,
    /// What keeps it from waking runner every minute ([`tick_line_findings`]).
    findings: Vec<(String, String)>,
}

impl SeenTickLine<'_> {
    /// Whether cron does not run this line as it was written, whatever database it was meant
    /// for: the tick refuses the database it names (it ticks none), an unescaped `%` cuts it
    /// short (it runs another command, which ticks another database or none), or its crontab's
    /// `RUNNER_DB=` or `XDG_STATE_HOME=` holds what only a shell expands (it ticks another
    /// database than meant). A finding wherever it is, whatever database doctor checks.
    fn miswritten(&self) -> bool {
        self.refused
            || self.line.percent_cut.is_some()
            || unexpanded_variable(self.entry, &self.line).is_some()
    }
}

impl<'a> SeenTickLine<'a> {
    fn of(entry: &'a CronEntry, line: TickLine) -> SeenTickLine<'a> {
        // A line that lacks its user field runs no tick as anyone, even when a user has the
        // name of the word in its place (`runner`).
        let user = match command_word_for_user(entry) {
            Some(_) => None,
            None => runs_as(entry),
        };
        let refused = refused_database(entry, &line).is_some();
        // A value the tick refuses is no path to resolve: the tick opens nothing.
        let database = user
            .as_ref()
            .filter(|_| !refused)
            .map(|(_, home)| cron_database(entry, &line, home));
        let home = user.as_ref().map(|(_, home)| home.as_path());
        let findings = tick_line_findings(entry, &line, home);
        SeenTickLine {
            entry,
            line,
            user,
            database,
            refused,
            findings,
        }
    }
}

/// Whether a crontab's database is this one: the same file (through any link), or the same
/// PostgreSQL user, server and database however the URLs spell them (a password, the parameters,
/// `postgresql://`, a default port written out or not).
fn same_database(cron: &Location, this: &Location) -> bool {
    match (cron, this) {
        (Location::Sqlite(cron), Location::Sqlite(this)) => same_path(cron, this),
        (Location::Postgres(_), Location::Postgres(_)) => cron
            .postgres_url_key()
            .is_some_and(|cron| this.postgres_url_key() == Some(cron)),
        _ => false,
    }
}

/// A path as cron's shell resolves it for a user whose home is `home`: `$HOME`, `${HOME}` and a
/// leading `~/` expanded, a relative path taken from the home directory (cron's working
/// directory).
fn under_cron_home(value: &str, home: &Path) -> PathBuf {
    let expanded = value
        .replace("${HOME}", &home.to_string_lossy())
        .replace("$HOME", &home.to_string_lossy());
    let path = match expanded.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None => PathBuf::from(expanded),
    };
    if path.is_absolute() {
        path
    } else {
        home.join(path)
    }
}

/// Cron's `PATH` for an entry: the crontab's, else Debian cron's default.
pub fn cron_path(entry: Option<&CronEntry>) -> String {
    entry
        .and_then(|e| e.var("PATH"))
        .unwrap_or(CRON_DEFAULT_PATH)
        .to_string()
}

/// What the shell runs first in a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstWord {
    /// A word as the shell reads it, its quotes removed: what `command -v` is asked about.
    Word(String),
    /// Only the shell can tell what runs first: the word needs expansion (`$TOOL`, `~/bin/x`,
    /// `*.sh`), opens a compound command whose body runs first (`for`, `case`), or does not
    /// parse. Not checked, rather than run.
    Unknown(String),
    /// Nothing runs: an empty command, or only assignments and redirections.
    None,
}

/// The characters that end an unquoted shell word.
const SHELL_OPERATORS: [char; 7] = [';', '&', '|', '<', '>', '(', ')'];
/// Reserved words followed by the command that runs first (`! cmd`, `{ cmd; }`, `if cmd; ...`).
const BEFORE_A_COMMAND: [&str; 5] = ["!", "{", "if", "while", "until"];
/// The other reserved words: what runs first is in a body (`for`, `case`), or it is a syntax
/// error.
const RESERVED_WORDS: [&str; 11] = [
    "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "in", "then",
];
/// Redirection operators, longest first. Not bash's `&>` and `&>>`: to dash (Debian's /bin/sh,
/// which runs the jobs) `&` ends a command, so a command that begins with one is a syntax error.
const REDIRECTIONS: [&str; 9] = ["<<-", "<<", "<>", "<&", ">>", ">&", ">|", "<", ">"];

/// The first word the shell runs in `command`, found as `sh` parses it in the common cases:
/// past blanks, comments, `(`, the reserved words in [`BEFORE_A_COMMAND`], `VAR=value`
/// assignments and redirections with their targets (`2>&1`, `>file`, `< in`), up to a blank or
/// one of [`SHELL_OPERATORS`] (`(cd /srv && make)` runs `cd`, `true&&echo` runs `true`).
pub fn first_word(command: &str) -> FirstWord {
    let mut rest = command;
    loop {
        rest = rest.trim_start();
        if rest.starts_with('#') {
            rest = rest.find('\n').map_or("", |end| &rest[end..]);
            continue;
        }
        if let Some(after) = rest.strip_prefix('(') {
            rest = after;
            continue;
        }
        if let Some(after) = after_redirection_operator(rest) {
            let (target, after_target) = split_word(after.trim_start());
            if target.is_empty() {
                // A redirection to nothing (`> ;`): a syntax error.
                return FirstWord::Unknown(rest[..rest.len() - after.len()].to_string());
            }
            rest = after_target;
            continue;
        }
        let (word, after) = split_word(rest);
        if word.is_empty() {
            // An operator where a command should start (`;ls`, `)`, `|`): a syntax error.
            return match rest.chars().next() {
                Some(operator) => FirstWord::Unknown(operator.to_string()),
                None => FirstWord::None,
            };
        }
        if is_assignment(word) || BEFORE_A_COMMAND.contains(&word) {
            rest = after;
            continue;
        }
        if RESERVED_WORDS.contains(&word) {
            return FirstWord::Unknown(word.to_string());
        }
        return match unquoted_literal(word) {
            Some(literal) => FirstWord::Word(literal),
            None => FirstWord::Unknown(word.to_string()),
        };
    }
}

/// What follows a redirection operator (and its file descriptor number) at the start of `text`.
fn after_redirection_operator(text: &str) -> Option<&str> {
    let fd = text.trim_start_matches(|c: char| c.is_ascii_digit());
    if fd.len() < text.len() && fd.starts_with('&') {
        return None;
    }
    REDIRECTIONS
        .iter()
        .find_map(|operator| fd.strip_prefix(operator))
}

/// `text` split after its first shell word, as written (quotes kept): the word ends at an
/// unquoted blank or operator, outside `$(...)` and `${...}`.
fn split_word(text: &str) -> (&str, &str) {
    let mut chars = text.char_indices().peekable();
    let mut quote = None;
    let mut depth = 0;
    while let Some((at, c)) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => {}
            (Some(_), '\\') | (None, '\\') => {
                chars.next();
            }
            (Some(open), _) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '$') if matches!(chars.peek(), Some((_, '(' | '{'))) => {
                chars.next();
                depth += 1;
            }
            (None, '(' | '{') if depth > 0 => depth += 1,
            (None, ')' | '}') if depth > 0 => depth -= 1,
            (None, _) if depth == 0 && (c.is_whitespace() || SHELL_OPERATORS.contains(&c)) => {
                return text.split_at(at);
            }
            (None, _) => {}
        }
    }
    (text, "")
}

/// `NAME=value`, which the shell takes as an assignment before the command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A word with its quotes removed, if that is all the shell does to it: `None` when it expands
/// it (`$`, backquotes, a leading `~`, an unquoted glob) or its quotes do not close.
fn unquoted_literal(word: &str) -> Option<String> {
    if word.starts_with('~') {
        return None;
    }
    let mut literal = String::new();
    let mut chars = word.char_indices();
    let mut quote = None;
    while let Some((at, c)) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('\''), _) => literal.push(c),
            (_, '$' | '`') => return None,
            (Some(_), '\\') => {
                let (_, next) = chars.next()?;
                if !matches!(next, '"' | '\\' | '$' | '`' | '\n') {
                    literal.push('\\');
                }
                if next != '\n' {
                    literal.push(next);
                }
            }
            (None, '\\') => match chars.next()? {
                (_, '\n') => {}
                (_, next) => literal.push(next),
            },
            (None, '\'' | '"') => quote = Some(c),
            // `[` alone is the `test` builtin; with a `]` after it, a bracket pattern.
            (None, '*' | '?') => return None,
            (None, '[') if word[at..].contains(']') => return None,
            _ => literal.push(c),
        }
    }
    quote.is_none().then_some(literal)
}

// ---- gathering (I/O) ----

fn override_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Every crontab job line: the user's own crontab, `/etc/crontab`, `/etc/cron.d/*`. The lines of
/// system crontab files cron ignores are there too, marked with why (see [`cron_ignores`]).
fn all_cron_entries() -> Vec<CronEntry> {
    let mut entries = Vec::new();
    let user_crontab = match std::env::var_os("RUNNER_DOCTOR_CRONTAB") {
        Some(file) => std::fs::read_to_string(file).ok(),
        None => Command::new("crontab")
            .arg("-l")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned()),
    };
    if let Some(text) = user_crontab {
        entries.extend(parse_crontab(&text, "your crontab (crontab -l)", false));
    }
    let etc = override_path("RUNNER_DOCTOR_ETC", "/etc");
    let root_uid = match std::env::var_os("RUNNER_DOCTOR_ETC").filter(|v| !v.is_empty()) {
        Some(_) => std::fs::metadata(&etc).map_or(0, |m| m.uid()),
        None => 0,
    };
    let root = (root_uid, user_name(root_uid));
    let mut files = vec![(etc.join("crontab"), false)];
    let mut cron_d: Vec<PathBuf> = std::fs::read_dir(etc.join("cron.d"))
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    cron_d.sort();
    files.extend(cron_d.into_iter().map(|path| (path, true)));
    for (path, in_cron_d) in files {
        let Some(file) = crontab_file(path, in_cron_d) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&file.path) else {
            continue;
        };
        let ignored = cron_ignores(&file, &root);
        entries.extend(
            parse_crontab(&text, &file.path.display().to_string(), true)
                .into_iter()
                .map(|entry| CronEntry {
                    ignored: ignored.clone(),
                    ..entry
                }),
        );
    }
    entries
}

/// The tick line `/etc/cron.d/runner` holds commented out, as the runner package installs it
/// ([`commented_tick_line`]), with its line number.
fn packaged_tick_line() -> Option<(usize, CronEntry)> {
    let path = override_path("RUNNER_DOCTOR_ETC", "/etc").join("cron.d/runner");
    let text = std::fs::read_to_string(&path).ok()?;
    commented_tick_line(&text, &path.display().to_string())
}

/// What cron looks at in a system crontab file before reading it; `None` if it is not there.
fn crontab_file(path: PathBuf, in_cron_d: bool) -> Option<CrontabFile> {
    let link = std::fs::symlink_metadata(&path).ok()?;
    let target = std::fs::metadata(&path).ok()?;
    let owner = |uid: u32| (uid, user_name(uid));
    Some(CrontabFile {
        link_owner: link.file_type().is_symlink().then(|| owner(link.uid())),
        owner: owner(target.uid()),
        mode: target.mode(),
        hard_links: target.nlink(),
        regular: target.is_file(),
        path,
        in_cron_d,
    })
}

/// A user's name from passwd, else the number.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

/// Names of running processes that look like a cron daemon.
fn cron_daemons() -> Vec<String> {
    let proc = override_path("RUNNER_DOCTOR_PROC", "/proc");
    let Ok(dir) = std::fs::read_dir(&proc) else {
        return Vec::new();
    };
    let mut found: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            let (_, rest) = stat.split_once(" (")?;
            let (comm, state) = rest.rsplit_once(") ")?;
            (!state.starts_with('Z')).then(|| comm.to_string())
        })
        .filter(|comm| {
            matches!(
                comm.as_str(),
                "cron" | "crond" | "cronie" | "fcron" | "dcron"
            )
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// A user's home directory and name from passwd.
fn passwd_user(name: Option<&str>) -> Option<(String, PathBuf)> {
    let user = match name {
        Some(name) => nix::unistd::User::from_name(name).ok()??,
        None => nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??,
    };
    Some((user.name, user.dir))
}

/// The user cron runs an entry as, from passwd, and the `HOME` cron gives it ([`CronEntry::home`]).
fn runs_as(entry: &CronEntry) -> Option<(String, PathBuf)> {
    passwd_user(entry.user.as_deref()).map(|(name, home)| (name, entry.home(home)))
}

/// What named this command's database, for the advice to point the shell elsewhere.
fn named_by(database: &Location) -> String {
    let from_env = std::env::var("RUNNER_DB")
        .ok()
        .filter(|v| !v.is_empty())
        .is_some_and(|v| Location::parse(&v) == *database);
    if from_env {
        return "your shell sets RUNNER_DB".to_string();
    }
    if Location::default_path().is_ok_and(|path| Location::Sqlite(path) == *database) {
        let base = match Location::state_home(std::env::var_os("XDG_STATE_HOME").as_deref()) {
            Some(_) => "XDG_STATE_HOME",
            None => "HOME",
        };
        return format!("your shell uses the default, under {base}: set RUNNER_DB or --db");
    }
    "you gave --db".to_string()
}

fn same_path(a: &Path, b: &Path) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    a == b || canonical(a) == canonical(b)
}

/// Whether `word` resolves as a command under cron's environment, from `dir`: `command -v` in
/// `sh` started with `env -i` and only cron's variables.
fn resolves_under_cron(word: &str, path: &str, home: &Path, user: &str, dir: &Path) -> bool {
    let mut env: Vec<(&str, OsString)> = vec![
        ("PATH", path.into()),
        ("HOME", home.into()),
        ("SHELL", "/bin/sh".into()),
        ("LOGNAME", user.into()),
    ];
    env.push(("USER", user.into()));
    Command::new("env")
        .arg("-i")
        .args(env.iter().map(|(name, value)| {
            let mut pair = OsString::from(*name);
            pair.push("=");
            pair.push(value);
            pair
        }))
        .args([
            "/bin/sh",
            "-c",
            "command -v -- \"$1\" >/dev/null",
            "sh",
            word,
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

// ---- the checks ----

/// `database`: shown wherever the database is named (a path, or a URL with its password masked).
fn diagnose(ctx: &Ctx, database: &Location) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    let me = passwd_user(None);
    let my_name = me.as_ref().map_or_else(|| "?".to_string(), |m| m.0.clone());

    // 1. A cron line running `runner tick` for this database.
    let entries = all_cron_entries();
    let mut tick_lines: Vec<SeenTickLine> = entries
        .iter()
        .filter_map(|entry| Some(SeenTickLine::of(entry, entry_tick_line(entry)?)))
        .collect();
    let is_this_database = |seen: &SeenTickLine| {
        seen.database
            .as_ref()
            .is_some_and(|db| same_database(db, database))
    };
    // A line in a file cron ignores runs nothing: it counts only to say why this database's
    // line does not run.
    tick_lines.retain(|seen| seen.entry.ignored.is_none() || is_this_database(seen));
    let matching: Vec<&SeenTickLine> = tick_lines.iter().filter(|s| is_this_database(s)).collect();
    // A line cron does not run as written (a database the tick refuses, a command an unescaped
    // `%` cuts short) ticks none, or another database than it names: it is a finding whatever
    // this database is, beside a line that works too (it fails every minute, or ticks a database
    // nobody meant). One whose user does not exist runs nothing: that is said below. One of this
    // database is named with this database's lines.
    let miswritten: Vec<&SeenTickLine> = tick_lines
        .iter()
        .filter(|s| s.miswritten() && s.user.is_some() && !is_this_database(s))
        .collect();
    let runs = |seen: &SeenTickLine| {
        let user = seen.user.as_ref().map_or("?", |(user, _)| user.as_str());
        format!(
            "{} runs `{}` as {user}",
            seen.entry.source,
            escape_line(&passwords_masked(&seen.entry.command))
        )
    };
    // A line named with what stops it; `whose`: what it is for, if that can be said.
    let fails = |seen: &SeenTickLine, whose: &str| {
        let findings: Vec<&str> = seen.findings.iter().map(|f| f.0.as_str()).collect();
        format!("{}{whose}, but {}", runs(seen), findings.join(", and "))
    };
    // The fixes of lines, each said once.
    let fixes_of = |lines: &[&SeenTickLine]| {
        let mut fixes: Vec<String> = Vec::new();
        for (_, fix) in lines.iter().flat_map(|seen| &seen.findings) {
            if !fixes.contains(fix) {
                fixes.push(fix.clone());
            }
        }
        fixes
    };
    // The line that works, else the first one, whose findings are then reported.
    let chosen = matching
        .iter()
        .find(|seen| seen.findings.is_empty())
        .or(matching.first());
    // Its user, if that user exists: a line whose user does not exist runs nothing.
    let cron_entry = match chosen.and_then(|seen| Some((*seen, seen.user.as_ref()?))) {
        Some((seen, (user, home))) => {
            const THIS: &str = " for this database";
            if seen.findings.is_empty() && miswritten.is_empty() {
                checks.push(Check::ok("cron line", format!("{}{THIS}", runs(seen))));
            } else {
                let mut messages = Vec::new();
                let mut failing = Vec::new();
                if seen.findings.is_empty() {
                    messages.push(format!("{}{THIS}", runs(seen)));
                } else {
                    // No line of this database works: each is named with what stops it.
                    messages.extend(matching.iter().map(|seen| fails(seen, THIS)));
                    failing.extend(&matching);
                }
                messages.extend(miswritten.iter().map(|seen| fails(seen, "")));
                failing.extend(&miswritten);
                checks.push(Check::fail(
                    "cron line",
                    messages.join("; "),
                    fixes_of(&failing).join("; "),
                ));
            }
            checks.push(binary_check(seen.entry, &seen.line, home));
            Some((seen.entry, user.clone()))
        }
        _ => {
            let others: Vec<String> = tick_lines
                .iter()
                .map(|seen| match (&seen.user, &seen.database) {
                    (Some(_), _) if seen.miswritten() => fails(seen, ""),
                    (Some((user, _)), Some(db)) => {
                        format!("{} (as {user}) uses {db}", seen.entry.source)
                    }
                    (Some(_), None) => fails(seen, ""),
                    (None, _) => match command_word_for_user(seen.entry) {
                        Some(word) => format!(
                            "{} has no user field: `{}` stands where its user goes (lines of \
                             /etc/crontab and /etc/cron.d are `min hour dom mon dow USER command`)",
                            seen.entry.source,
                            escape_line(&passwords_masked(word))
                        ),
                        None => format!(
                            "{} names user {:?}, who does not exist",
                            seen.entry.source,
                            passwords_masked(seen.entry.user.as_deref().unwrap_or("?"))
                        ),
                    },
                })
                .collect();
            // A line whose user does not exist runs nothing, whatever database it names: the
            // user is the fix (the README's system install creates it). Not for a line whose
            // user field holds the first word of its command: that line lacks the field, and gets
            // it.
            let mut missing_users: Vec<String> = tick_lines
                .iter()
                .filter(|seen| seen.user.is_none() && command_word_for_user(seen.entry).is_none())
                .filter_map(|seen| seen.entry.user.as_deref().map(passwords_masked))
                .collect();
            missing_users.sort_unstable();
            missing_users.dedup();
            let looked = "no crontab line runs `runner tick` (looked at your crontab, /etc/crontab and /etc/cron.d)";
            let (message, fix) = if let Some((number, entry)) =
                others.is_empty().then(packaged_tick_line).flatten()
            {
                // The runner package's file, its line not yet uncommented (as the README says to):
                // installing crontab.example over it would replace the package's file with a line
                // for /usr/local/bin/runner.
                let path = entry.source.rsplit_once(':').map_or("", |(path, _)| path);
                let mut fix = format!(
                    "uncomment line {number} of {path} (`sudoedit {path}`): the runner package \
                     installs its tick line commented out"
                );
                // Pointed here where it names its database, as any other line would be.
                let theirs = cron_tick_line(&entry.command).filter(|line| {
                    let home = runs_as(&entry).map_or_else(|| PathBuf::from("/"), |(_, home)| home);
                    !same_database(&cron_database(&entry, line, &home), database)
                });
                if let Some(line) = theirs {
                    fix.push_str(&format!(", and {}", repoint_fix(&entry, &line, database)));
                }
                (
                    format!(
                        "{looked}; line {number} of {path} runs `{}` as {}, but is commented out",
                        escape_line(&passwords_masked(&entry.command)),
                        passwords_masked(entry.user.as_deref().unwrap_or("?"))
                    ),
                    fix,
                )
            } else if others.is_empty() {
                (
                    looked.to_string(),
                    format!(
                        "add `* * * * * {} tick` with `crontab -e` (or install crontab.example as /etc/cron.d/runner), with `RUNNER_DB={database}` on a line of its own above it",
                        std::env::current_exe().map_or_else(|_| "/usr/bin/runner".to_string(), |p| p.display().to_string()),
                    ),
                )
            } else {
                let mut fixes: Vec<String> = missing_users
                    .iter()
                    .map(|user| {
                        format!(
                            "create the user {user} (`sudo useradd --system --home-dir \
                             /var/lib/{user} --create-home --shell /usr/sbin/nologin {user}`) or \
                             change the line's user"
                        )
                    })
                    .collect();
                // The line with the field put in, for the user doctor runs as (doctor is run as
                // the user cron runs the tick as).
                for seen in tick_lines.iter().filter(|seen| seen.user.is_none()) {
                    if let Some(word) = command_word_for_user(seen.entry) {
                        let fixed = format!(
                            "{} {my_name} {word} {}",
                            seen.entry.schedule, seen.entry.command
                        );
                        let fix = format!(
                            "put the user the tick runs as after the time fields: `{}`",
                            escape_line(&passwords_masked(&fixed))
                        );
                        if !fixes.contains(&fix) {
                            fixes.push(fix);
                        }
                    }
                }
                fixes.extend(fixes_of(&miswritten));
                // Lines of users who exist name another database (a miswritten one's own fix
                // says how to write it as meant): each is pointed here where it names its own.
                let mut repoints: Vec<String> = Vec::new();
                for seen in tick_lines
                    .iter()
                    .filter(|seen| seen.database.is_some() && !seen.miswritten())
                {
                    let fix = repoint_fix(seen.entry, &seen.line, database);
                    if !repoints.contains(&fix) {
                        repoints.push(fix);
                    }
                }
                if !repoints.is_empty() {
                    fixes.push(format!(
                        "{}, or point your shell at the database cron uses ({})",
                        repoints.join(", "),
                        named_by(&ctx.location)
                    ));
                }
                (
                    format!(
                        "no `runner tick` line uses this database ({database}): {}",
                        others.join("; ")
                    ),
                    fixes.join("; "),
                )
            };
            checks.push(Check::fail("cron line", message, fix));
            None
        }
    };

    // 2. A cron daemon.
    let daemons = cron_daemons();
    checks.push(if daemons.is_empty() {
        Check::fail(
            "cron daemon",
            "no cron daemon is running: nothing will run `runner tick`".to_string(),
            "start it: `sudo systemctl enable --now cron` (or `sudo service cron start`; install Debian's `cron` package if missing)".to_string(),
        )
    } else {
        Check::ok("cron daemon", format!("running ({})", daemons.join(", ")))
    });

    // 3. The database and its directory, as a tick (run by this user) requires them.
    checks.push(permissions_check(database, &my_name));
    if let Some((_, cron_user)) = &cron_entry {
        if *cron_user != my_name {
            checks.push(Check::fail(
                "user",
                format!("cron runs the tick as {cron_user}, but you are {my_name}: the permission and command checks are for {my_name}"),
                format!("run doctor as that user: `sudo -u {cron_user} runner --db {database} doctor`"),
            ));
        }
    }

    // 4. The last tick, and 5. the schedules' commands under cron's environment. The database
    // is opened as every command opens it (on PostgreSQL: the server and the cause named on
    // failure, never a password; an older schema brought up to date). A missing SQLite file
    // opens as none: the permissions check said so.
    let postgres = matches!(database, Location::Postgres(_));
    let store = match crate::store::open_if_present(database) {
        Ok(Some(store)) => {
            if postgres {
                let schema = store.schema();
                let upgraded = if schema.found < schema.current {
                    format!(" (upgraded from version {})", schema.found)
                } else {
                    String::new()
                };
                let current = format!(
                    "connected to {database}; runner's schema is current (version {}){upgraded}",
                    schema.current
                );
                checks.push(match store.write_denied() {
                    Ok(None) => Check::ok("database", current),
                    Ok(Some(why)) => Check::fail(
                        "database",
                        format!("{current}, but a tick cannot write it: {why}"),
                        write_denied_fix(&why).to_string(),
                    ),
                    Err(e) => Check::fail(
                        "database",
                        format!("{current}, but whether a tick can write it is unknown: {e:#}"),
                        "see the message".to_string(),
                    ),
                });
            }
            Some(store)
        }
        Ok(None) => {
            if postgres {
                checks.push(Check::fail(
                    "database",
                    format!("{database} has no runner schema: a tick on it exits 4"),
                    format!("create it once, from any host: `runner init --db {database}`"),
                ));
            }
            None
        }
        Err(e) => {
            let fix = match postgres {
                true => "see the message: a tick cannot use this database until it is fixed",
                false => "see the message",
            };
            checks.push(Check::fail("database", format!("{e:#}"), fix.to_string()));
            None
        }
    };
    let Some(store) = store else {
        checks.push(Check::skipped(
            "last tick",
            "no database to read".to_string(),
        ));
        checks.push(Check::skipped(
            "commands",
            "no database to read".to_string(),
        ));
        return Ok(checks);
    };
    let now = ctx.clock.epoch();
    let health = store.health(now, now)?;
    checks.push(match health.last_tick_at {
        Some(at) if now - at <= TICK_STALE_SECS => Check::ok(
            "last tick",
            format!("{} ago", crate::display::duration_of_secs(now - at)),
        ),
        Some(at) => Check::fail(
            "last tick",
            format!(
                "the last tick was {} ago ({}): cron is not running it every minute",
                crate::display::duration_of_secs(now - at),
                crate::display::local_time(at, crate::tz::Tz::UTC)
            ),
            "check the cron line and the daemon above, and cron's mail or syslog (`grep CRON /var/log/syslog`, `journalctl -u cron`) for errors".to_string(),
        ),
        None => Check::fail(
            "last tick",
            "no tick has ever run on this database".to_string(),
            "once the cron line is in place, wait a minute and run doctor again (or run `runner tick` once by hand)".to_string(),
        ),
    });

    let (cron_user, cron_home) = match &cron_entry {
        Some((entry, user)) => (user.clone(), runs_as(entry).map(|u| u.1)),
        None => (my_name.clone(), me.as_ref().map(|m| m.1.clone())),
    };
    let cron_home = cron_home.unwrap_or_else(|| PathBuf::from("/"));
    let path = cron_path(cron_entry.as_ref().map(|(e, _)| *e));
    let mut problems = Vec::new();
    let mut not_checked = Vec::new();
    let mut checked = 0;
    for row in store.definitions()? {
        let Ok(definition) = row else { continue };
        checked += 1;
        let name = escape_line(&definition.name);
        let dir = match &definition.settings.workdir {
            Some(dir) if !Path::new(dir).is_dir() => {
                problems.push(format!(
                    "{name}: its workdir {} does not exist",
                    escape_line(dir)
                ));
                continue;
            }
            Some(dir) => PathBuf::from(dir),
            None => cron_home.clone(),
        };
        match first_word(&definition.settings.command) {
            FirstWord::Word(word) => {
                if !resolves_under_cron(&word, &path, &cron_home, &cron_user, &dir) {
                    problems.push(format!(
                        "{name}: `{}` is not found with cron's PATH={path} (from {})",
                        escape_line(&word),
                        dir.display()
                    ));
                }
            }
            FirstWord::Unknown(word) => {
                not_checked.push(format!("{name} (`{}`)", escape_line(&word)))
            }
            FirstWord::None => {}
        }
    }
    // Said, not failed: doctor does not run a command to learn what its shell would run first.
    let not_checked = match not_checked.is_empty() {
        true => String::new(),
        false => format!(
            "; not checked, as only the shell can tell what runs first: {}",
            not_checked.join(", ")
        ),
    };
    checks.push(if problems.is_empty() {
        Check::ok(
            "commands",
            format!("{checked} schedule(s): every command resolves under cron's environment (PATH={path}, HOME={}){not_checked}", cron_home.display()),
        )
    } else {
        Check::fail(
            "commands",
            format!("{}{not_checked}", problems.join("; ")),
            format!("use absolute paths in the commands, or set PATH in the crontab above the `runner tick` line (now PATH={path}); create missing workdirs or change them with `runner schedule edit NAME --workdir DIR`"),
        )
    });
    Ok(checks)
}

/// The database file and its directory must be as a tick requires (`OpenMode::Execute`). A
/// PostgreSQL database has no file here: the check does not apply.
/// The fix for a database a tick cannot write: another server only for a standby (one that is
/// not in recovery takes writes once the setting or the grant allows them).
fn write_denied_fix(why: &WriteDenied) -> &'static str {
    match why {
        WriteDenied::Standby => "point --db at the primary server",
        WriteDenied::ReadOnlySessions => {
            "turn default_transaction_read_only off for this database and user"
        }
        WriteDenied::Privileges(_) => {
            "grant this user SELECT, INSERT, UPDATE and DELETE on runner's tables (see the \
             README's Privileges)"
        }
    }
}

fn permissions_check(database: &Location, my_name: &str) -> Check {
    let path = match database {
        Location::Sqlite(path) => path,
        Location::Postgres(_) => return Check::skipped(
            "permissions",
            "not applicable on PostgreSQL: no database file or directory whose modes a tick checks"
                .to_string(),
        ),
    };
    match path.try_exists() {
        Ok(true) => {}
        // A directory above it this user may not enter: it may well exist.
        Err(e) => {
            return Check::fail(
                "permissions",
                format!("cannot reach {}: {e}", path.display()),
                "run doctor as the user cron runs the tick as (e.g. `sudo -u runner runner \
                 doctor`), who owns the database"
                    .to_string(),
            )
        }
        Ok(false) => {
            return Check::fail(
                "permissions",
                format!("{} does not exist", path.display()),
                format!(
                    "create it as the user cron runs the tick as: `runner --db {} init`",
                    path.display()
                ),
            )
        }
    }
    match crate::store::execution_refusal(database) {
        None => Check::ok(
            "permissions",
            format!(
                "{} and its directory are private to {my_name}, as a tick requires",
                path.display()
            ),
        ),
        Some(e) => Check::fail(
            "permissions",
            format!("{e:#}"),
            "see the message: a tick refuses this database until it is fixed".to_string(),
        ),
    }
}

/// The binary a cron line names must exist (an absolute path) or be found in that crontab's PATH.
fn binary_check(entry: &CronEntry, line: &TickLine, home: &Path) -> Check {
    let path = cron_path(Some(entry));
    let found = if line.binary.contains('/') {
        // As cron's shell sees it: `$HOME/.local/bin/runner`, as crontab.example writes it.
        under_cron_home(&line.binary, home).is_file()
    } else {
        path.split(':')
            .any(|dir| Path::new(dir).join(&line.binary).is_file())
    };
    let binary = escape_line(&passwords_masked(&line.binary));
    if found {
        Check::ok("runner binary", format!("{binary} exists"))
    } else {
        Check::fail(
            "runner binary",
            format!(
                "{} names `{binary}`, which is not there (cron's PATH={path})",
                entry.source
            ),
            "install runner there, or write its absolute path in the cron line".to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_crontabs_have_a_user_field_and_variables_apply_from_their_line_on() {
        let text = "# comment\nSHELL=/bin/sh\nPATH = \"/usr/local/bin:/usr/bin:/bin\"\n\n* * * * * runner /usr/bin/runner tick\nRUNNER_DB=/var/lib/runner/runner.db\n@hourly root  flock -n /run/x runner --db=/x.db tick -v\n";
        let entries = parse_crontab(text, "/etc/cron.d/runner", true);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].source, "/etc/cron.d/runner:5");
        assert_eq!(entries[0].user.as_deref(), Some("runner"));
        assert_eq!(entries[0].command, "/usr/bin/runner tick");
        assert_eq!(entries[0].var("PATH"), Some("/usr/local/bin:/usr/bin:/bin"));
        assert_eq!(entries[0].var("RUNNER_DB"), None);
        assert_eq!(entries[1].user.as_deref(), Some("root"));
        assert_eq!(
            entries[1].var("RUNNER_DB"),
            Some("/var/lib/runner/runner.db")
        );
        let line = tick_line(&entries[1].command).expect("a tick line");
        assert_eq!(line.db_flag.as_deref(), Some("/x.db"));
        assert_eq!(
            cron_database(&entries[1], &line, Path::new("/root")),
            Location::Sqlite(PathBuf::from("/x.db"))
        );
    }

    #[test]
    fn user_crontabs_have_no_user_field() {
        let entries = parse_crontab("*/5 1 * * MON  echo hi  there\n", "crontab -l", false);
        assert_eq!(entries[0].user, None);
        assert_eq!(entries[0].schedule, "*/5 1 * * MON");
        assert_eq!(entries[0].command, "echo hi  there");
    }

    /// A value on the command wins over the crontab's `RUNNER_DB=`: that value is the one to
    /// change, shown without its password; else the crontab's `RUNNER_DB=` line above the line,
    /// or a new one.
    #[test]
    fn a_line_is_pointed_at_a_database_where_it_names_its_own() {
        let here = Location::Sqlite(PathBuf::from("/srv/here.db"));
        let fix = |command: &str| {
            let entry = parse_crontab(
                &format!("RUNNER_DB=/srv/a.db\n* * * * * {command}\n"),
                "crontab -l",
                false,
            )
            .remove(0);
            repoint_fix(&entry, &tick_line(&entry.command).expect("tick"), &here)
        };
        // The crontab's own `RUNNER_DB=` line, else a new one above the line.
        assert_eq!(
            fix("runner tick"),
            "change the `RUNNER_DB=` line above crontab -l:2 from `/srv/a.db` to `/srv/here.db`"
        );
        let entry = parse_crontab("* * * * * runner tick\n", "crontab -l", false).remove(0);
        assert_eq!(
            repoint_fix(&entry, &tick_line(&entry.command).expect("tick"), &here),
            "set `RUNNER_DB=/srv/here.db` on a line of its own above crontab -l:1"
        );
        assert_eq!(
            fix("RUNNER_DB=/srv/b.db runner --db postgres://u:secret@h/db tick"),
            "change the `--db` value of crontab -l:2 from `postgres://u:***@h/db` to \
             `/srv/here.db`"
        );
        assert_eq!(
            fix("RUNNER_DB=/srv/b.db runner tick"),
            "change the `RUNNER_DB=` value on the command of crontab -l:2 from `/srv/b.db` to \
             `/srv/here.db`"
        );
    }

    #[test]
    fn a_tick_line_must_be_read_by_cron_and_run_every_minute() {
        let line = |text: &str| parse_crontab(text, "/etc/cron.d/runner", true).remove(0);
        let findings_of = |entry: &CronEntry| {
            let line = tick_line(&entry.command).expect("a tick line");
            tick_line_findings(entry, &line, Some(Path::new("/home/ann")))
        };
        for works in [
            "* * * * * runner runner tick",
            "*/1 * * * * runner runner tick",
            "0-59 * * * * runner runner tick",
        ] {
            assert_eq!(findings_of(&line(works)), Vec::new(), "{works}");
        }
        for (late, schedule) in [
            ("@reboot runner runner tick", "@reboot"),
            ("@hourly runner runner tick", "@hourly"),
            ("0 * * * * runner runner tick", "0 * * * *"),
            ("*/5 * * * * runner runner tick", "*/5 * * * *"),
        ] {
            let findings = findings_of(&line(late));
            assert_eq!(findings.len(), 1, "{late}");
            assert_eq!(
                findings[0].0,
                format!("its schedule `{schedule}` is not every minute")
            );
        }
        let ignored = Ignored {
            reason: "cron ignores it".into(),
            fix: "chmod".into(),
        };
        let findings = findings_of(&CronEntry {
            ignored: Some(ignored),
            ..line("* * * * * runner runner tick")
        });
        assert_eq!(findings, vec![("cron ignores it".into(), "chmod".into())]);
        // A database name the tick refuses: it exits 2 every minute.
        for refused in [
            "* * * * * runner runner --db name:x.db tick",
            "* * * * * runner RUNNER_DB=:memory: runner tick",
            "RUNNER_DB=POSTGRES://u@h/db\n* * * * * runner runner tick",
        ] {
            let entry = parse_crontab(refused, "/etc/cron.d/runner", true).remove(0);
            let findings = findings_of(&entry);
            assert_eq!(findings.len(), 1, "{refused}: {findings:?}");
            assert!(
                findings[0]
                    .0
                    .starts_with("the tick refuses the database it names (exit 2): "),
                "{findings:?}"
            );
        }
    }

    #[test]
    fn the_packages_commented_tick_line_is_found() {
        let packaged = include_str!("../../packaging/deb/cron.d");
        let (number, entry) =
            commented_tick_line(packaged, "/etc/cron.d/runner").expect("a commented tick line");
        assert_eq!(
            packaged.lines().nth(number - 1),
            Some("# *   * *   *   *    runner  test -x /usr/bin/runner && /usr/bin/runner tick")
        );
        assert_eq!(entry.source, format!("/etc/cron.d/runner:{number}"));
        assert_eq!(entry.user.as_deref(), Some("runner"));
        assert_eq!(entry.var("RUNNER_DB"), Some("/var/lib/runner/runner.db"));
        // Other comments are no tick line, nor is a line that runs one already, nor one whose
        // user field holds the binary (a user crontab's line, shown in a comment).
        for none in [
            "# m h dom mon dow  user    command\n#   sudo -u runner RUNNER_DB=x runner init\n",
            "* * * * * runner /usr/bin/runner tick\n",
            "#   * * * * * $HOME/.local/bin/runner tick\n",
            "## * * * * * runner /usr/bin/runner status\n",
        ] {
            assert_eq!(commented_tick_line(none, "x").map(|f| f.0), None, "{none}");
        }
        assert_eq!(
            commented_tick_line("PATH=/bin\n\n##* * * * * root runner tick\n", "x")
                .map(|(number, entry)| (number, entry.var("PATH").map(str::to_string))),
            Some((3, Some("/bin".to_string())))
        );
    }

    #[test]
    fn cron_ends_a_command_at_its_first_unescaped_percent() {
        for (written, shell, meant) in [
            ("runner tick", "runner tick", "runner tick"),
            (
                "runner --db /srv/a%b.db tick",
                "runner --db /srv/a",
                "runner --db /srv/a%b.db tick",
            ),
            // `\%` is a `%`, before the cut and after it.
            ("date +\\%F", "date +%F", "date +%F"),
            ("a\\%b%c\\%d", "a%b", "a%b%c%d"),
            ("cat %line 1%line 2", "cat ", "cat %line 1%line 2"),
            // A backslash before anything else is the shell's, and one escaped by another
            // escapes no `%`.
            (
                "echo \\$HOME \\\\x",
                "echo \\$HOME \\\\x",
                "echo \\$HOME \\\\x",
            ),
            ("echo \\\\%x", "echo \\\\", "echo \\\\%x"),
            ("", "", ""),
        ] {
            assert_eq!(
                cron_command(written),
                CronCommand {
                    shell: shell.into(),
                    meant: meant.into()
                },
                "{written:?}"
            );
        }
    }

    #[test]
    fn a_tick_line_is_read_as_cron_runs_it() {
        let cut = |written: &str| {
            let line = cron_tick_line(written).expect("a tick line");
            (line.db_flag, line.percent_cut.map(|cut| cut.shell))
        };
        // The `%` cuts the database's name, or the `tick` off: the line is the one written, with
        // what cron runs instead.
        assert_eq!(
            cut("/usr/bin/runner --db /srv/a%b.db tick"),
            (
                Some("/srv/a%b.db".into()),
                Some("/usr/bin/runner --db /srv/a".into())
            )
        );
        assert_eq!(
            cut("runner tick --db postgres://u:p%2Dx@h/db"),
            (
                Some("postgres://u:p%2Dx@h/db".into()),
                Some("runner tick --db postgres://u:p".into())
            )
        );
        // Escaped, in quotes or not, it is a `%` of the database's name: cron takes the
        // backslash away before the shell sees it.
        for escaped in [
            "runner --db /srv/a\\%b.db tick",
            "runner --db \"/srv/a\\%b.db\" tick",
            "runner --db '/srv/a\\%b.db' tick",
        ] {
            assert_eq!(
                cut(escaped),
                (Some("/srv/a%b.db".into()), None),
                "{escaped}"
            );
        }
        // A `%` after what makes the tick line leaves it as it is.
        assert_eq!(
            cut("runner --db /srv/r.db tick 2>&1 | logger -t a%b"),
            (Some("/srv/r.db".into()), None)
        );
        assert_eq!(cut("runner tick%x"), (None, None));
        assert_eq!(cron_tick_line("runner status %tick"), None);
    }

    #[test]
    fn a_tick_line_an_unescaped_percent_cuts_is_a_finding() {
        let findings_of = |command: &str| {
            let entry =
                parse_crontab(&format!("* * * * * {command}\n"), "crontab -l", false).remove(0);
            tick_line_findings(
                &entry,
                &cron_tick_line(&entry.command).expect("a tick line"),
                Some(Path::new("/home/ann")),
            )
        };
        assert_eq!(
            findings_of("/usr/bin/runner --db /srv/a%b.db tick"),
            vec![(
                "cron runs only `/usr/bin/runner --db /srv/a`: it ends a command at its first \
                 unescaped % and sends the rest to the command's standard input"
                    .to_string(),
                "cron turns an unescaped % into a newline: write it \\% (`/usr/bin/runner --db \
                 /srv/a\\%b.db tick`), or set `RUNNER_DB=/srv/a%b.db` on a line of its own above \
                 the line (cron takes a variable line's % as written) and drop it from the command"
                    .to_string()
            )]
        );
        // Not in the database: only the escape. Each unescaped `%` is escaped, none twice.
        let findings = findings_of("/opt/a%b/runner tick 2>&1 | logger -t x\\%y%z");
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            findings[0].1,
            "cron turns an unescaped % into a newline: write it \\% (`/opt/a\\%b/runner tick \
             2>&1 | logger -t x\\%y\\%z`)"
        );
        // A cut inside a password is not shown: masking would no longer find it.
        let findings = findings_of("runner --db postgres://u:p%2Dx@h/db tick");
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert!(
            findings[0]
                .0
                .starts_with("cron runs only what comes before the `%`: "),
            "{findings:?}"
        );
        assert!(
            findings[0]
                .1
                .contains("(`runner --db postgres://u:***@h/db tick`)")
                && findings[0].1.contains("`RUNNER_DB=postgres://u:***@h/db`"),
            "{findings:?}"
        );
        assert!(!format!("{findings:?}").contains("2D"), "{findings:?}");
        // Escaped, it works.
        assert_eq!(
            findings_of("runner --db postgres://u:p\\%2Dx@h/db tick"),
            Vec::new()
        );
    }

    #[test]
    fn a_crontab_command_is_shown_with_every_postgres_password_masked() {
        for (command, shown) in [
            // On the command, as `--db URL`, `--db=URL` and `RUNNER_DB=URL`.
            (
                "RUNNER_DB=postgres://u:secret@db.example/runner runner tick",
                "RUNNER_DB=postgres://u:***@db.example/runner runner tick",
            ),
            (
                "runner --db postgres://u:secret@host/db tick",
                "runner --db postgres://u:***@host/db tick",
            ),
            (
                "/usr/bin/runner --db=postgresql://u:secret@host:5433/db tick -v",
                "/usr/bin/runner --db=postgresql://u:***@host:5433/db tick -v",
            ),
            (
                "env RUNNER_DB=postgres://u:secret@h/db flock -n /run/x runner tick >>/var/log/x 2>&1",
                "env RUNNER_DB=postgres://u:***@h/db flock -n /run/x runner tick >>/var/log/x 2>&1",
            ),
            // Percent-encoded, as a parameter (also after an unquoted `&`), and both at once.
            (
                "runner --db postgres://u:s%40c%3Aret@h/db tick",
                "runner --db postgres://u:***@h/db tick",
            ),
            (
                "runner --db 'postgres://u@h/db?sslmode=require&password=secret' tick",
                "runner --db 'postgres://u@h/db?sslmode=require&password=***' tick",
            ),
            (
                "runner --db postgres://u@h/db?sslmode=require&password=secret tick",
                "runner --db postgres://u@h/db?sslmode=require&password=*** tick",
            ),
            (
                "runner --db postgres://u:secret@h/db?password=secret tick",
                "runner --db postgres://u:***@h/db?password=*** tick",
            ),
            // Quoted, with a blank or a quote in the password; a scheme the tick refuses.
            (
                "RUNNER_DB=\"postgres://u:sec ret@h/db\" runner tick",
                "RUNNER_DB=\"postgres://u:***@h/db\" runner tick",
            ),
            (
                "runner --db \"postgres://u:sec'ret@h/db\" tick",
                "runner --db \"postgres://u:***@h/db\" tick",
            ),
            (
                "RUNNER_DB=POSTGRES://u:secret@h/db runner tick",
                "RUNNER_DB=POSTGRES://u:***@h/db runner tick",
            ),
            // Two URLs in one word, and in two.
            (
                "a=postgres://u:one@h/d;b=postgresql://u:two@h/e",
                "a=postgres://u:***@h/d;b=postgresql://u:***@h/e",
            ),
            (
                "runner --db postgres://u:one@h/d migrate --to postgres://u:two@h/e",
                "runner --db postgres://u:***@h/d migrate --to postgres://u:***@h/e",
            ),
            // An unclosed quote: masked to the end rather than in part.
            (
                "runner --db 'postgres://u:sec ret@h/db tick",
                "runner --db 'postgres://u:***@h/db tick",
            ),
            // A variable whose name ends in PASSWORD, in any case, quoted or not, however many;
            // alone (a user field); beside a URL.
            (
                "PGPASSWORD=secret runner tick",
                "PGPASSWORD=*** runner tick",
            ),
            (
                "env PGPASSWORD='sec\"ret x' db_Password=\"secret y\" A=1 runner tick",
                "env PGPASSWORD=*** db_Password=*** A=1 runner tick",
            ),
            ("PGPASSWORD=secret", "PGPASSWORD=***"),
            (
                "PGPASSWORD=secret RUNNER_DB=postgres://u:secret@h/db runner tick",
                "PGPASSWORD=*** RUNNER_DB=postgres://u:***@h/db runner tick",
            ),
        ] {
            assert_eq!(passwords_masked(command), shown, "{command}");
            assert!(!passwords_masked(command).contains("secret"), "{command}");
        }
        // Nothing else changes: no password, no URL, a SQLite path, a word like a scheme.
        for kept in [
            "runner --db postgres://u@h/db tick",
            "runner --db postgres://h/db?sslmode=require tick",
            "RUNNER_DB=/var/lib/runner/runner.db runner tick 2>&1 | logger -t 'a: b@c'",
            "pg_dump --dbname=postgres:x@y",
            "PASSWORD_FILE=/run/secrets/pg PASSWD=x runner --password-file=y tick",
            "* * * * *",
            "runner",
            "",
        ] {
            assert_eq!(passwords_masked(kept), kept);
        }
    }

    #[test]
    fn cron_ignores_system_crontabs_as_debians_cron_does() {
        let root = (0, "root".to_string());
        let nobody = (65534, "nobody".to_string());
        let file = |name: &str| CrontabFile {
            path: PathBuf::from("/etc/cron.d").join(name),
            in_cron_d: true,
            link_owner: None,
            owner: root.clone(),
            mode: 0o100644,
            hard_links: 1,
            regular: true,
        };
        // Read: root's, not writable by group or others, even executable or through root's link.
        for read in [
            file("runner"),
            file("Runner_2-x"),
            CrontabFile {
                mode: 0o100600,
                ..file("runner")
            },
            CrontabFile {
                mode: 0o100755,
                ..file("runner")
            },
            CrontabFile {
                link_owner: Some(root.clone()),
                ..file("runner")
            },
            CrontabFile {
                path: PathBuf::from("/etc/crontab.d"),
                in_cron_d: false,
                ..file("")
            },
        ] {
            assert_eq!(cron_ignores(&read, &root), None, "{read:?}");
        }
        let ignored = |file: CrontabFile| cron_ignores(&file, &root).expect("ignored");
        let both = ignored(CrontabFile {
            mode: 0o100666,
            owner: nobody.clone(),
            ..file("runner")
        });
        assert_eq!(
            both.reason,
            "cron ignores /etc/cron.d/runner: it is owned by nobody, not root, and it is writable \
             by group or others (mode 0666)"
        );
        assert_eq!(
            both.fix,
            "`sudo chown root /etc/cron.d/runner`; `sudo chmod go-w /etc/cron.d/runner`"
        );
        let group = ignored(CrontabFile {
            mode: 0o100664,
            ..file("runner")
        });
        assert!(group.reason.ends_with("(mode 0664)"), "{group:?}");
        let dotted = ignored(file("runner.conf"));
        assert_eq!(
            dotted.fix,
            "`sudo mv /etc/cron.d/runner.conf /etc/cron.d/runner-conf`"
        );
        let link = ignored(CrontabFile {
            link_owner: Some(nobody),
            ..file("runner")
        });
        assert_eq!(link.fix, "`sudo chown -h root /etc/cron.d/runner`");
        let linked = ignored(CrontabFile {
            hard_links: 2,
            ..file("runner")
        });
        assert!(linked.reason.ends_with("it has 2 hard links"), "{linked:?}");
        let dir = ignored(CrontabFile {
            regular: false,
            ..file("runner")
        });
        assert!(dir.reason.ends_with("it is not a regular file"), "{dir:?}");
    }

    #[test]
    fn the_database_of_a_tick_line_follows_cron_not_the_shell() {
        let entry = |env: &[(&str, &str)], command: &str| CronEntry {
            source: "x:1".into(),
            schedule: "* * * * *".into(),
            user: None,
            command: command.into(),
            env: env
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ignored: None,
        };
        let home = Path::new("/home/ann");
        let db = |e: &CronEntry| cron_database(e, &tick_line(&e.command).expect("tick"), home);
        assert_eq!(
            db(&entry(&[], "runner tick")),
            Location::Sqlite(PathBuf::from("/home/ann/.local/state/runner/runner.db"))
        );
        assert_eq!(
            db(&entry(&[("RUNNER_DB", "/srv/r.db")], "runner tick")),
            Location::Sqlite(PathBuf::from("/srv/r.db"))
        );
        assert_eq!(
            db(&entry(
                &[("RUNNER_DB", "/srv/r.db")],
                "RUNNER_DB=~/a.db runner tick"
            )),
            Location::Sqlite(PathBuf::from("/home/ann/a.db"))
        );
        assert_eq!(
            db(&entry(&[], "$HOME/bin/runner --db r.db tick")),
            Location::Sqlite(PathBuf::from("/home/ann/r.db"))
        );
        // The shell expands `$HOME` and `~/` in the command; cron expands nothing in a variable
        // line: the tick opens a file of that very name, from cron's working directory.
        assert_eq!(
            db(&entry(&[], "runner --db $HOME/r.db tick")),
            Location::Sqlite(PathBuf::from("/home/ann/r.db"))
        );
        for (value, file) in [
            ("$HOME/r.db", "/home/ann/$HOME/r.db"),
            ("${HOME}/r.db", "/home/ann/${HOME}/r.db"),
            ("~/r.db", "/home/ann/~/r.db"),
        ] {
            let variable_line = entry(&[("RUNNER_DB", value)], "runner tick");
            assert_eq!(
                db(&variable_line),
                Location::Sqlite(PathBuf::from(file)),
                "{value}"
            );
            let line = tick_line("runner tick").expect("tick");
            let findings = tick_line_findings(&variable_line, &line, Some(home));
            assert_eq!(
                findings,
                vec![(
                    format!(
                        "cron takes its variable lines as written, expanding nothing: \
                         `RUNNER_DB={value}` names the file {file}"
                    ),
                    "write the path out in full in that variable line: \
                     `RUNNER_DB=/home/ann/r.db`"
                        .to_string()
                )],
                "{value}"
            );
        }
        assert_eq!(
            db(&entry(&[("XDG_STATE_HOME", "/st")], "runner tick")),
            Location::Sqlite(PathBuf::from("/st/runner/runner.db"))
        );
        // Nor in `XDG_STATE_HOME=`: a relative value is ignored, an absolute one taken as written.
        for (value, finding, fix) in [
            (
                "$HOME/st",
                "is not an absolute path, which runner ignores: the tick uses \
                 /home/ann/.local/state/runner/runner.db",
                "write the path out in full in that variable line: `XDG_STATE_HOME=/home/ann/st`",
            ),
            (
                "~/st",
                "is not an absolute path, which runner ignores: the tick uses \
                 /home/ann/.local/state/runner/runner.db",
                "write the path out in full in that variable line: `XDG_STATE_HOME=/home/ann/st`",
            ),
            (
                "/srv/$USER",
                "names the directory /srv/$USER: the tick uses /srv/$USER/runner/runner.db",
                "write the directory out in full in that variable line, as an absolute path",
            ),
        ] {
            let variable_line = entry(&[("XDG_STATE_HOME", value)], "runner tick");
            let line = tick_line("runner tick").expect("tick");
            assert_eq!(
                tick_line_findings(&variable_line, &line, Some(home)),
                vec![(
                    format!(
                        "cron takes its variable lines as written, expanding nothing: \
                         `XDG_STATE_HOME={value}` {finding}"
                    ),
                    fix.to_string()
                )],
                "{value}"
            );
        }
        // It is no finding where the line names its database.
        for command in [
            "runner --db /srv/r.db tick",
            "RUNNER_DB=/srv/r.db runner tick",
        ] {
            let variable_line = entry(&[("XDG_STATE_HOME", "$HOME/st")], command);
            let line = tick_line(command).expect("tick");
            assert_eq!(
                tick_line_findings(&variable_line, &line, Some(home)),
                vec![],
                "{command}"
            );
        }
        // A crontab's `HOME=` is cron's `HOME`, and its working directory.
        let passwd_home = || PathBuf::from("/home/ann");
        assert_eq!(
            entry(&[("HOME", "/srv/h")], "runner tick").home(passwd_home()),
            PathBuf::from("/srv/h")
        );
        for env in [&[][..], &[("HOME", "")]] {
            assert_eq!(entry(env, "runner tick").home(passwd_home()), passwd_home());
        }
        // A URL is taken as written, not as a path under the home directory.
        assert_eq!(
            db(&entry(
                &[("RUNNER_DB", "postgres://runner@db.example.com/runner")],
                "runner tick"
            )),
            Location::Postgres("postgres://runner@db.example.com/runner".into())
        );
        // A database named `runner` in an assignment before the binary is no binary.
        let url = "postgres://u:pw@db.example/runner";
        assert_eq!(
            tick_line(&format!("RUNNER_DB={url} /usr/bin/runner tick")),
            Some(TickLine {
                binary: "/usr/bin/runner".into(),
                db_flag: None,
                db_assigned: Some(url.into()),
                percent_cut: None,
            })
        );
        assert_eq!(
            db(&entry(&[], &format!("env RUNNER_DB={url} runner tick"))),
            Location::Postgres(url.into())
        );
        assert_eq!(tick_line("runner status"), None);
        assert_eq!(tick_line("/usr/bin/backup tick"), None);
    }

    #[test]
    fn a_postgres_url_in_a_crontab_names_this_database_however_it_is_spelt() {
        let this = Location::parse("postgres://runner@db.example.com/runner?sslmode=require");
        for same in [
            "postgres://runner@db.example.com/runner?sslmode=require",
            "postgresql://runner:secret@db.example.com:5432/runner",
            "postgres://runner@db.example.com/runner?application_name=x&sslmode=verify-full",
            "postgres://db.example.com/runner?user=runner&password=secret",
        ] {
            assert!(same_database(&Location::parse(same), &this), "{same}");
        }
        for other in [
            "postgres://runner@db.example.com/other",
            "postgres://admin@db.example.com/runner",
            "postgres://runner@db.example.com:5433/runner",
            "postgres://runner@db2.example.com/runner",
            "postgres://runner@db.example.com:notaport/runner",
        ] {
            assert!(!same_database(&Location::parse(other), &this), "{other}");
        }
        assert!(!same_database(
            &Location::Sqlite(PathBuf::from("/var/lib/runner/runner.db")),
            &this
        ));
    }

    #[test]
    fn the_binary_of_a_tick_line_is_found_as_cron_expands_it() {
        let home = tempfile::tempdir().expect("home");
        let bin = home.path().join(".local/bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("runner"), "").expect("binary");
        let check = |command: &str| {
            let entry = CronEntry {
                source: "x:1".into(),
                schedule: "* * * * *".into(),
                user: None,
                command: command.into(),
                env: Vec::new(),
                ignored: None,
            };
            binary_check(&entry, &tick_line(command).expect("tick"), home.path())
        };
        // crontab.example's line, `$HOME` as cron's shell expands it, and its other spellings.
        for command in [
            "$HOME/.local/bin/runner tick",
            "${HOME}/.local/bin/runner tick",
            "~/.local/bin/runner tick",
            ".local/bin/runner tick",
        ] {
            assert_eq!(
                check(command).status,
                Status::Ok,
                "{command}: {:?}",
                check(command)
            );
        }
        assert_eq!(check("$HOME/bin/runner tick").status, Status::Fail);
        // A word taken for the binary is shown with any password in it masked.
        let url = check("/opt/wrap --db postgres://u:secret@h/runner tick");
        assert_eq!(
            url.message,
            "x:1 names `postgres://u:***@h/runner`, which is not there (cron's PATH=/usr/bin:/bin)"
        );
    }

    #[test]
    fn the_first_word_is_found_as_the_shell_parses_the_command() {
        use FirstWord::{Unknown, Word};
        let word = |w: &str| Word(w.to_string());
        let unknown = |w: &str| Unknown(w.to_string());
        for (command, expected) in [
            ("ls -l /", word("ls")),
            ("LANG=C /usr/bin/report --x", word("/usr/bin/report")),
            ("A=\"x y\" B=$(date +%s) tool", word("tool")),
            // Operators end a word, with or without blanks around them.
            ("true&&echo ok", word("true")),
            ("ls;echo", word("ls")),
            ("a|b", word("a")),
            ("cmd>out", word("cmd")),
            // Grouping and negation come before the command.
            ("(cd /tmp && ls) >/dev/null", word("cd")),
            ("((cd /srv))", word("cd")),
            ("{ a; b; }", word("a")),
            ("! grep -q x f", word("grep")),
            ("!(false)", word("false")),
            ("if test -f x; then y; fi", word("test")),
            ("while ! ping -c1 h; do sleep 1; done", word("ping")),
            // Redirections, with or without a blank before their target.
            (">/tmp/x echo hi", word("echo")),
            ("> /tmp/x echo hi", word("echo")),
            ("2>&1 cmd", word("cmd")),
            ("2>&- cmd", word("cmd")),
            ("< in sort", word("sort")),
            (">> f tool", word("tool")),
            ("<<'EOF' cat", word("cat")),
            ("\n  # a comment\n  backup --full", word("backup")),
            // Quotes removed, as the shell removes them.
            ("'my tool' run", word("my tool")),
            ("\"/opt/a b/run\" x", word("/opt/a b/run")),
            ("\\ls", word("ls")),
            ("[ -f /etc/x ] && run", word("[")),
            // Not reserved when not alone, or quoted: a command the shell looks for.
            ("!cmd", word("!cmd")),
            ("'if' x", word("if")),
            ("\"A\"=1 x", word("A=1")),
            // Only the shell can tell.
            ("$TOOL run", unknown("$TOOL")),
            ("\"$HOME/bin/x\"", unknown("\"$HOME/bin/x\"")),
            ("`which tool` run", unknown("`which tool`")),
            ("~/bin/x", unknown("~/bin/x")),
            ("./*.sh", unknown("./*.sh")),
            ("run[12]", unknown("run[12]")),
            ("for f in *; do x; done", unknown("for")),
            ("case $x in a) y;; esac", unknown("case")),
            ("'unclosed", unknown("'unclosed")),
            (";ls", unknown(";")),
            // `&>` is bash's redirection; dash (/bin/sh) reads `&` as ending a command, and one
            // that begins with it is a syntax error. `2&>f` runs `2` in the background.
            ("&>f tool", unknown("&")),
            ("&>>f tool", unknown("&")),
            ("2&>f tool", word("2")),
            ("2> ; ls", unknown("2>")),
            // Nothing runs.
            ("   ", FirstWord::None),
            ("A=1 B=2", FirstWord::None),
            (">/tmp/truncated", FirstWord::None),
            ("# only a comment", FirstWord::None),
        ] {
            assert_eq!(first_word(command), expected, "{command:?}");
        }
    }
}
