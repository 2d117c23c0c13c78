-- runner schema for PostgreSQL, version 11: a run cancelled while running keeps, until its job is
-- known to be stopped, the time by which the tick holding it must have stopped it (the SQLite
-- schema's version 16, which says why). Append-only: never edit a shipped migration.
ALTER TABLE job_runs ADD COLUMN stopping_by bigint;
CREATE INDEX job_runs_stopping ON job_runs (definition_id, stopping_by) WHERE stopping_by IS NOT NULL;
UPDATE job_runs SET stopping_by = finished_at
WHERE status = 'cancelled'
  AND id IN (SELECT run_id FROM job_attempts WHERE finished_at IS NULL);
