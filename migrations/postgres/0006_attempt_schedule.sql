-- runner schema for PostgreSQL, version 6: each attempt carries its schedule's id, so `metrics`
-- reads the durations of the last 24 hours per schedule from one covering index, without
-- looking up each attempt's run (the SQLite schema's version 9). Append-only: never edit a
-- shipped migration.

-- A copy of the attempt's run's definition_id, which never changes; the attempt's lifetime is
-- still its run's. No REFERENCES clause, as on SQLite (whose schema this one matches column for
-- column): removing a schedule would then search job_attempts for it.
ALTER TABLE job_attempts ADD COLUMN definition_id bigint;
UPDATE job_attempts a SET definition_id = r.definition_id FROM job_runs r WHERE r.id = a.run_id;

DROP INDEX job_attempts_finished;
CREATE INDEX job_attempts_finished ON job_attempts (finished_at, definition_id, duration_ms)
    WHERE finished_at IS NOT NULL;
