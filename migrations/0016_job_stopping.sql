-- runner schema, version 16: a run cancelled while running keeps, until its job is known to be
-- stopped, the time by which the tick holding it must have stopped it. Append-only: never edit a
-- shipped migration.

-- `cancel` of a running run sets `stopping_by` to the run's lease expiry plus the kill grace:
-- the tick holding it learns of the cancel at its next heartbeat, before its lease runs out, and
-- stops the job (SIGTERM, SIGKILL after the grace). Closing the attempt, once its processes are
-- gone, sets it back to NULL (that tick, or `cancel` or a later tick when that runner is gone).
-- Past it, the next tick's recovery stops what is left on its host, as it does for an expired
-- lease (or, on another host, leaves the attempt to that host and clears it). While it is set,
-- no run of its `forbid` schedule is claimed: a cancelled job never runs beside the next run.
-- Only such runs are indexed, normally none: the claim looks its schedule up in one probe, and
-- a tick looking for overdue ones reads only them.
ALTER TABLE job_runs ADD COLUMN stopping_by INTEGER;
CREATE INDEX job_runs_stopping ON job_runs (definition_id, stopping_by) WHERE stopping_by IS NOT NULL;
-- Runs cancelled before this version whose attempt is still open: due at once, so the next tick
-- stops their jobs (or finds them stopped) before a run of their schedule starts.
UPDATE job_runs SET stopping_by = finished_at
WHERE status = 'cancelled'
  AND id IN (SELECT run_id FROM job_attempts WHERE finished_at IS NULL);
