-- runner schema for PostgreSQL, version 12: when a schedule's timing (its cron expression or time
-- zone) last changed (the SQLite schema's version 17, which says why). The rows from before this
-- version get `updated_at`, the latest their timing can have changed: the best value known.
-- Append-only: never edit a shipped migration.
ALTER TABLE job_definitions ADD COLUMN timing_changed_at bigint NOT NULL DEFAULT 0;
UPDATE job_definitions SET timing_changed_at = updated_at;
