-- runner schema, version 14: when the latest success that pruning deleted finished, per
-- schedule. Append-only: never edit a shipped migration.

-- runner_job_last_success_timestamp_seconds{job} is the latest finish among the schedule's
-- succeeded runs. Pruning deletes old runs, and with them, once a job has failed for longer
-- than the retention, its last success: the series would vanish and an alert on it resolve
-- while the job still fails. `prune` keeps here the latest finish of the succeeded runs it
-- deletes, and the series reads both. NULL: none pruned since this version (those pruned
-- before cannot be recovered).
ALTER TABLE job_definitions ADD COLUMN pruned_success_at INTEGER;
