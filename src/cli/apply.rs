//! Schedules as code: `runner schedule apply FILE` makes the database's schedules match a TOML
//! file, `runner schedule export [NAME...]` writes that file from the database.
//!
//! The file has one table per schedule, named by the schedule, with the fields of `schedule add`
//! (snake_case) and the same defaults: a field the file leaves out takes its default, so the
//! file is the whole truth about each schedule it names. Each table becomes a `SettingsChange`
//! over `Settings::defaults` and is validated by `Settings::changed`, as `add` and `edit` do, so
//! the rules live in one place (the model); cursors restart with `restart_cursor`, as `edit`'s
//! do. Reading and validating the file (pure), planning against the database (pure), and
//! writing the plan (one store transaction) are separate steps: an invalid file changes nothing.
//! A refused file lists every problem found, not just the first (a table with a key unknown or
//! of the wrong type is not validated further); only a TOML syntax error stops the reading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::{actor, parse_whole_seconds, Ctx, SCHEDULE_NAME};
use crate::display::escape_line;
use crate::exit::Failure;
use crate::model::{validate_name, Definition, Settings, SettingsChange};
use crate::store::{self, Applied, DefinitionChanges, DefinitionRow, OpenMode, RunFilter, Store};
use crate::tick::materialize::{restart_cursor, settle_due, with_ended_pause_resumed};

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The TOML file: one table per schedule (`[backup]`, with `cron`, `command` and any other
    /// field of `schedule add`).
    #[arg(value_hint = clap::ValueHint::FilePath)]
    pub file: PathBuf,
    /// Print what would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove the schedules that are not in the file (with their runs and history).
    #[arg(long)]
    pub prune: bool,
    /// With --prune, also remove a schedule whose run is running: that run is cancelled first
    /// (its job is killed), as `schedule rm --force` does.
    #[arg(long, requires = "prune")]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Only these schedules [default: all].
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub names: Vec<String>,
}

/// A schedule's table in the file. Every field but `cron` and `command` is optional and then
/// takes the default of `schedule add`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    cron: Option<Spanned<String>>,
    command: Option<Spanned<CommandSpec>>,
    tz: Option<Spanned<String>>,
    max_attempts: Option<Spanned<i64>>,
    timeout: Option<Spanned<String>>,
    backoff_base: Option<Spanned<String>>,
    backoff_max: Option<Spanned<String>>,
    overlap: Option<Spanned<String>>,
    catch_up: Option<Spanned<String>>,
    grace: Option<Spanned<String>>,
    workdir: Option<Spanned<String>>,
    leftovers: Option<Spanned<String>>,
    paused: Option<Spanned<bool>>,
}

/// `command = "backup --full > /tmp/x"` is run by `/bin/sh -c` as written; `command = ["backup",
/// "--full"]` runs exactly those words, no shell syntax (they are quoted for `sh`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CommandSpec {
    Line(String),
    Words(Vec<String>),
}

/// A schedule as `export` writes it: `cron` and `command`, then only the fields that differ from
/// the defaults of `schedule add`, in the order `schedule add --help` lists them.
#[derive(Debug, Serialize)]
struct ExportEntry {
    cron: String,
    command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff_base: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff_max: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overlap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    catch_up: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workdir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leftovers: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
}

/// A problem with the file: where, which field, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub line: usize,
    pub schedule: String,
    pub field: &'static str,
    pub message: String,
}

/// The line (1-based) of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Line `line` (1-based) of `text`, or "".
fn line_text(text: &str, line: usize) -> &str {
    text.lines().nth(line.saturating_sub(1)).unwrap_or("")
}

/// The schedule a table header line names (`[name]`, `["a name"]`), or `None` for any other
/// line. For error messages only: the TOML parser has the last word on what the file means.
fn header_name(line: &str) -> Option<String> {
    let line = line.trim_start();
    if !line.starts_with('[') || line.starts_with("[[") {
        return None;
    }
    let inner = line[1..].split(']').next()?.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| inner.strip_prefix(*q).and_then(|s| s.strip_suffix(*q)));
    Some(unquoted.unwrap_or(inner).to_string())
}

/// The schedule whose table holds line `line`: the last header at or above it.
fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines().take(line).filter_map(header_name).last()
}

fn duration_text(secs: i64) -> String {
    crate::display::exact_duration(u64::try_from(secs).unwrap_or(0))
}

/// The flags of `schedule add` and the file's field names, so a message about a value speaks the
/// file's language.
const FIELD_FLAGS: [(&str, &str); 11] = [
    ("--max-attempts", "max_attempts"),
    ("--timeout", "timeout"),
    ("--backoff-base", "backoff_base"),
    ("--backoff-max", "backoff_max"),
    ("--catch-up", "catch_up"),
    ("--overlap", "overlap"),
    ("--grace", "grace"),
    ("--workdir", "workdir"),
    ("--leftovers", "leftovers"),
    ("--tz", "tz"),
    ("--cron", "cron"),
];

/// The schedule's field called `key` (as `shown_fields` names them), or "" for any other key.
fn field_named(key: &str) -> &'static str {
    shown_fields(&Settings::defaults(""))
        .into_iter()
        .find(|(field, _)| *field == key)
        .map_or("", |(field, _)| field)
}

/// The field a `key = value` line sets, when it is one of a schedule's: what a syntax error on
/// that line is about.
fn field_on(line: &str) -> &'static str {
    field_named(line.split('=').next().unwrap_or("").trim())
}

/// serde's words for what it wanted, in the file's terms (the types are Rust's).
fn wanted_in_file_terms(message: &str) -> String {
    message
        .replace("struct Entry", "a schedule's table ([name] and its fields)")
        .replace(
            "data did not match any variant of untagged enum CommandSpec",
            "expected a string (run by /bin/sh -c) or an array of strings (the command's words)",
        )
        // A whole number too large for 64 bits is read as Rust's i128 first.
        .replace("` as i128, expected i64", "`, expected a whole number")
        .replace("expected i64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("expected a boolean", "expected true or false")
}

/// The TOML name of a value's type where serde's differs: serde knows no date or time (toml
/// hands one over as a map with a private key, so serde says "map"), and calls a table a map and
/// an array a sequence.
fn type_in_file_terms(value: &DeValue<'_>) -> Option<&'static str> {
    match value {
        DeValue::Datetime(at) => Some(match (at.date, at.time, at.offset) {
            (Some(_), Some(_), Some(_)) => "offset date-time",
            (Some(_), Some(_), None) => "date-time",
            (Some(_), None, _) => "date",
            (None, _, _) => "time",
        }),
        DeValue::Table(_) => Some("table"),
        DeValue::Array(_) => Some("array"),
        _ => None,
    }
}

/// serde's "invalid type: map, expected ..." (or "sequence") about a value whose TOML type is
/// `kind` (`type_in_file_terms`), with the type named as the file has it.
fn named_type(message: &str, kind: &str) -> String {
    ["invalid type: map", "invalid type: sequence"]
        .iter()
        .fold(message.to_string(), |m, serde_type| {
            m.replacen(serde_type, &format!("invalid type: {kind}"), 1)
        })
}

fn in_file_terms(message: &str) -> String {
    FIELD_FLAGS
        .iter()
        .fold(message.to_string(), |m, (flag, field)| {
            m.replace(flag, field)
        })
}

/// A TOML error's line, and its message in the file's terms.
fn line_and_message(text: &str, e: &toml::de::Error) -> (usize, String) {
    let span = e.span().unwrap_or(0..0);
    // serde names the types it wanted; the file has tables, one per schedule, and values.
    let message = wanted_in_file_terms(e.message().trim());
    // Name what the error points at when the message does not (`duplicate key`).
    let at = text.get(span.clone()).unwrap_or("").trim();
    let message = if at.is_empty() || at.contains('\n') || message.contains(at) {
        message
    } else {
        format!("{message}: {at}")
    };
    (line_of(text, span.start), message)
}

/// A TOML error with no parsed table to blame (a syntax error, a value outside any table): its
/// schedule and field are what its line says.
fn error_at_line(text: &str, e: &toml::de::Error) -> FileError {
    let (line, message) = line_and_message(text, e);
    let schedule = table_at(text, line).unwrap_or_default();
    // A table header given twice is a schedule named twice: the error is on that header,
    // so `schedule` is its name; its first table is the first header of that name.
    let named_twice =
        e.message().trim() == "duplicate key" && header_name(line_text(text, line)).is_some();
    let first = named_twice
        .then(|| {
            text.lines()
                .take(line - 1)
                .position(|l| header_name(l).as_deref() == Some(schedule.as_str()))
        })
        .flatten()
        .map(|index| index + 1);
    let message = match first {
        Some(first) => format!("named twice (its first table is at line {first})"),
        None => message,
    };
    FileError {
        line,
        // A value outside any table is no schedule's field.
        field: match schedule.is_empty() {
            true => "",
            false => field_on(line_text(text, line)),
        },
        schedule,
        message,
    }
}

/// Parse and validate a schedules file: every schedule's settings, by name, or every problem
/// found (sorted by line). A syntax error stops reading: after it the text cannot be trusted.
/// Otherwise every table is read, and each of its keys that is unknown or has a value of the
/// wrong type is a problem; a table without such a problem is then validated, field by field.
///
/// `stored_workdir` gives a schedule's workdir as stored: a file that names it unchanged is not
/// refused when that directory is gone meanwhile (or its mount is not up yet), as `edit` of
/// another field is not; `export | apply` stays a no-op. Any other workdir must exist.
pub fn read_file(
    text: &str,
    stored_workdir: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<BTreeMap<String, Settings>, Vec<FileError>> {
    let root = DeTable::parse(text).map_err(|e| vec![error_at_line(text, &e)])?;
    let mut schedules = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, table) in root.get_ref() {
        let name = name.get_ref().as_ref();
        let settings = entry_of(name, table, text)
            .and_then(|entry| settings_of(name, &entry, text, stored_workdir));
        match settings {
            Ok(settings) => {
                schedules.insert(name.to_string(), settings);
            }
            Err(found) => errors.extend(found),
        }
    }
    if errors.is_empty() {
        Ok(schedules)
    } else {
        // Stable: one line's problems stay in the order they were found.
        errors.sort_by_key(|e| e.line);
        Err(errors)
    }
}

/// A schedule's table as an `Entry`, or one problem for each of its keys that is unknown or has
/// a value of the wrong type. serde stops at the first, so the key at fault is set aside and the
/// table read again, until the rest is read.
fn entry_of(
    name: &str,
    table: &Spanned<DeValue<'_>>,
    text: &str,
) -> std::result::Result<Spanned<Entry>, Vec<FileError>> {
    let mut table = table.clone();
    let mut errors = Vec::new();
    loop {
        let e = match Spanned::<Entry>::deserialize(ValueDeserializer::from(table.clone())) {
            Ok(entry) if errors.is_empty() => return Ok(entry),
            Ok(_) => return Err(errors),
            Err(e) => e,
        };
        let keys = match table.get_mut() {
            DeValue::Table(keys) => keys,
            // `[[name]]`: a list of tables, where a schedule is one.
            DeValue::Array(items)
                if !items.is_empty()
                    && items
                        .iter()
                        .all(|i| matches!(i.get_ref(), DeValue::Table(_))) =>
            {
                errors.push(FileError {
                    line: line_of(text, table.span().start),
                    schedule: name.to_string(),
                    field: "",
                    message: format!(
                        "[[{name}]] is an array of tables; a schedule is one table: [{name}]"
                    ),
                });
                return Err(errors);
            }
            // `x = [1, 2]` before any table: serde would read the array as the table's fields
            // in order, and complain of the first ("expected a string"). `x = 2026-11-30`: serde
            // would read the date as a table with toml's private key, and name that key.
            value @ (DeValue::Array(_) | DeValue::Datetime(_)) => {
                errors.push(FileError {
                    message: format!(
                        "invalid type: {}, expected a schedule's table ([name] and its fields)",
                        type_in_file_terms(value).unwrap_or("value")
                    ),
                    ..error_at_line(text, &e)
                });
                return Err(errors);
            }
            // `cron = 5` before any table: no schedule's, and nothing in it to set aside.
            _ => {
                errors.push(error_at_line(text, &e));
                return Err(errors);
            }
        };
        // The `key = value` the error is in: an unknown key's error is on the key, a wrong
        // type's on the value.
        let at = e.span().unwrap_or(0..0).start;
        let (key, value) = keys
            .iter()
            .find(|(key, value)| (key.span().start..value.span().end).contains(&at))
            .map(|(key, value)| (key.get_ref().to_string(), value.get_ref()))
            .unzip();
        let (line, message) = line_and_message(text, &e);
        let message = match value.and_then(type_in_file_terms) {
            Some(kind) => named_type(&message, kind),
            None => message,
        };
        errors.push(FileError {
            line,
            schedule: name.to_string(),
            field: key.as_deref().map_or("", field_named),
            message,
        });
        // Without a key to set aside, reading again would fail the same way.
        let Some(key) = key else {
            return Err(errors);
        };
        keys.remove(key.as_str());
    }
}

impl CommandSpec {
    /// The command as stored: the line `/bin/sh -c` runs.
    fn line(&self) -> std::result::Result<String, String> {
        match self {
            // Said in the file's terms: the model's message tells the command line to use `--`.
            CommandSpec::Line(line) if line.trim().is_empty() => {
                Err("the string is empty; give the command to run".to_string())
            }
            CommandSpec::Line(line) => Ok(line.clone()),
            CommandSpec::Words(words) if words.is_empty() => {
                Err("the array is empty; give the program and its arguments".to_string())
            }
            // Quoted, an empty program is `''`, which the shell cannot run: every run would
            // fail. A blank one is taken for the same mistake, not for a file named " ".
            CommandSpec::Words(words) if words[0].trim().is_empty() => Err(
                "the program (the array's first word) is empty; give the program and its \
                 arguments"
                    .to_string(),
            ),
            CommandSpec::Words(words) => {
                shlex::try_join(words.iter().map(String::as_str)).map_err(|e| e.to_string())
            }
        }
    }
}

/// One table's settings, validated as `schedule add` validates its flags, or every field at
/// fault. The fields are added one at a time and the whole validated after each, so a problem
/// is the field's just added; a field at fault is left out, so the fields after it are still
/// checked and none is blamed for it.
fn settings_of(
    name: &str,
    entry: &Spanned<Entry>,
    text: &str,
    stored_workdir: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<Settings, Vec<FileError>> {
    let table_line = line_of(text, entry.span().start);
    let fail = |line: usize, field: &'static str, message: String| FileError {
        line,
        schedule: name.to_string(),
        field,
        message: in_file_terms(&message),
    };
    let mut errors = Vec::new();
    if let Err(e) = validate_name(name) {
        errors.push(fail(table_line, "name", format!("{e:#}")));
    }
    let entry = entry.get_ref();
    if entry.cron.is_none() {
        errors.push(fail(
            table_line,
            "cron",
            "missing: every schedule needs cron = \"EXPR\"".to_string(),
        ));
    }
    if entry.command.is_none() {
        errors.push(fail(
            table_line,
            "command",
            "missing: every schedule needs command = \"...\" or [\"program\", \"arg\"]".to_string(),
        ));
    }

    // Each step sets one field of the change; the whole is then validated, as `schedule add`
    // would.
    type Step<'a> = (
        &'static str,
        usize,
        Box<dyn Fn(&mut SettingsChange) -> std::result::Result<(), String> + 'a>,
    );
    let at = |span: std::ops::Range<usize>| line_of(text, span.start);
    let duration = |value: &str| parse_whole_seconds(value);
    let mut steps: Vec<Step> = Vec::new();
    if let Some(cron) = &entry.cron {
        steps.push((
            "cron",
            at(cron.span()),
            Box::new(|f| {
                f.cron = Some(cron.get_ref().clone());
                Ok(())
            }),
        ));
    }
    if let Some(command) = &entry.command {
        steps.push((
            "command",
            at(command.span()),
            Box::new(|f| {
                f.command = Some(command.get_ref().line()?);
                Ok(())
            }),
        ));
    }
    if let Some(v) = &entry.tz {
        steps.push((
            "tz",
            at(v.span()),
            Box::new(|f| {
                f.timezone = Some(v.get_ref().clone());
                Ok(())
            }),
        ));
    }
    if let Some(v) = &entry.max_attempts {
        steps.push((
            "max_attempts",
            at(v.span()),
            Box::new(|f| {
                f.max_attempts = Some(*v.get_ref());
                Ok(())
            }),
        ));
    }
    for (field, value, set) in [
        (
            "timeout",
            &entry.timeout,
            (|f: &mut SettingsChange, d| f.timeout = Some(d)) as fn(&mut SettingsChange, Duration),
        ),
        ("backoff_base", &entry.backoff_base, |f, d| {
            f.backoff_base = Some(d)
        }),
        ("backoff_max", &entry.backoff_max, |f, d| {
            f.backoff_max = Some(d)
        }),
        ("grace", &entry.grace, |f, d| f.grace = Some(d)),
    ] {
        if let Some(v) = value {
            steps.push((
                field,
                at(v.span()),
                Box::new(move |f| {
                    set(f, duration(v.get_ref())?);
                    Ok(())
                }),
            ));
        }
    }
    if let Some(v) = &entry.overlap {
        steps.push((
            "overlap",
            at(v.span()),
            Box::new(|f| {
                f.overlap = Some(v.get_ref().parse().map_err(|e| format!("{e}"))?);
                Ok(())
            }),
        ));
    }
    if let Some(v) = &entry.catch_up {
        steps.push((
            "catch_up",
            at(v.span()),
            Box::new(|f| {
                f.catch_up = Some(v.get_ref().parse().map_err(|e| format!("{e}"))?);
                Ok(())
            }),
        ));
    }
    if let Some(v) = &entry.leftovers {
        steps.push((
            "leftovers",
            at(v.span()),
            Box::new(|f| {
                f.leftovers = Some(v.get_ref().parse().map_err(|e| format!("{e}"))?);
                Ok(())
            }),
        ));
    }
    // The stored workdir, unchanged and gone meanwhile: kept as it is, not checked again.
    let kept_workdir = entry.workdir.as_ref().and_then(|v| {
        let path = Path::new(v.get_ref());
        (!path.exists() && stored_workdir(name).as_deref() == Some(v.get_ref().as_str()))
            .then(|| v.get_ref().clone())
    });
    if let Some(v) = entry.workdir.as_ref().filter(|_| kept_workdir.is_none()) {
        steps.push((
            "workdir",
            at(v.span()),
            Box::new(|f| {
                f.workdir = Some(PathBuf::from(v.get_ref()));
                Ok(())
            }),
        ));
    }
    if let Some(v) = &entry.paused {
        steps.push((
            "paused",
            at(v.span()),
            Box::new(|f| {
                f.paused = *v.get_ref();
                Ok(())
            }),
        ));
    }

    // Stand-ins for the two required fields until the file's own replace them, so the other
    // fields are validated even when cron or command is missing or at fault. A table with any
    // problem yields no settings, so a stand-in is never stored.
    let mut flags = SettingsChange {
        cron: Some("@daily".to_string()),
        command: Some("true".to_string()),
        ..SettingsChange::default()
    };
    let check = |f: &SettingsChange| {
        Settings::defaults("")
            .changed(f)
            .map_err(|e| format!("{e:#}"))
    };
    // The two backoffs are checked against each other, so the base is checked against the
    // file's maximum when it gives a valid one, not against the default maximum (1h). Valid on
    // its own, that is with a base of 0, which any maximum allows: a maximum at fault is named
    // by its own step, not blamed on the base.
    let backoff_max = entry
        .backoff_max
        .as_ref()
        .and_then(|v| duration(v.get_ref()).ok())
        .filter(|max| {
            check(&SettingsChange {
                backoff_base: Some(Duration::ZERO),
                backoff_max: Some(*max),
                ..flags.clone()
            })
            .is_ok()
        });
    // A maximum given but at fault itself says nothing about the base: the base is then checked
    // alone (against itself), not against the default maximum the file did not ask for.
    let max_at_fault = entry.backoff_max.is_some() && backoff_max.is_none();
    for (field, line, set) in steps {
        let mut trial = flags.clone();
        let checked = set(&mut trial).and_then(|()| {
            if field == "backoff_base" {
                trial.backoff_max = trial
                    .backoff_max
                    .or(backoff_max)
                    .or(trial.backoff_base.filter(|_| max_at_fault));
            }
            check(&trial)
        });
        match checked {
            Ok(_) => flags = trial,
            Err(e) => errors.push(fail(line, field, e)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Every step passed, cron's and command's too: the whole, with no stand-in left, passes.
    let mut settings = check(&flags).map_err(|e| vec![fail(table_line, "", e)])?;
    if kept_workdir.is_some() {
        settings.workdir = kept_workdir;
    }
    Ok(settings)
}

/// One field that differs: the file's name for it, and its old and new values as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    pub field: &'static str,
    pub old: String,
    pub new: String,
}

/// The settings as the file's fields show them, in `schedule add --help` order.
fn shown_fields(s: &Settings) -> [(&'static str, String); 13] {
    [
        ("cron", s.cron.clone()),
        ("command", s.command.clone()),
        ("tz", s.timezone.clone()),
        ("max_attempts", s.max_attempts.to_string()),
        ("timeout", duration_text(s.timeout_secs)),
        ("backoff_base", duration_text(s.backoff_base_secs)),
        ("backoff_max", duration_text(s.backoff_max_secs)),
        ("overlap", s.overlap.to_string()),
        ("catch_up", s.catch_up.to_string()),
        ("grace", duration_text(s.grace_secs)),
        (
            "workdir",
            s.workdir
                .clone()
                .unwrap_or_else(|| "(the tick's)".to_string()),
        ),
        ("leftovers", s.leftovers.to_string()),
        ("paused", s.paused.to_string()),
    ]
}

fn field_changes(old: &Settings, new: &Settings) -> Vec<FieldChange> {
    shown_fields(old)
        .into_iter()
        .zip(shown_fields(new))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((field, old), (_, new))| FieldChange { field, old, new })
        .collect()
}

/// A schedule the file changes.
#[derive(Debug)]
pub struct Change {
    /// The schedule as read (a damaged one with the columns that are).
    pub definition: Definition,
    /// Its settings from the file.
    pub settings: Settings,
    /// What differs, from the schedule as the next tick would have it (see `ended_pause`).
    pub fields: Vec<FieldChange>,
    /// The problem of a damaged schedule, which the file repairs.
    pub damaged: Option<String>,
    /// The end of its `pause --for`, when that has passed: the next tick resumes it from the
    /// end, so apply does too, first, and the file's `paused = true` then pauses it for good.
    pub ended_pause: Option<i64>,
}

/// What applying a file does to the database.
#[derive(Debug, Default)]
pub struct Plan {
    pub add: Vec<(String, Settings)>,
    pub change: Vec<Change>,
    pub unchanged: Vec<String>,
    /// In the database, not in the file: removed with --prune, else left alone.
    pub not_in_file: Vec<String>,
}

/// Compare the file with the database at `now` (pure). A schedule whose `pause --for` has ended
/// is compared as the next tick will have it, resumed from the end (as `list` and `why` judge
/// it): the file's `paused = true` then pauses it again, for good, where comparing it as stored
/// found nothing to do and left the tick to resume it. Such a schedule is always changed: apply
/// resumes it first, as that tick would.
pub fn plan(
    wanted: &BTreeMap<String, Settings>,
    current: &[DefinitionRow],
    now: i64,
) -> Result<Plan> {
    let mut plan = Plan::default();
    let mut seen = std::collections::BTreeSet::new();
    for row in current {
        let (definition, damaged) = match row {
            Ok(d) => (d, None),
            Err(damaged) => match damaged.name() {
                Some(_) => (&damaged.definition, Some(damaged.problem_text())),
                // A row whose name cannot be read matches nothing and cannot be named: the
                // operator has to repair it (`schedule list` says how).
                None => continue,
            },
        };
        let name = &definition.name;
        seen.insert(name.clone());
        let Some(settings) = wanted.get(name) else {
            plan.not_in_file.push(name.clone());
            continue;
        };
        // A damaged schedule is not resumed (apply settles nothing of it): its columns are
        // compared as read.
        let mut as_ticked = definition.clone();
        let ended_pause = match definition.pause_end() {
            Some(end) if damaged.is_none() && with_ended_pause_resumed(&mut as_ticked, now)? => {
                Some(end)
            }
            _ => None,
        };
        if damaged.is_none() && ended_pause.is_none() && *settings == definition.settings {
            plan.unchanged.push(name.clone());
            continue;
        }
        plan.change.push(Change {
            definition: definition.clone(),
            settings: settings.clone(),
            fields: field_changes(&as_ticked.settings, settings),
            damaged,
            ended_pause,
        });
    }
    for (name, settings) in wanted {
        if !seen.contains(name) {
            plan.add.push((name.clone(), settings.clone()));
        }
    }
    Ok(plan)
}

/// The summary lines: `+ added`, `~ changed (field: old → new)`, `- removed`, `= unchanged`.
pub fn summary_lines(plan: &Plan, prune: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, _) in &plan.add {
        lines.push(format!("+ {}", escape_line(name)));
    }
    for change in &plan.change {
        let definition = &change.definition;
        let mut what: Vec<String> = change
            .fields
            .iter()
            .map(|c| {
                format!(
                    "{}: {} → {}",
                    c.field,
                    escape_line(&c.old),
                    escape_line(&c.new)
                )
            })
            .collect();
        if let Some(problem) = &change.damaged {
            what.insert(0, format!("repairs damaged {problem}"));
        }
        // Why `paused` reads false → true for a schedule `list` shows paused: its pause ended.
        if let Some(end) = change.ended_pause {
            what.push(format!(
                "its pause ended at {}, so it is resumed from then first, as the next tick would",
                crate::display::local_time(end, super::zone(&definition.settings.timezone))
            ));
        }
        lines.push(format!(
            "~ {} ({})",
            escape_line(&definition.name),
            what.join("; ")
        ));
    }
    if prune {
        for name in &plan.not_in_file {
            lines.push(format!("- {}", escape_line(name)));
        }
    }
    for name in &plan.unchanged {
        lines.push(format!("= {}", escape_line(name)));
    }
    lines
}

pub fn apply(args: ApplyArgs, ctx: &Ctx) -> Result<()> {
    let file = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Failure::usage(format!("cannot read {file}: {e}")))?;
    // Read only when the file names a workdir that does not exist (see `read_file`).
    let stored = std::cell::OnceCell::new();
    let stored_workdir = |name: &str| {
        stored
            .get_or_init(|| stored_workdirs(&ctx.location))
            .get(name)
            .cloned()
    };
    let wanted = read_file(&text, &stored_workdir).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| match (e.schedule.as_str(), e.field) {
                ("", "") => format!("{file}:{}: {}", e.line, e.message),
                (schedule, "") => format!(
                    "{file}:{}: schedule {}: {}",
                    e.line,
                    escape_line(schedule),
                    e.message
                ),
                (_, field) => format!(
                    "{file}:{}: schedule {}, field {field}: {}",
                    e.line,
                    escape_line(&e.schedule),
                    e.message
                ),
            })
            .collect();
        Failure::usage(format!("{} (nothing was changed)", lines.join("\n")))
    })?;

    // A dry run creates nothing: where there is no runner database yet (a missing or empty
    // SQLite file, a PostgreSQL database without runner's schema) it plans against no schedules
    // at all, as the apply, which makes the database there, would.
    let mut store = if args.dry_run {
        store::open_without_creating(&ctx.location)?
    } else {
        Some(ctx.open(OpenMode::CreateIfMissing)?)
    };
    let current = match &store {
        Some(store) => store.definitions()?,
        None => Vec::new(),
    };
    // One reading of the clock for the whole apply: which pauses have ended, what is due, and
    // where cursors restart.
    let now = ctx.clock.read();
    let plan = plan(&wanted, &current, now.secs())?;

    // Schedules to prune with a running run: refused unless --force.
    let mut running = Vec::new();
    if args.prune {
        if let Some(store) = &store {
            for name in &plan.not_in_file {
                let Some(Ok(definition)) = store.definition(name)? else {
                    continue;
                };
                let runs = store.history(&RunFilter {
                    definition_id: Some(definition.id),
                    status: Some(crate::model::RunStatus::Running),
                    since: None,
                    limit: 1000,
                })?;
                if !runs.is_empty() {
                    running.push((name.clone(), runs));
                }
            }
        }
    }
    // A dry run refuses too: a check mode must fail where the apply it checks would.
    if !running.is_empty() && !args.force {
        let names: Vec<String> = running.iter().map(|(n, _)| escape_line(n)).collect();
        return Err(Failure::usage(format!(
            "--prune would remove {} with a running run; removing it kills the job. Wait for it to \
             finish, or add --force to cancel the run first (nothing was changed)",
            names.join(", ")
        )));
    }

    for line in summary_lines(&plan, args.prune) {
        say!("{line}");
    }
    let removing = if args.prune {
        plan.not_in_file.len()
    } else {
        0
    };
    let counts = format!(
        "{} added, {} changed, {} removed, {} unchanged",
        plan.add.len(),
        plan.change.len(),
        removing,
        plan.unchanged.len()
    );
    let left_alone = if !args.prune && !plan.not_in_file.is_empty() {
        format!(
            "; {} schedule(s) not in the file left alone (--prune removes them)",
            plan.not_in_file.len()
        )
    } else {
        String::new()
    };
    if args.dry_run {
        say!("dry run, nothing changed: would be {counts}{left_alone}");
        return Ok(());
    }
    if plan.add.is_empty() && plan.change.is_empty() && removing == 0 {
        say!("no changes: the database already matches {file}{left_alone}");
        return Ok(());
    }
    let Some(store) = store.as_mut() else {
        unreachable!("a store is opened unless this is a dry run");
    };
    let me = actor(None);

    // --force: cancel the running runs of schedules to prune, as `schedule rm --force` does,
    // before the transaction (stopping a job is not something a transaction can undo).
    for (_, runs) in &running {
        for run in runs {
            super::steer::cancel_before_removal(store.as_mut(), ctx, &me, run)?;
        }
    }

    // As `edit` does: instants that came due before the change belong to the old settings, so
    // they are materialised first (what the next tick would have done); the change takes effect
    // from the next fire time after now.
    let mut update = Vec::new();
    for change in &plan.change {
        let (mut definition, settings) = (change.definition.clone(), &change.settings);
        // As `edit` does: a `pause --for` that has ended is resumed first, and the instants due
        // are settled even when the file pauses the schedule (the pause then holds their runs).
        if change.damaged.is_none() {
            let name = definition.name.clone();
            let again = |store: &dyn Store| reread(store, &name, &file);
            (definition, _) = settle_due(store.as_mut(), definition, now, &me, again)?;
        }
        definition.settings = settings.clone();
        definition.set_cursor(restart_cursor(
            &definition.settings,
            definition.materialized_through,
            now.secs(),
        )?);
        update.push(definition);
    }
    let mut add = Vec::new();
    for (name, settings) in &plan.add {
        let cursor = restart_cursor(settings, now.secs(), now.secs())?;
        add.push((name.clone(), settings.clone(), cursor.next_fire_at));
    }
    let changes = DefinitionChanges {
        add,
        update,
        remove: if args.prune {
            plan.not_in_file.clone()
        } else {
            Vec::new()
        },
    };
    // Test hook (see `crate::tick::test_hook`): `apply-commit` stalls here, after planning and
    // before the transaction, so tests can run a tick in between.
    crate::tick::test_hook("apply-commit");
    match store.apply_definitions(&changes, now.secs())? {
        Applied::Done => {}
        Applied::Conflict(name) => {
            return Err(anyhow::anyhow!(
                "schedule {} changed while applying {file}; nothing was changed: run apply again",
                escape_line(&name)
            ))
        }
        Applied::Running(name) => {
            return Err(anyhow::anyhow!(
                "a run of schedule {} started while applying {file}; nothing was changed: run apply again{}",
                escape_line(&name),
                if args.force { "" } else { " (with --force to cancel it)" }
            ))
        }
    }
    ctx.warn_if_unsafe_for_tick();
    say!("applied {file}: {counts}{left_alone}");
    Ok(())
}

/// The schedule named `name` as stored now, after this apply changed it (resumed it, or
/// materialised its due instants); an error if another command changed or removed it meanwhile.
/// Each stored schedule's workdir, by name; none where the database cannot be read (the file's
/// workdirs are then checked as for a new schedule, and the error says which is missing).
fn stored_workdirs(location: &store::Location) -> BTreeMap<String, String> {
    let Ok(Some(store)) = store::open_if_present(location) else {
        return BTreeMap::new();
    };
    let Ok(rows) = store.definitions() else {
        return BTreeMap::new();
    };
    rows.into_iter()
        .filter_map(|row| row.ok())
        .filter_map(|d| Some((d.name, d.settings.workdir?)))
        .collect()
}

fn reread(store: &dyn Store, name: &str, file: &str) -> Result<Definition> {
    match store.definition(name)? {
        Some(Ok(d)) => Ok(d),
        _ => Err(anyhow::anyhow!(
            "schedule {} changed while applying {file}; nothing was changed: run apply again",
            escape_line(name)
        )),
    }
}

/// The file `apply` reads, for these settings.
fn export_entry(s: &Settings) -> ExportEntry {
    let d = Settings::defaults(&s.cron);
    let differs = |a: String, b: String| (a != b).then_some(a);
    ExportEntry {
        cron: s.cron.clone(),
        command: s.command.clone(),
        tz: differs(s.timezone.clone(), d.timezone),
        max_attempts: (s.max_attempts != d.max_attempts).then_some(s.max_attempts),
        timeout: differs(duration_text(s.timeout_secs), duration_text(d.timeout_secs)),
        backoff_base: differs(
            duration_text(s.backoff_base_secs),
            duration_text(d.backoff_base_secs),
        ),
        backoff_max: differs(
            duration_text(s.backoff_max_secs),
            duration_text(d.backoff_max_secs),
        ),
        overlap: differs(s.overlap.to_string(), d.overlap.to_string()),
        catch_up: differs(s.catch_up.to_string(), d.catch_up.to_string()),
        grace: differs(duration_text(s.grace_secs), duration_text(d.grace_secs)),
        workdir: s.workdir.clone(),
        leftovers: differs(s.leftovers.to_string(), d.leftovers.to_string()),
        paused: s.paused,
    }
}

pub fn export(args: ExportArgs, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let mut definitions = Vec::new();
    // Damaged schedules cannot be written as settings. They are left out, but the export then
    // fails (exit 4, as `show` of a damaged schedule does): a file made from it lacks them, and
    // `apply --prune` of that file would remove them with their runs. What could be exported is
    // still printed: a script without `set -e` that applies the file anyway would, from an
    // empty file, prune every schedule instead.
    let mut left_out = Vec::new();
    if args.names.is_empty() {
        for row in store.definitions()? {
            match row {
                Ok(d) => definitions.push(d),
                Err(damaged) => {
                    crate::complain!("runner: warning: not exported: {damaged}");
                    left_out.push(damaged.label());
                }
            }
        }
    } else {
        for name in &args.names {
            definitions.push(super::find_definition(store.as_ref(), name)?);
        }
    }
    // A `pause --for` that has ended is the next tick's to resume: exported as that tick will
    // have it, not paused, so that applying the file does what the tick would.
    let now = ctx.clock.read().secs();
    let mut resumed = Vec::new();
    for d in &mut definitions {
        if let Some(end) = d.pause_end() {
            if with_ended_pause_resumed(d, now)? {
                resumed.push((d.name.clone(), end));
            }
        }
    }
    let entries: BTreeMap<String, ExportEntry> = definitions
        .iter()
        .map(|d| (d.name.clone(), export_entry(&d.settings)))
        .collect();
    let body = toml::to_string(&entries).context("writing TOML")?;
    say!(
        "# runner schedules from {}; `runner schedule apply FILE` makes a database match this file.",
        escape_line(&store.describe())
    );
    say!("# Fields left out take the defaults of `runner schedule add`.");
    if !left_out.is_empty() {
        say!(
            "# INCOMPLETE: damaged, so left out: {}. Do not apply this file with --prune: it \
             would remove them and their runs.",
            left_out.join(", ")
        );
    }
    // A pause's end is the operator's, not configuration: the file holds `paused = true` only.
    for d in &definitions {
        if let Some(until) = d.pause_end() {
            say!(
                "# {} is paused until {} (`pause --for`): the end is not in this file; apply \
                 leaves it as it is, and elsewhere the pause has no end.",
                escape_line(&d.name),
                crate::display::utc_time(until)
            );
        }
    }
    for (name, end) in &resumed {
        say!(
            "# {}'s pause ended at {} (`pause --for`): the next tick resumes it, so it is not \
             paused in this file.",
            escape_line(name),
            crate::display::utc_time(*end)
        );
    }
    say!("");
    super::emit(&body)?;
    if !left_out.is_empty() {
        return Err(Failure::database(format!(
            "the export is incomplete: {} left out, damaged (see above); a file made from this \
             output must not be applied with --prune, which would remove {} and {} runs. \
             Repair with `runner schedule edit`, then export again",
            left_out.join(", "),
            if left_out.len() == 1 { "it" } else { "them" },
            if left_out.len() == 1 { "its" } else { "their" },
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<FileError> {
        read_file(text, &|_| None).expect_err("invalid")
    }

    #[test]
    fn fields_left_out_take_the_defaults_of_add() {
        let schedules = read_file(
            "[backup]\ncron = \"30 2 * * *\"\ncommand = [\"/usr/bin/backup\", \"--tag\", \"a b\"]\ntimeout = \"2h\"\n",
            &|_| None,
        )
        .expect("valid");
        let s = &schedules["backup"];
        assert_eq!(s.command, "/usr/bin/backup --tag 'a b'");
        assert_eq!(s.timeout_secs, 7200);
        assert_eq!(
            Settings {
                command: s.command.clone(),
                timeout_secs: 7200,
                ..Settings::defaults("30 2 * * *")
            },
            *s
        );
    }

    #[test]
    fn a_problem_names_its_line_schedule_and_field() {
        let text = "[a]\ncron = \"* * * * *\"\ncommand = \"true\"\n\n[b]\ncron = \"61 * * * *\"\ncommand = \"true\"\n\n[c]\ncommand = \"x\"\ncron = \"@daily\"\nmax_attempts = 0\n";
        let found = errors(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].line, found[0].field), (6, "cron"));
        assert_eq!(found[0].schedule, "b");
        assert_eq!((found[1].line, found[1].field), (12, "max_attempts"));
        assert!(
            found[1].message.contains("max_attempts must be between 1"),
            "{found:?}"
        );
    }

    #[test]
    fn unknown_keys_duplicates_and_backoff_rules_are_refused() {
        let unknown = errors("[a]\ncron = \"* * * * *\"\ncommand = \"true\"\ntimeout_secs = 5\n");
        assert_eq!(unknown[0].line, 4);
        assert!(unknown[0].message.contains("timeout_secs"), "{unknown:?}");
        let duplicate =
            errors("[a]\ncron = \"* * * * *\"\ncommand = \"true\"\n[a]\ncron = \"* * * * *\"\n");
        assert_eq!(duplicate[0].line, 4, "{duplicate:?}");
        assert_eq!(duplicate[0].schedule, "a", "{duplicate:?}");
        assert!(
            duplicate[0]
                .message
                .contains("named twice (its first table is at line 1)"),
            "{duplicate:?}"
        );
        assert_eq!(unknown[0].schedule, "a", "{unknown:?}");
        let quoted = errors("[\"a b\"] # the schedule\ncron = \"* * * * *\"\nbogus = 1\n");
        assert_eq!(quoted[0].schedule, "a b", "{quoted:?}");
        let outside = errors("cron = 5\n[a]\ncron = \"* * * * *\"\ncommand = \"true\"\n");
        assert_eq!((outside[0].line, outside[0].schedule.as_str()), (1, ""));
        assert!(
            outside[0]
                .message
                .contains("expected a schedule's table ([name] and its fields)"),
            "{outside:?}"
        );
        assert_eq!(outside[0].field, "");
        // An array of tables is no schedule: named as the schedule it meant to be.
        let array =
            errors("[a]\ncron = \"@daily\"\ncommand = \"true\"\n[[b]]\ncron = \"@daily\"\n");
        assert_eq!(
            (array[0].line, array[0].schedule.as_str()),
            (4, "b"),
            "{array:?}"
        );
        assert_eq!(
            array[0].message,
            "[[b]] is an array of tables; a schedule is one table: [b]"
        );
        // A plain array outside any table is a value, not an array of tables.
        for value in ["[1, 2]", "[]"] {
            let plain = errors(&format!(
                "x = {value}\n[a]\ncron = \"@daily\"\ncommand = \"true\"\n"
            ));
            assert!(
                plain[0].message.contains("expected a schedule's table"),
                "{plain:?}"
            );
        }
        // A value of the wrong type names its field, in the file's terms (not Rust's types).
        for (line, field, wanted) in [
            (
                "command = 5",
                "command",
                "a string (run by /bin/sh -c) or an array of strings",
            ),
            ("timeout = 90", "timeout", "expected a string"),
            (
                "max_attempts = \"5\"",
                "max_attempts",
                "expected a whole number",
            ),
            ("paused = \"yes\"", "paused", "expected true or false"),
            (
                "max_attempts = 2026-11-30",
                "max_attempts",
                "invalid type: date, expected a whole number",
            ),
            (
                "timeout = {}",
                "timeout",
                "invalid type: table, expected a string",
            ),
            (
                "max_attempts = 99999999999999999999",
                "max_attempts",
                "`99999999999999999999`, expected a whole number",
            ),
        ] {
            let typed = errors(&format!("[a]\ncron = \"* * * * *\"\n{line}\n"));
            assert_eq!((typed[0].line, typed[0].field), (3, field), "{typed:?}");
            assert!(typed[0].message.contains(wanted), "{typed:?}");
            assert!(!typed[0].message.contains("enum"), "{typed:?}");
            assert!(!typed[0].message.contains("i128"), "{typed:?}");
        }
        let backoff = errors("[a]\ncron = \"* * * * *\"\ncommand = \"true\"\nbackoff_base = \"2h\"\nbackoff_max = \"1h\"\n");
        // The field that broke the rule, given those before it (and the defaults).
        assert_eq!((backoff[0].line, backoff[0].field), (4, "backoff_base"));
        assert!(
            backoff[0]
                .message
                .contains("backoff_max (1h) must not be shorter than backoff_base (2h)"),
            "{backoff:?}"
        );
    }

    /// (line, schedule, field) of each problem, in the order reported.
    fn places(found: &[FileError]) -> Vec<(usize, &str, &str)> {
        found
            .iter()
            .map(|e| (e.line, e.schedule.as_str(), e.field))
            .collect()
    }

    #[test]
    fn every_wrong_type_and_unknown_key_is_reported_in_every_table() {
        let text = "[a]\ncron = \"* * * * *\"\ncommand = \"true\"\nmax_attempts = \"three\"\npaused = 1\n\n\
                    [b]\ncron = \"@daily\"\ncommand = 5\ntimeout_secs = 5\n\n\
                    [c]\ncron = \"61 * * * *\"\ncommand = \"true\"\n\n\
                    [d]\ncron = \"@daily\"\ncommand = [\"a\", 5]\nbogus = true\n\n\
                    [e]\ncron = \"@daily\"\ncommand = \"true\"\n";
        let found = errors(text);
        // Table c has no type error: its bad cron is found by validation, as before.
        assert_eq!(
            places(&found),
            [
                (4, "a", "max_attempts"),
                (5, "a", "paused"),
                (9, "b", "command"),
                (10, "b", ""),
                (13, "c", "cron"),
                (18, "d", "command"),
                (19, "d", ""),
            ],
            "{found:?}"
        );
        for (index, wanted) in [
            (0, "expected a whole number"),
            (1, "expected true or false"),
            (2, "a string (run by /bin/sh -c) or an array of strings"),
            (3, "unknown field `timeout_secs`"),
            (4, "invalid cron expression"),
            (5, "a string (run by /bin/sh -c) or an array of strings"),
            (6, "unknown field `bogus`"),
        ] {
            assert!(found[index].message.contains(wanted), "{found:?}");
        }
    }

    #[test]
    fn each_independent_field_is_validated_on_its_own() {
        let text = "[a]\ncron = \"61 * * * *\"\ncommand = \"true\"\ntz = \"Mars/Olympus\"\nmax_attempts = 0\n\
                    timeout = \"soon\"\nbackoff_base = \"2h\"\nbackoff_max = \"1h\"\n\n\
                    [b]\ntz = \"Nowhere/Else\"\n\n\
                    [c]\ncron = \"@daily\"\ncommand = \"true\"\nbackoff_base = \"2h\"\nbackoff_max = \"7300d\"\n";
        let found = errors(text);
        assert_eq!(
            places(&found),
            [
                (2, "a", "cron"),
                (4, "a", "tz"),
                (5, "a", "max_attempts"),
                (6, "a", "timeout"),
                // The two backoffs break one rule together: named once, on the base.
                (7, "a", "backoff_base"),
                (10, "b", "cron"),
                (10, "b", "command"),
                (11, "b", "tz"),
                // A maximum wrong on its own is the maximum's problem, not the base's (2h,
                // over the default maximum the file did not ask for).
                (17, "c", "backoff_max"),
            ],
            "{found:?}"
        );
        assert!(found[1].message.contains("Mars/Olympus"), "{found:?}");
        assert!(found[4].message.contains("backoff_max (1h)"), "{found:?}");
        assert!(found[5].message.starts_with("missing"), "{found:?}");
        assert!(found[8].message.contains("too large"), "{found:?}");
    }

    #[test]
    fn export_writes_what_apply_reads_back_identically() {
        let s = Settings {
            command: "echo \"a\" > /tmp/x; exit 3".to_string(),
            timezone: "Europe/Berlin".to_string(),
            timeout_secs: 5400,
            paused: true,
            ..Settings::defaults("0 9 * * MON-FRI")
        };
        let mut entries = BTreeMap::new();
        entries.insert("reports.daily".to_string(), export_entry(&s));
        let text = toml::to_string(&entries).expect("toml");
        assert!(text.contains("[\"reports.daily\"]"), "{text}");
        assert_eq!(
            read_file(&text, &|_| None).expect("valid")["reports.daily"],
            s
        );
    }

    #[test]
    fn the_plan_adds_changes_and_leaves_alone() {
        let mut wanted = BTreeMap::new();
        wanted.insert("new".to_string(), Settings::defaults("* * * * *"));
        let mut same = Settings::defaults("@daily");
        same.command = "true".to_string();
        wanted.insert("same".to_string(), same.clone());
        let definition = Definition::fixture;
        let mut changed = same.clone();
        changed.timeout_secs = 60;
        wanted.insert("edited".to_string(), same.clone());
        let current = vec![
            Ok(definition("same", same.clone())),
            Ok(definition("edited", changed)),
            Ok(definition("old", same)),
        ];
        let plan = plan(&wanted, &current, 0).expect("plan");
        assert_eq!(
            summary_lines(&plan, true),
            ["+ new", "~ edited (timeout: 1m → 1h)", "- old", "= same"]
        );
        assert_eq!(summary_lines(&plan, false).len(), 3);
    }
}
