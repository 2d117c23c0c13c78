-- runner schema, version 2: what `history`, `status` and `metrics` need to stay fast with a
-- million runs, and the dead-runs counter. Append-only: never edit a shipped migration.

-- history --status S: newest first within one status.
CREATE INDEX job_runs_status_history ON job_runs (status, scheduled_for DESC, id DESC);
-- history NAME --status S: newest first within one schedule and status.
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC);
-- metrics: durations of attempts that finished recently (covering: no table lookups).
CREATE INDEX job_attempts_finished ON job_attempts (finished_at, run_id, duration_ms)
    WHERE finished_at IS NOT NULL;

-- runner_dead_runs_total is a counter: `retry` and `prune` must never lower it, so it is kept
-- here rather than counted from job_runs. It starts from the dead runs kept so far.
INSERT INTO runner_state (key, value)
SELECT 'dead_runs_total', count(*) FROM job_runs WHERE status = 'dead'
ON CONFLICT (key) DO NOTHING;
