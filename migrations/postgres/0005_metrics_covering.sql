-- runner schema for PostgreSQL, version 5: `metrics` reads its per-schedule figures from one
-- index (the SQLite schema's version 7). Append-only: never edit a shipped migration.

-- The same index as before, with finished_at appended: `history NAME --status S` uses it as
-- before, and the per-schedule statistics can be an index-only scan.
DROP INDEX job_runs_definition_status_history;
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC, finished_at);
