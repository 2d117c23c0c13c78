-- runner schema for PostgreSQL, version 8 (SQLite's version 12): the database itself holds the
-- overlap rule `forbid`. A claim sets `running_alone` to 1 on a run of a `forbid` schedule and
-- leaves it NULL under `allow`; the unique index then allows at most one running run of a
-- schedule claimed under `forbid`, and any number under `allow` (NULLs are never equal). Two
-- claims judge "nothing of it running" from two snapshots, so without it a claim could start a
-- second run of a `forbid` schedule beside one another claim had just started. It is the index
-- the overlap rule already read, made unique: no new index to maintain.
-- Append-only: never edit a shipped migration.

ALTER TABLE job_runs ADD COLUMN running_alone bigint CHECK (running_alone = 1);
DROP INDEX job_runs_running_by_definition;
CREATE UNIQUE INDEX job_runs_running_by_definition ON job_runs (definition_id, running_alone)
    WHERE status = 'running';
