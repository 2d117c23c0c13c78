-- runner schema for PostgreSQL, version 6: job_runs_status indexes finished runs only (the
-- SQLite schema's version 8). Append-only: never edit a shipped migration.

-- Its queries (prune, recent dead runs) ask for runs finished before or after a time, which
-- only finished runs have; runs that are pending or running are left out of it, so making a run
-- and claiming it write one index fewer.
DROP INDEX job_runs_status;
CREATE INDEX job_runs_status ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;
