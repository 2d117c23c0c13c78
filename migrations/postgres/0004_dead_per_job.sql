-- runner schema for PostgreSQL, version 4: the dead-runs counter per schedule (the SQLite
-- schema's version 6). Append-only: never edit a shipped migration.

-- runner_dead_runs_total{job}: runs of this schedule that went dead. A counter: `retry` and
-- `prune` must never lower it, so it is kept here rather than counted from job_runs. It starts
-- from the schedule's dead runs kept so far (those pruned earlier cannot be attributed).
ALTER TABLE job_definitions ADD COLUMN dead_runs_total bigint NOT NULL DEFAULT 0;
UPDATE job_definitions d
SET dead_runs_total = (SELECT count(*) FROM job_runs r
                       WHERE r.definition_id = d.id AND r.status = 'dead');

-- The database-wide counter it replaces is no longer kept.
DELETE FROM runner_state WHERE key = 'dead_runs_total';
