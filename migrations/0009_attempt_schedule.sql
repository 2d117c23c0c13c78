-- runner schema, version 9: each attempt carries its schedule's id, so `metrics` reads the
-- durations of the last 24 hours per schedule from one covering index, without looking up each
-- attempt's run (1,000,000 runs, 86,400 attempts a day: that lookup was most of `metrics`).
-- Append-only: never edit a shipped migration.

-- A copy of the attempt's run's definition_id, which never changes; the attempt's lifetime is
-- still its run's (run_id's ON DELETE CASCADE). No REFERENCES clause: removing a schedule would
-- then search job_attempts for it, with no index to do so. Nullable only because SQLite cannot
-- add a NOT NULL column to a table that has rows; every attempt gets it (filled below, and by
-- each claim).
ALTER TABLE job_attempts ADD COLUMN definition_id INTEGER;
UPDATE job_attempts
SET definition_id = (SELECT r.definition_id FROM job_runs r WHERE r.id = job_attempts.run_id);

DROP INDEX job_attempts_finished;
CREATE INDEX job_attempts_finished ON job_attempts (finished_at, definition_id, duration_ms)
    WHERE finished_at IS NOT NULL;
