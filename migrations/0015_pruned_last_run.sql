-- runner schema, version 15: how the latest run that pruning deleted ended, and when, per
-- schedule. Append-only: never edit a shipped migration.

-- runner_job_last_run_status{job,status} says how the schedule's latest finished run ended
-- (succeeded, dead or cancelled: a skipped instant never ran). Pruning deletes old runs, and
-- with them, for a job that runs less often than the retention (yearly, monthly), every run it
-- has: the series would vanish and an alert on a dead last run resolve. `prune` keeps here the
-- latest of the runs it deletes (the same order as the metric's; see `LastRun`), and the series
-- reads both. Both NULL (none pruned since this version), or both set. The status list is two
-- comparisons, not a list of three (see version 13).
ALTER TABLE job_definitions ADD COLUMN pruned_last_finished_at INTEGER;
ALTER TABLE job_definitions ADD COLUMN pruned_last_status TEXT
    CHECK ((pruned_last_status IS NULL) = (pruned_last_finished_at IS NULL)
           AND (pruned_last_status IN ('succeeded', 'dead') OR pruned_last_status = 'cancelled'));
