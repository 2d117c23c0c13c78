-- runner schema for PostgreSQL, version 10: how the latest run that pruning deleted ended, and
-- when, per schedule (the SQLite schema's version 15, which says why). Append-only: never edit
-- a shipped migration.
ALTER TABLE job_definitions
    ADD COLUMN pruned_last_finished_at bigint,
    ADD COLUMN pruned_last_status text,
    ADD CHECK ((pruned_last_status IS NULL) = (pruned_last_finished_at IS NULL)
               AND pruned_last_status IN ('succeeded', 'dead', 'cancelled'));
