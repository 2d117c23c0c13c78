//! `runner show RUN_ID`: one run, every attempt with its output tails, every event.
//! Captured output is escaped (`display::escape_output`), stored values such as the command on one
//! line (`display::escape_line`): control characters, escape sequences and bidi controls are
//! shown, never interpreted by the terminal.

use std::fmt::Write as _;

use anyhow::Result;
use chrono_tz::Tz;
use serde_json::{json, Map, Value};

use super::history::run_json;
use super::{emit, emit_json, zone, Ctx};
use crate::display::{
    duration_of_ms, duration_of_secs, escape_line, escape_output, local_time, put_time,
};
use crate::exit::Failure;
use crate::model::RunStatus;
use crate::store::{AttemptView, EventView, OpenMode, RunView, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run id, as `runner history` lists it.
    pub run_id: i64,
    /// Machine-readable output: the run with `attempts` and `events` arrays.
    #[arg(long)]
    pub json: bool,
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
    if args.json {
        let mut o = run_json(&run);
        o.insert("command".into(), json!(run.command));
        o.insert("workdir".into(), json!(run.workdir));
        o.insert("idempotency_key".into(), json!(run.idempotency_key));
        o.insert("owner".into(), json!(run.owner));
        put_time(&mut o, "lease_expires_at", run.lease_expires_at);
        put_time(&mut o, "heartbeat_at", run.heartbeat_at);
        o.insert(
            "attempts".into(),
            attempts.iter().map(attempt_json).collect(),
        );
        o.insert("events".into(), events.iter().map(event_json).collect());
        return emit_json(&Value::Object(o));
    }
    emit(&render(&run, &attempts, &events, ctx.clock.epoch())?)
}

fn attempt_json(a: &AttemptView) -> Value {
    let mut o = Map::new();
    o.insert("attempt".into(), json!(a.attempt));
    o.insert("owner".into(), json!(a.owner));
    o.insert("host".into(), json!(a.host));
    o.insert("runner_pid".into(), json!(a.runner_pid));
    o.insert("child_pid".into(), json!(a.child_pid));
    put_time(&mut o, "started_at", Some(a.started_at));
    put_time(&mut o, "finished_at", a.finished_at);
    o.insert("duration_ms".into(), json!(a.duration_ms));
    o.insert("outcome".into(), json!(a.outcome));
    o.insert("exit_code".into(), json!(a.exit_code));
    o.insert("error_code".into(), json!(a.error_code));
    o.insert("error_detail".into(), json!(a.error_detail));
    // Escaped like the text view, so a consumer that prints them is safe too.
    o.insert("stdout_tail".into(), json!(escape_output(&a.stdout_tail)));
    o.insert("stderr_tail".into(), json!(escape_output(&a.stderr_tail)));
    o.insert("stdout_bytes".into(), json!(a.stdout_bytes));
    o.insert("stderr_bytes".into(), json!(a.stderr_bytes));
    Value::Object(o)
}

fn event_json(e: &EventView) -> Value {
    let mut o = Map::new();
    put_time(&mut o, "at", Some(e.at));
    o.insert("kind".into(), json!(e.kind));
    o.insert("actor".into(), json!(e.actor));
    let detail = e
        .detail
        .as_deref()
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or(Value::Null);
    o.insert("detail".into(), detail);
    Value::Object(o)
}

/// A stored value (command, name, detail) safe to print on one line.
fn safe(text: &str) -> String {
    escape_line(text)
}

fn render(
    run: &RunView,
    attempts: &[AttemptView],
    events: &[EventView],
    now: i64,
) -> Result<String, std::fmt::Error> {
    let tz = zone(&run.timezone);
    let at = |epoch: i64| local_time(epoch, tz);
    let mut out = String::new();
    writeln!(
        out,
        "run {} of {} ({} run, times in {})",
        run.id,
        safe(&run.job),
        run.trigger,
        safe(&run.timezone)
    )?;
    writeln!(out, "  status:     {}", status_line(run, tz, now))?;
    if let Some(detail) = &run.error_detail {
        writeln!(out, "  error:      {}", safe(detail))?;
    }
    writeln!(out, "  scheduled:  {}", at(run.scheduled_for))?;
    writeln!(out, "  created:    {}", at(run.created_at))?;
    if let Some(started) = run.started_at {
        writeln!(out, "  started:    {}", at(started))?;
    }
    if let Some(finished) = run.finished_at {
        writeln!(out, "  finished:   {}", at(finished))?;
    }
    writeln!(out, "  command:    {}", safe(&run.command))?;
    if let Some(dir) = &run.workdir {
        writeln!(out, "  workdir:    {}", safe(dir))?;
    }
    writeln!(out, "  key:        {}", safe(&run.idempotency_key))?;

    for a in attempts {
        writeln!(out)?;
        render_attempt(&mut out, a, tz, now)?;
        if let Some(line) = leftovers_line(events, a.attempt) {
            writeln!(out, "  leftovers:  {}", safe(&line))?;
        }
    }

    writeln!(out)?;
    writeln!(out, "events:")?;
    for e in events {
        let detail = e.detail.as_deref().map(safe).unwrap_or_default();
        writeln!(
            out,
            "  {}  {:<16} {:<20} {detail}",
            at(e.at),
            e.kind,
            safe(&e.actor)
        )?;
    }
    Ok(out)
}

/// What an attempt left running when its shell exited, from its `LEFTOVERS` event:
/// "killed 2 leftover processes: 4242 sh, 4243 sleep".
fn leftovers_line(events: &[EventView], attempt: u32) -> Option<String> {
    let detail: Value = events
        .iter()
        .filter(|e| e.kind == "LEFTOVERS")
        .filter_map(|e| serde_json::from_str(e.detail.as_deref()?).ok())
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
fn status_line(run: &RunView, tz: Tz, now: i64) -> String {
    let of = format!("{} of {}", run.attempt, run.max_attempts);
    let code = run.error_code.as_deref().unwrap_or("");
    match run.status {
        RunStatus::Pending if run.attempt == 0 => {
            if run.run_at <= now {
                "pending: due, the next tick runs it".to_string()
            } else {
                format!("pending: due at {}", local_time(run.run_at, tz))
            }
        }
        RunStatus::Pending => format!(
            "pending: attempt {of} failed ({code}); attempt {} at {}",
            run.attempt + 1,
            local_time(run.run_at, tz)
        ),
        RunStatus::Running => format!(
            "running: attempt {of}, held by {} until {}",
            run.owner.as_deref().map(safe).unwrap_or_default(),
            run.lease_expires_at
                .map_or_else(|| "?".to_string(), |t| local_time(t, tz))
        ),
        RunStatus::Succeeded => format!("succeeded on attempt {of}"),
        RunStatus::Dead => format!("dead after attempt {of}: {code}"),
        RunStatus::Cancelled => format!("cancelled after {} attempt(s)", run.attempt),
        RunStatus::Skipped => format!(
            "skipped: {}",
            run.skip_reason.as_deref().map(safe).unwrap_or_default()
        ),
    }
}

fn render_attempt(
    out: &mut String,
    a: &AttemptView,
    tz: Tz,
    now: i64,
) -> Result<(), std::fmt::Error> {
    let result = match (&a.error_code, a.exit_code, a.finished_at) {
        (_, _, None) => format!("running for {}", duration_of_secs(now - a.started_at)),
        (Some(code), _, _) => code.clone(),
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
        safe(&a.owner),
        safe(&a.host),
        a.runner_pid
    )?;
    writeln!(out, "  started:    {}", local_time(a.started_at, tz))?;
    if let Some(finished) = a.finished_at {
        writeln!(out, "  finished:   {}", local_time(finished, tz))?;
    }
    if let Some(detail) = &a.error_detail {
        writeln!(out, "  detail:     {}", safe(detail))?;
    }
    render_tail(out, "stdout", &a.stdout_tail, a.stdout_bytes)?;
    render_tail(out, "stderr", &a.stderr_tail, a.stderr_bytes)
}

fn render_tail(
    out: &mut String,
    name: &str,
    tail: &[u8],
    total: Option<i64>,
) -> Result<(), std::fmt::Error> {
    if tail.is_empty() {
        return writeln!(out, "  {name}:     (empty)");
    }
    let total = total.unwrap_or(tail.len() as i64);
    if total > tail.len() as i64 {
        writeln!(out, "  {name} (last {} of {total} bytes):", tail.len())?;
    } else {
        writeln!(out, "  {name} ({total} bytes):")?;
    }
    let text = escape_output(tail);
    for line in text.lines() {
        writeln!(out, "    {line}")?;
    }
    if !text.ends_with('\n') {
        writeln!(out, "    (no newline at end)")?;
    }
    Ok(())
}
