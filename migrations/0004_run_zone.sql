-- runner schema, version 4: a run remembers the zone it was scheduled in. Append-only: never
-- edit a shipped migration.

-- Snapshot of the schedule's zone at materialisation, like command and workdir: `history` and
-- `show` print a run's times in it, so `schedule edit --tz` does not rewrite the past. Runs
-- made before this column existed hold NULL and fall back to their schedule's zone.
ALTER TABLE job_runs ADD COLUMN timezone TEXT;
