-- runner schema, version 12: the database itself holds the overlap rule `forbid`. A claim sets
-- `running_alone` to 1 on a run of a `forbid` schedule and leaves it NULL under `allow`; the
-- unique index then allows at most one running run of a schedule claimed under `forbid`, and
-- any number under `allow` (NULLs are never equal). On SQLite the claim's write lock already
-- made the rule exact; on PostgreSQL (its version 8) two claims judge "nothing of it running"
-- from two snapshots, and this index is what keeps them from both starting one. It is the
-- index the overlap rule already read, made unique: no new index to maintain.
-- Append-only: never edit a shipped migration.

ALTER TABLE job_runs ADD COLUMN running_alone INTEGER CHECK (running_alone = 1);
DROP INDEX job_runs_running_by_definition;
CREATE UNIQUE INDEX job_runs_running_by_definition ON job_runs (definition_id, running_alone)
    WHERE status = 'running';
