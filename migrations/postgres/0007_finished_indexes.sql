-- runner schema for PostgreSQL, version 7: the three indexes that order runs by status hold
-- finished runs only, as on SQLite (its version 10). A pending or running run is never looked up
-- through them, yet each one cost every new run three index inserts and every claim and end
-- three more. Queries that use them say `finished_at IS NOT NULL` (or compare finished_at),
-- which a finished run always has. Append-only: never edit a shipped migration.

DROP INDEX job_runs_status;
CREATE INDEX job_runs_status ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;
DROP INDEX job_runs_status_history;
CREATE INDEX job_runs_status_history ON job_runs (status, scheduled_for DESC, id DESC)
    WHERE finished_at IS NOT NULL;
DROP INDEX job_runs_definition_status_history;
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC, finished_at)
    WHERE finished_at IS NOT NULL;
