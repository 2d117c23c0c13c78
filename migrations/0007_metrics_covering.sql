-- runner schema, version 7: `metrics` reads its per-schedule figures (runs per status, when the
-- latest of them finished) from one index, without a table lookup per run. Append-only: never
-- edit a shipped migration.

-- The same index as version 2's, with finished_at appended: `history NAME --status S` uses it
-- as before, and the per-schedule statistics become an index-only scan (1,000,000 runs: 1.5 s
-- before, 0.15 s after).
DROP INDEX job_runs_definition_status_history;
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC, finished_at);
