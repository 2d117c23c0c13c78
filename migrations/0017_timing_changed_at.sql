-- runner schema, version 17: when a schedule's timing (its cron expression or time zone) last
-- changed. Append-only: never edit a shipped migration.

-- No earlier expression is kept: `why` judges a past time by the schedule's expression now, and
-- says so when that expression came after the time in question. `updated_at` cannot tell it:
-- a pause, a resume, a reanchor or a new command move it too. `schedule add` sets this to its
-- time, and every rewrite whose cron or zone differs from the stored one (`edit`, `apply`) to
-- the rewrite's. The rows from before this version get the best value known: `updated_at`, the
-- latest their timing can have changed (`created_at` where it cannot be read), which errs
-- towards saying it may have changed. The default exists only because SQLite adds no NOT NULL
-- column without one: 0 is read as "not since it was created", and no row keeps it but one whose
-- two times are both unreadable (a damaged row, repaired by its next edit).
ALTER TABLE job_definitions ADD COLUMN timing_changed_at INTEGER NOT NULL DEFAULT 0;
UPDATE job_definitions
SET timing_changed_at = CASE typeof(updated_at) WHEN 'integer' THEN updated_at ELSE created_at END
WHERE typeof(updated_at) = 'integer' OR typeof(created_at) = 'integer';
