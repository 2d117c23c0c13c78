-- runner schema, version 5: timed pauses. Append-only: never edit a shipped migration.

-- `schedule pause NAME --for DUR`: the first tick at or after this time resumes the schedule, as
-- `schedule resume` would. NULL: paused until resumed by hand (or not paused at all).
ALTER TABLE job_definitions ADD COLUMN paused_until INTEGER;

-- Ticks look for pauses that have ended: only the few timed pauses are indexed.
CREATE INDEX job_definitions_pause_ends ON job_definitions (paused_until) WHERE paused_until IS NOT NULL;
