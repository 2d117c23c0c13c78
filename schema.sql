-- The current SQLite schema of runner, for humans to read. The binary applies migrations/*.sql
-- (embedded at build time, counted by PRAGMA user_version); a test checks this file matches.
-- Schema version 17.
-- All times are UTC epoch seconds (INTEGER); durations are whole seconds unless named *_ms.

-- A schedule: what to run, when (cron + zone), and the policies that govern it.
CREATE TABLE job_definitions (
    id                   INTEGER PRIMARY KEY,
    name                 TEXT    NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    cron                 TEXT    NOT NULL,
    timezone             TEXT    NOT NULL DEFAULT 'UTC',
    command              TEXT    NOT NULL CHECK (length(command) > 0),
    workdir              TEXT,
    max_attempts         INTEGER NOT NULL DEFAULT 3    CHECK (max_attempts >= 1),
    timeout_secs         INTEGER NOT NULL DEFAULT 3600 CHECK (timeout_secs >= 1),
    backoff_base_secs    INTEGER NOT NULL DEFAULT 30   CHECK (backoff_base_secs >= 0),
    backoff_max_secs     INTEGER NOT NULL DEFAULT 3600 CHECK (backoff_max_secs >= backoff_base_secs),
    overlap              TEXT    NOT NULL DEFAULT 'forbid' CHECK (overlap IN ('forbid', 'allow')),
    catch_up             TEXT    NOT NULL DEFAULT 'latest' CHECK (catch_up IN ('latest', 'all', 'none')),
    grace_secs           INTEGER NOT NULL DEFAULT 300  CHECK (grace_secs >= 0),
    paused               INTEGER NOT NULL DEFAULT 0    CHECK (paused IN (0, 1)),
    -- The materialisation cursor: every fire instant <= materialized_through has been handled
    -- (run or skipped). It, not the job_runs rows, remembers what was done, so pruning history
    -- can never make a tick materialise an instant twice.
    materialized_through INTEGER NOT NULL,
    -- The first fire instant after the cursor (NULL: never fires again). An idle tick reads
    -- only definitions with next_fire_at <= now, through the index below.
    next_fire_at         INTEGER,
    -- Bumped by every edit, pause and resume: materialisation compare-and-swaps on it, so a tick
    -- that read the schedule before an edit (even in the same second) cannot write a stale cursor.
    revision             INTEGER NOT NULL DEFAULT 0,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    -- What happens to processes a job leaves behind when its shell exits: 'kill' (TERM, then
    -- KILL) or 'keep' (for jobs that start daemons on purpose). Snapshotted on each run.
    leftovers            TEXT    NOT NULL DEFAULT 'kill' CHECK (leftovers IN ('kill', 'keep')),
    -- `schedule pause NAME --for DUR`: the first tick at or after this time resumes the schedule,
    -- as `schedule resume` would. NULL: paused until resumed by hand (or not paused at all).
    paused_until         INTEGER,
    -- runner_dead_runs_total{job}: runs of this schedule that went dead. A counter: retry and
    -- prune never lower it, so it is kept here rather than counted from job_runs. (0006)
    dead_runs_total      INTEGER NOT NULL DEFAULT 0,
    -- runner_job_last_success_timestamp_seconds{job} reads the latest finish among this
    -- schedule's succeeded runs, and this: the latest finish among those `prune` deleted, so the
    -- series does not vanish when a job has failed for longer than the retention. (0014)
    pruned_success_at    INTEGER,
    -- runner_job_last_run_status{job,status} reads the last of this schedule's runs that ran
    -- (succeeded, dead, cancelled; at the same finish, dead over cancelled over succeeded), and
    -- this pair: the last of those `prune` deleted, so the series does not vanish when every run
    -- of a yearly job is older than the retention. Both NULL, or both set. `migrate` without
    -- --history folds the runs it leaves behind into these and pruned_success_at. (0015)
    pruned_last_finished_at INTEGER,
    pruned_last_status   TEXT
        CHECK ((pruned_last_status IS NULL) = (pruned_last_finished_at IS NULL)
               AND (pruned_last_status IN ('succeeded', 'dead') OR pruned_last_status = 'cancelled')),
    -- When the timing (cron or zone) last changed: set by `schedule add`, and by each edit or
    -- apply that changes the cron or the zone, never by a pause, a resume, a reanchor or another
    -- setting (which move updated_at). `why` judges a past time by the expression the schedule
    -- has now, and says so when it came after that time. 0: not since it was created (SQLite
    -- adds no NOT NULL column without a default). (0017)
    timing_changed_at    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX job_definitions_due ON job_definitions (next_fire_at) WHERE paused = 0;
-- Ticks also report schedules whose due-ness cannot be judged (a hand edit, a damaged file):
-- only those are indexed, normally none, so an idle tick reads no schedule that is not due.
-- The WHERE is the tick's condition, word for word. (0011)
CREATE INDEX job_definitions_undecidable ON job_definitions (next_fire_at, id)
    WHERE typeof(paused) <> 'integer' OR paused NOT IN (0, 1)
        OR typeof(next_fire_at) NOT IN ('integer', 'null');
-- Ticks look for pauses that have ended: only the few timed pauses are indexed.
CREATE INDEX job_definitions_pause_ends ON job_definitions (paused_until) WHERE paused_until IS NOT NULL;

-- One row per scheduled instant (or manual request). A run is retried in place: its attempts
-- live in job_attempts, its history in job_events.
CREATE TABLE job_runs (
    id                INTEGER PRIMARY KEY,
    definition_id     INTEGER NOT NULL REFERENCES job_definitions (id) ON DELETE CASCADE,
    trigger           TEXT    NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    scheduled_for     INTEGER NOT NULL,
    -- In pairs, not one list: SQLite builds an IN list of more than two constants into a
    -- temporary b-tree, in a CHECK once for every row it checks. (0013)
    status            TEXT    NOT NULL
                      CHECK (status IN ('pending', 'running') OR status IN ('succeeded', 'dead')
                             OR status IN ('cancelled', 'skipped')),
    run_at            INTEGER NOT NULL,           -- due time; a scheduled retry moves it forward
    attempt           INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),  -- attempts started so far
    -- Snapshot of the definition at materialisation: an edit takes effect from the next fire time.
    command           TEXT    NOT NULL,
    workdir           TEXT,
    max_attempts      INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_secs      INTEGER NOT NULL CHECK (timeout_secs >= 1),
    backoff_base_secs INTEGER NOT NULL,
    backoff_max_secs  INTEGER NOT NULL,
    idempotency_key   TEXT    NOT NULL UNIQUE,    -- stable across attempts; given to the job
    -- The lease: who holds the run, the fencing token every write must present, and until when.
    owner             TEXT,
    lease_token       TEXT,
    lease_expires_at  INTEGER,
    heartbeat_at      INTEGER,
    error_code        TEXT,                       -- last attempt's CATEGORY:SUB
    error_detail      TEXT CHECK (length(error_detail) <= 1024),
    skip_reason       TEXT,
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,                    -- first attempt's start
    finished_at       INTEGER,                    -- terminal state reached
    leftovers         TEXT    NOT NULL DEFAULT 'kill' CHECK (leftovers IN ('kill', 'keep')),
    -- The schedule's zone when the run was made: its times print in it (NULL: made before
    -- schema version 4; the schedule's zone is used).
    timezone          TEXT,
    -- 1 while a run of a `forbid` schedule runs (set by its claim), else NULL: see the index
    -- job_runs_running_by_definition. (0012)
    running_alone     INTEGER CHECK (running_alone = 1),
    -- A run cancelled while running, until its job is known to be stopped (its attempt closed):
    -- the lease's expiry plus the kill grace, by which the tick holding it has stopped the job;
    -- past it, recovery stops it. Else NULL. See the index job_runs_stopping. (0016)
    stopping_by       INTEGER,
    CHECK ((status = 'running') = (lease_token IS NOT NULL)),
    CHECK (status <> 'running' OR (owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- Exactly one run per scheduled instant, however many ticks race (manual runs are exempt).
CREATE UNIQUE INDEX job_runs_one_per_instant ON job_runs (definition_id, scheduled_for)
    WHERE trigger = 'schedule';
-- The claim query: due pending runs in due order.
CREATE INDEX job_runs_due ON job_runs (run_at, id) WHERE status = 'pending';
-- Recovery: running runs by lease expiry.
CREATE INDEX job_runs_leases ON job_runs (lease_expires_at) WHERE status = 'running';
-- The overlap rule: is a run of this schedule running, which is its oldest due pending run.
-- Unique: at most one running run of a schedule claimed under `forbid` (running_alone = 1),
-- any number under `allow` (NULL), whatever snapshots concurrent claims read. (0012)
CREATE UNIQUE INDEX job_runs_running_by_definition ON job_runs (definition_id, running_alone)
    WHERE status = 'running';
CREATE INDEX job_runs_pending_by_definition ON job_runs (definition_id, run_at, id) WHERE status = 'pending';
-- The overlap rule too: no run of a `forbid` schedule starts while the job of a run of it
-- cancelled while running is being stopped; and recovery's look for overdue ones. Normally
-- empty. (0016)
CREATE INDEX job_runs_stopping ON job_runs (definition_id, stopping_by) WHERE stopping_by IS NOT NULL;
-- History, per schedule and overall, newest first.
CREATE INDEX job_runs_definition_history ON job_runs (definition_id, scheduled_for DESC);
CREATE INDEX job_runs_history ON job_runs (scheduled_for DESC, id DESC);
-- The three by status hold finished runs only (0010): pending and running runs have the partial
-- indexes above, and leaving them out spares every new run, claim and end three index writes.
-- A query that uses them says `finished_at IS NOT NULL`, or compares finished_at.
-- Pruning, and recent dead runs.
CREATE INDEX job_runs_status ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;
-- history --status S [NAME]: newest first within one status (and one schedule). (0002)
CREATE INDEX job_runs_status_history ON job_runs (status, scheduled_for DESC, id DESC)
    WHERE finished_at IS NOT NULL;
-- history NAME --status S; a schedule's last result; the latest finish per schedule and status,
-- when job_run_tally's triggers must look it up again (finished_at makes it covering).
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC, finished_at)
    WHERE finished_at IS NOT NULL;

-- One row per attempt to execute a run.
CREATE TABLE job_attempts (
    id               INTEGER PRIMARY KEY,
    run_id           INTEGER NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    owner            TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    runner_pid       INTEGER NOT NULL,
    lease_token      TEXT    NOT NULL,
    child_pid        INTEGER,                     -- also the job's process group id
    child_start_time INTEGER,                     -- /proc starttime, so a reused pid is never killed
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    duration_ms      INTEGER,
    outcome          TEXT CHECK (outcome IN ('succeeded', 'failed')),
    exit_code        INTEGER,
    error_code       TEXT,
    error_detail     TEXT CHECK (length(error_detail) <= 1024),
    stdout_tail      BLOB,
    stderr_tail      BLOB,
    stdout_bytes     INTEGER,
    stderr_bytes     INTEGER,
    -- The runner process holding the attempt (pid + start time): is it still alive?
    runner_start_time INTEGER,
    -- A copy of its run's definition_id (which never changes), for metrics' covering index. No
    -- REFERENCES: removing a schedule would search job_attempts for it; run_id's cascade removes
    -- the attempt. Nullable only because it was added to tables with rows. (0009)
    definition_id    INTEGER,
    UNIQUE (run_id, attempt),
    CHECK ((finished_at IS NULL) = (outcome IS NULL))
);
CREATE INDEX job_attempts_errors ON job_attempts (finished_at, error_code) WHERE error_code IS NOT NULL;
-- Attempts still open, by host: the sweep for attempts whose run moved on without them.
CREATE INDEX job_attempts_open ON job_attempts (host) WHERE finished_at IS NULL;
-- metrics: durations of attempts that finished recently, per schedule, covering. (0002, 0009)
CREATE INDEX job_attempts_finished ON job_attempts (finished_at, definition_id, duration_ms)
    WHERE finished_at IS NOT NULL;

-- Every transition of a run, with who made it and a short JSON detail.
CREATE TABLE job_events (
    id     INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    at     INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    actor  TEXT    NOT NULL,
    detail TEXT    CHECK (detail IS NULL OR json_valid(detail))
);
CREATE INDEX job_events_run ON job_events (run_id, id);

-- Small facts about the runner itself: last tick, the automatic prune's hourly turn
-- (last_prune_at) and the last `runner prune` (last_manual_prune_at), the clock high-water
-- mark, the run tally's fold (tally_through, tally_folded_at; see job_run_tally), and syncs
-- (how many commits were made only to sync the WAL after deferred ones, where the -wal file
-- could not be synced directly; see SqliteStore::sync_wal).
CREATE TABLE runner_state (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- Runs per schedule and status, for `status` and `metrics` (0008). Exactly
--   SELECT definition_id, status, count(*), max(finished_at) FROM job_runs
--   WHERE id <= T GROUP BY 1, 2
-- where T is runner_state's 'tally_through'. Runs above T (made since the last fold) are counted
-- where they are read; once an hour, or sooner when 250,000 wait, a tick folds them in and moves
-- T ('tally_folded_at'). Only changes to runs at or below T touch the tally, through the
-- triggers below: a run's insert never does, which keeps materialising as cheap as before (a
-- trigger on INSERT would cost every run a statement journal). A bucket emptied stays, runs = 0.
CREATE TABLE job_run_tally (
    definition_id    INTEGER NOT NULL REFERENCES job_definitions (id) ON DELETE CASCADE,
    status           TEXT    NOT NULL,
    runs             INTEGER NOT NULL CHECK (runs >= 0),
    last_finished_at INTEGER,
    PRIMARY KEY (definition_id, status)
) WITHOUT ROWID;

-- A folded run moves between buckets (or its finish changes): it leaves the old bucket, whose
-- latest finish is looked up again only when this run held it (rare: a retried dead run), and
-- joins the new one. max() of two values where one may be NULL: coalesce each with the other.
CREATE TRIGGER job_run_tally_update AFTER UPDATE OF definition_id, status, finished_at ON job_runs
WHEN old.id <= (SELECT value FROM runner_state WHERE key = 'tally_through')
    AND (old.definition_id IS NOT new.definition_id OR old.status IS NOT new.status
         OR old.finished_at IS NOT new.finished_at)
BEGIN
    UPDATE job_run_tally SET
        runs = runs - 1,
        last_finished_at = CASE
            WHEN old.finished_at IS NULL OR old.finished_at < last_finished_at THEN last_finished_at
            ELSE (SELECT max(finished_at) FROM job_runs INDEXED BY job_runs_definition_status_history
                  WHERE definition_id = old.definition_id AND status = old.status
                    AND finished_at IS NOT NULL
                    AND id <= (SELECT value FROM runner_state WHERE key = 'tally_through'))
        END
    WHERE definition_id = old.definition_id AND status = old.status;
    INSERT INTO job_run_tally (definition_id, status, runs, last_finished_at)
    VALUES (new.definition_id, new.status, 1, new.finished_at)
    ON CONFLICT (definition_id, status) DO UPDATE SET
        runs = runs + 1,
        last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                               coalesce(excluded.last_finished_at, last_finished_at));
END;

-- A run goes. If it was folded, it leaves its bucket (the latest finish looked up again only
-- when it held it: a prune that empties a bucket, which deletes oldest first; never while its
-- schedule is being deleted, since the bucket goes with the schedule). And T never stays above
-- the largest run id left: SQLite gives a new row the largest id plus one, which must not be
-- taken for a folded run.
CREATE TRIGGER job_run_tally_delete AFTER DELETE ON job_runs
BEGIN
    UPDATE job_run_tally SET
        runs = runs - 1,
        last_finished_at = CASE
            WHEN old.finished_at IS NULL OR old.finished_at < last_finished_at THEN last_finished_at
            WHEN NOT EXISTS (SELECT 1 FROM job_definitions WHERE id = old.definition_id)
                THEN last_finished_at
            ELSE (SELECT max(finished_at) FROM job_runs INDEXED BY job_runs_definition_status_history
                  WHERE definition_id = old.definition_id AND status = old.status
                    AND finished_at IS NOT NULL
                    AND id <= (SELECT value FROM runner_state WHERE key = 'tally_through'))
        END
    WHERE definition_id = old.definition_id AND status = old.status
      AND old.id <= (SELECT value FROM runner_state WHERE key = 'tally_through');
    UPDATE runner_state SET value = (SELECT coalesce(max(id), 0) FROM job_runs)
    WHERE key = 'tally_through' AND value > (SELECT coalesce(max(id), 0) FROM job_runs);
END;
