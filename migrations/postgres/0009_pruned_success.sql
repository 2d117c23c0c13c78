-- runner schema for PostgreSQL, version 9: when the latest success that pruning deleted
-- finished, per schedule (the SQLite schema's version 14, which says why). Append-only: never
-- edit a shipped migration.
ALTER TABLE job_definitions ADD COLUMN pruned_success_at bigint;
