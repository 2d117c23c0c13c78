-- runner schema, version 6: the dead-runs counter per schedule. Append-only: never edit a
-- shipped migration.

-- runner_dead_runs_total{job}: runs of this schedule that went dead. A counter: `retry` and
-- `prune` must never lower it, so it is kept here rather than counted from job_runs. It starts
-- from the schedule's dead runs kept so far (those pruned earlier cannot be attributed).
ALTER TABLE job_definitions ADD COLUMN dead_runs_total INTEGER NOT NULL DEFAULT 0;
UPDATE job_definitions
SET dead_runs_total = (SELECT count(*) FROM job_runs r
                       WHERE r.definition_id = job_definitions.id AND r.status = 'dead');

-- The database-wide counter it replaces (version 2) is no longer kept.
DELETE FROM runner_state WHERE key = 'dead_runs_total';
