-- runner schema, version 8: job_runs_status indexes finished runs only. Append-only: never
-- edit a shipped migration.

-- Its queries (prune, recent dead runs) ask for runs finished before or after a time, which
-- only finished runs have; counting runs per state uses job_runs_status_history. Runs that are
-- pending or running are left out of it, so making a run (a tick materialises thousands at
-- once) and claiming it write one index fewer.
DROP INDEX job_runs_status;
CREATE INDEX job_runs_status ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;
