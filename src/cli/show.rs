//! `runner show RUN_ID`: one run, every attempt with its output tails, every event.
//! Captured output is escaped (`display::escape_output`), stored values such as the command on one
//! line (`display::escape_line`): control characters, escape sequences and bidi controls are
//! shown, never interpreted by the terminal.

use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use super::history::RunRow;
use super::{emit, emit_json, held_by_pause, zone, Ctx};
use crate::display::{
    duration_of_ms, duration_of_secs, escape_line, escape_output, local_time, UtcTime,
};
use crate::exit::Failure;
use crate::model::RunStatus;
use crate::store::{AttemptView, EventView, OpenMode, RunView, Store};
use crate::tz::Tz;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run id, as `runner history` lists it.
    pub run_id: i64,
    /// Machine-readable output: the run with `attempts` and `events` arrays, each attempt with
    /// all of its kept output (`--tail` and `--no-output` shape the text view only).
    #[arg(long)]
    pub json: bool,
    /// Print the last N lines of each attempt's stdout and stderr; 0 prints all that was kept.
    #[arg(long, value_name = "N", default_value_t = 50, conflicts_with = "json")]
    pub tail: usize,
    /// Print no captured output, only how much each stream had.
    #[arg(long, conflicts_with_all = ["tail", "json"])]
    pub no_output: bool,
}

/// How much captured output the text view prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// The last N lines of each stream (0: all that was kept).
    Tail(usize),
    None,
}

/// The run with this id, or exit 3.
pub fn find_run(store: &dyn Store, run_id: i64) -> Result<RunView> {
    store.run(run_id)?.ok_or_else(|| {
        Failure::not_found(format!(
            "no run with id {run_id}; `runner history` lists them (pruned runs are gone)"
        ))
    })
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let run = find_run(store.as_ref(), args.run_id)?;
    let attempts = store.attempts(run.id)?;
    let events = store.events(run.id)?;
    let now = ctx.clock.epoch();
    let mut detail = RunDetail::of(&run, &attempts, &events, now);
    if run.status == RunStatus::Pending {
        if let Some(Ok(definition)) = store.definition(&run.job)? {
            detail.held = held_by_pause(&definition, now);
        }
    }
    if args.json {
        return emit_json(&detail);
    }
    let output = if args.no_output {
        Output::None
    } else {
        Output::Tail(args.tail)
    };
    emit(&render(&detail, now, output)?)
}

/// A run in full: `show`'s text and `show --json`, rendered from this alike. The JSON is a
/// `history --json` entry with the rest of the run, its attempts and its events.
#[derive(Debug, Serialize)]
struct RunDetail<'a> {
    #[serde(flatten)]
    run: RunRow<'a>,
    command: &'a str,
    workdir: Option<&'a str>,
    idempotency_key: &'a str,
    owner: Option<&'a str>,
    lease_expires_at: Option<UtcTime>,
    lease_expires_at_epoch: Option<i64>,
    heartbeat_at: Option<UtcTime>,
    heartbeat_at_epoch: Option<i64>,
    /// Cancelled while running, its job not yet known stopped: the tick holding it stops it,
    /// or, past this, the next tick does (null otherwise).
    stopping_by: Option<UtcTime>,
    stopping_by_epoch: Option<i64>,
    attempts: Vec<AttemptRow<'a>>,
    events: Vec<EventRow<'a>>,
    /// A pending run held by its paused schedule: why, and until when (the text's status line;
    /// `status` counts such runs in JSON).
    #[serde(skip)]
    held: Option<String>,
}

impl<'a> RunDetail<'a> {
    fn of(
        run: &'a RunView,
        attempts: &'a [AttemptView],
        events: &'a [EventView],
        now: i64,
    ) -> Self {
        RunDetail {
            run: RunRow::of(run, now),
            command: &run.command,
            workdir: run.workdir.as_deref(),
            idempotency_key: &run.idempotency_key,
            owner: run.owner.as_deref(),
            lease_expires_at: run.lease_expires_at.map(UtcTime),
            lease_expires_at_epoch: run.lease_expires_at,
            heartbeat_at: run.heartbeat_at.map(UtcTime),
            heartbeat_at_epoch: run.heartbeat_at,
            stopping_by: run.stopping_by.map(UtcTime),
            stopping_by_epoch: run.stopping_by,
            attempts: attempts.iter().map(AttemptRow::of).collect(),
            events: events.iter().map(EventRow::of).collect(),
            held: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct AttemptRow<'a> {
    attempt: u32,
    owner: &'a str,
    host: &'a str,
    runner_pid: u32,
    child_pid: Option<u32>,
    started_at: UtcTime,
    started_at_epoch: i64,
    finished_at: Option<UtcTime>,
    finished_at_epoch: Option<i64>,
    duration_ms: Option<i64>,
    outcome: Option<&'a str>,
    exit_code: Option<i32>,
    error_code: Option<&'a str>,
    error_detail: Option<&'a str>,
    /// Null while the attempt runs (output is kept when it ends), and for an attempt whose
    /// runner never saw it end (closed by recovery).
    stdout_tail: Option<Tail<'a>>,
    stderr_tail: Option<Tail<'a>>,
    stdout_bytes: Option<i64>,
    stderr_bytes: Option<i64>,
}

impl<'a> AttemptRow<'a> {
    fn of(a: &'a AttemptView) -> Self {
        AttemptRow {
            attempt: a.attempt,
            owner: &a.owner,
            host: &a.host,
            runner_pid: a.runner_pid,
            child_pid: a.child_pid,
            started_at: UtcTime(a.started_at),
            started_at_epoch: a.started_at,
            finished_at: a.finished_at.map(UtcTime),
            finished_at_epoch: a.finished_at,
            duration_ms: a.duration_ms,
            outcome: a.outcome.as_deref(),
            exit_code: a.exit_code,
            error_code: a.error_code.as_deref(),
            error_detail: a.error_detail.as_deref(),
            stdout_tail: a.finished_at.and(a.stdout_tail.as_deref()).map(Tail),
            stderr_tail: a.finished_at.and(a.stderr_tail.as_deref()).map(Tail),
            stdout_bytes: a.stdout_bytes,
            stderr_bytes: a.stderr_bytes,
        }
    }
}

/// The captured end of an output stream. In JSON it is escaped like the text view, so a consumer
/// that prints it is safe too.
#[derive(Debug)]
struct Tail<'a>(&'a [u8]);

impl Serialize for Tail<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&escape_output(self.0))
    }
}

#[derive(Debug, Serialize)]
struct EventRow<'a> {
    at: UtcTime,
    at_epoch: i64,
    kind: &'a str,
    actor: &'a str,
    detail: EventDetail<'a>,
}

impl<'a> EventRow<'a> {
    fn of(e: &'a EventView) -> Self {
        EventRow {
            at: UtcTime(e.at),
            at_epoch: e.at,
            kind: &e.kind,
            actor: &e.actor,
            detail: EventDetail(e.detail.as_deref()),
        }
    }
}

/// An event's detail as stored (JSON text): printed as it is, and in JSON as the value it holds
/// (null if it holds none).
#[derive(Debug)]
struct EventDetail<'a>(Option<&'a str>);

impl EventDetail<'_> {
    fn value(&self) -> Option<Value> {
        self.0.and_then(|d| serde_json::from_str(d).ok())
    }
}

impl Serialize for EventDetail<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// A stored value (command, name, detail) safe to print on one line.
fn safe(text: &str) -> String {
    escape_line(text)
}

fn render(detail: &RunDetail, now: i64, output: Output) -> Result<String, std::fmt::Error> {
    let run = &detail.run;
    let tz = zone(run.timezone);
    let at = |epoch: i64| local_time(epoch, tz);
    let mut out = String::new();
    writeln!(
        out,
        "run {} of {} ({} run, times in {})",
        run.id,
        safe(run.job),
        run.trigger,
        safe(run.timezone)
    )?;
    writeln!(out, "  status:     {}", status_line(detail, tz, now))?;
    if let Some(error) = run.error_detail {
        // Named by its attempt when it is not the current one's (a retry is running).
        match (run.status, run.error_attempt) {
            (RunStatus::Running, Some(n)) => {
                writeln!(out, "  error:      attempt {n}: {}", safe(error))?
            }
            _ => writeln!(out, "  error:      {}", safe(error))?,
        }
    }
    writeln!(out, "  scheduled:  {}", at(run.scheduled_for_epoch))?;
    writeln!(out, "  created:    {}", at(run.created_at_epoch))?;
    if let Some(started) = run.started_at_epoch {
        writeln!(out, "  started:    {}", at(started))?;
    }
    if let Some(finished) = run.finished_at_epoch {
        writeln!(out, "  finished:   {}", at(finished))?;
    }
    writeln!(out, "  command:    {}", safe(detail.command))?;
    if let Some(dir) = detail.workdir {
        writeln!(out, "  workdir:    {}", safe(dir))?;
    }
    writeln!(out, "  key:        {}", safe(detail.idempotency_key))?;

    for a in &detail.attempts {
        writeln!(out)?;
        render_attempt(&mut out, a, tz, now, output)?;
        if let Some(line) = leftovers_line(&detail.events, a.attempt) {
            writeln!(out, "  leftovers:  {}", safe(&line))?;
        }
    }

    writeln!(out)?;
    writeln!(out, "events:")?;
    for e in &detail.events {
        let text = e.detail.0.map(safe).unwrap_or_default();
        writeln!(
            out,
            "  {}  {:<16} {:<20} {text}",
            at(e.at_epoch),
            e.kind,
            safe(e.actor)
        )?;
    }
    Ok(out)
}

/// What an attempt left running when its shell exited, from its `LEFTOVERS` event:
/// "killed 2 leftover processes: 4242 sh, 4243 sleep".
fn leftovers_line(events: &[EventRow], attempt: u32) -> Option<String> {
    let detail: Value = events
        .iter()
        .filter(|e| e.kind == "LEFTOVERS")
        .filter_map(|e| e.detail.value())
        .find(|d: &Value| d["attempt"].as_u64() == Some(u64::from(attempt)))?;
    let processes: Vec<&str> = detail["processes"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let count = processes.len();
    let noun = if count == 1 { "process" } else { "processes" };
    let done = if detail["killed"].as_bool() == Some(true) {
        "killed"
    } else {
        "kept (--leftovers keep)"
    };
    Some(format!(
        "{done} {count} leftover {noun}: {}",
        processes.join(", ")
    ))
}

/// One line on where the run stands and what happens next.
fn status_line(detail: &RunDetail, tz: Tz, now: i64) -> String {
    let run = &detail.run;
    let of = format!("{} of {}", run.attempt, run.max_attempts);
    let code = run.error_code.unwrap_or("");
    let held = detail
        .held
        .as_ref()
        .map(|held| format!("; {held}"))
        .unwrap_or_default();
    match run.status {
        RunStatus::Pending if run.attempt == 0 => match &detail.held {
            Some(held) => format!("pending: {held}"),
            None if run.run_at_epoch <= now => "pending: due, the next tick runs it".to_string(),
            None => format!("pending: due at {}", local_time(run.run_at_epoch, tz)),
        },
        RunStatus::Pending => format!(
            "pending: attempt {of} failed ({code}); attempt {} at {}{held}",
            run.attempt + 1,
            local_time(run.run_at_epoch, tz)
        ),
        RunStatus::Running => format!(
            "running: attempt {of}{}, held by {} until {}",
            run.elapsed_secs
                .map(|secs| format!(" for {}", duration_of_secs(secs)))
                .unwrap_or_default(),
            detail.owner.map(safe).unwrap_or_default(),
            detail
                .lease_expires_at_epoch
                .map_or_else(|| "?".to_string(), |t| local_time(t, tz))
        ),
        RunStatus::Succeeded => format!("succeeded on attempt {of}"),
        RunStatus::Dead => format!("dead after attempt {of}: {code}"),
        RunStatus::Cancelled => match detail.stopping_by_epoch {
            Some(by) => format!(
                "cancelled after {} attempt(s); its job is being stopped (by the tick holding \
                 it, or, from {}, by the next tick)",
                run.attempt,
                local_time(by, tz)
            ),
            None => format!("cancelled after {} attempt(s)", run.attempt),
        },
        RunStatus::Skipped => format!("skipped: {}", run.skip_reason.map(safe).unwrap_or_default()),
    }
}

fn render_attempt(
    out: &mut String,
    a: &AttemptRow,
    tz: Tz,
    now: i64,
    output: Output,
) -> Result<(), std::fmt::Error> {
    let result = match (a.error_code, a.exit_code, a.finished_at_epoch) {
        (_, _, None) => format!("running for {}", duration_of_secs(now - a.started_at_epoch)),
        (Some(code), _, _) => code.to_string(),
        (None, Some(code), _) => format!("exit {code}"),
        (None, None, _) => "finished".to_string(),
    };
    let took = a
        .duration_ms
        .map(|ms| format!(" after {}", duration_of_ms(ms)))
        .unwrap_or_default();
    writeln!(out, "attempt {}: {result}{took}", a.attempt)?;
    let job_pid = a
        .child_pid
        .map(|pid| format!(", job process group {pid}"))
        .unwrap_or_default();
    writeln!(
        out,
        "  owner:      {} on {} (runner pid {}{job_pid})",
        safe(a.owner),
        safe(a.host),
        a.runner_pid
    )?;
    writeln!(out, "  started:    {}", local_time(a.started_at_epoch, tz))?;
    if let Some(finished) = a.finished_at_epoch {
        writeln!(out, "  finished:   {}", local_time(finished, tz))?;
    }
    if let Some(detail) = a.error_detail {
        writeln!(out, "  detail:     {}", safe(detail))?;
    }
    // Output is stored when the attempt ends, by the runner that ran it: "(empty)" would claim
    // the job printed nothing.
    if a.finished_at_epoch.is_none() {
        return writeln!(out, "  output:     kept when the attempt ends");
    }
    let (Some(stdout), Some(stderr)) = (&a.stdout_tail, &a.stderr_tail) else {
        return writeln!(
            out,
            "  output:     not kept (its runner did not see the attempt end)"
        );
    };
    render_tail(out, "stdout", stdout.0, a.stdout_bytes, output)?;
    render_tail(out, "stderr", stderr.0, a.stderr_bytes, output)
}

/// The last `lines` lines of a kept tail (all of it for 0), and what is left out before them:
/// how many lines and bytes. The first kept line may be the end of a longer one; it counts.
fn last_lines(tail: &[u8], lines: usize) -> (&[u8], usize, usize) {
    if lines == 0 {
        return (tail, 0, 0);
    }
    let body = tail.strip_suffix(b"\n").unwrap_or(tail);
    let mut start = body.len();
    for _ in 0..lines {
        match body[..start].iter().rposition(|&b| b == b'\n') {
            Some(newline) => start = newline,
            None => return (tail, 0, 0),
        }
    }
    let hidden = &tail[..=start];
    let hidden_lines = hidden.iter().filter(|&&b| b == b'\n').count();
    (&tail[start + 1..], hidden_lines, hidden.len())
}

/// Lines in a kept tail: newlines, plus an unterminated last line.
fn line_count(tail: &[u8]) -> usize {
    tail.iter().filter(|&&b| b == b'\n').count() + usize::from(!tail.ends_with(b"\n"))
}

fn render_tail(
    out: &mut String,
    name: &str,
    tail: &[u8],
    total: Option<i64>,
    output: Output,
) -> Result<(), std::fmt::Error> {
    if tail.is_empty() {
        return writeln!(out, "  {name}:     (empty)");
    }
    let total = total.unwrap_or(tail.len() as i64);
    let lines = match line_count(tail) {
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    let Output::Tail(keep) = output else {
        let kept = if total > tail.len() as i64 {
            format!("the last {} of {total} bytes kept", tail.len())
        } else {
            format!("{total} bytes")
        };
        return writeln!(
            out,
            "  {name}:     {kept}, {lines} (not shown: --no-output)"
        );
    };
    if total > tail.len() as i64 {
        writeln!(out, "  {name} (last {} of {total} bytes):", tail.len())?;
    } else {
        writeln!(out, "  {name} ({total} bytes):")?;
    }
    let (shown, hidden_lines, hidden_bytes) = last_lines(tail, keep);
    if hidden_lines > 0 {
        let noun = if hidden_lines == 1 { "line" } else { "lines" };
        writeln!(
            out,
            "    … {hidden_lines} earlier {noun} ({}) kept but not shown; --tail 0 shows all {lines}",
            crate::display::bytes(hidden_bytes as u64)
        )?;
    }
    let text = escape_output(shown);
    for line in text.lines() {
        writeln!(out, "    {line}")?;
    }
    if !text.ends_with('\n') {
        writeln!(out, "    (no newline at end)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{last_lines, line_count};

    #[test]
    fn the_last_lines_of_a_tail_and_what_is_left_out() {
        let tail = b"one\ntwo\nthree\n";
        assert_eq!(last_lines(tail, 2), (&b"two\nthree\n"[..], 1, 4));
        assert_eq!(last_lines(tail, 3), (&tail[..], 0, 0));
        assert_eq!(last_lines(tail, 9), (&tail[..], 0, 0));
        assert_eq!(last_lines(tail, 0), (&tail[..], 0, 0));
        // An unterminated last line is a line.
        assert_eq!(last_lines(b"a\nb\nc", 1), (&b"c"[..], 2, 4));
        assert_eq!(line_count(b"a\nb\nc"), 3);
        assert_eq!(line_count(tail), 3);
    }
}
