-- runner schema, version 3: containment. Append-only: never edit a shipped migration.

-- What happens to processes a job leaves behind when its main process exits: 'kill' (the
-- default: TERM, then KILL, like systemd does for a service's control group) or 'keep' (for jobs
-- that deliberately start daemons). Runs snapshot it like every other setting.
ALTER TABLE job_definitions ADD COLUMN leftovers TEXT NOT NULL DEFAULT 'kill' CHECK (leftovers IN ('kill', 'keep'));
ALTER TABLE job_runs ADD COLUMN leftovers TEXT NOT NULL DEFAULT 'kill' CHECK (leftovers IN ('kill', 'keep'));

-- The runner process that holds an attempt, identified like its job (pid and /proc start time),
-- so that `cancel` and recovery can tell a live runner from a dead one before touching its job.
ALTER TABLE job_attempts ADD COLUMN runner_start_time INTEGER;

-- Attempts still open, by host: recovery looks for open attempts of this host whose run it no
-- longer holds (cancelled or recovered while their processes may still be alive).
CREATE INDEX job_attempts_open ON job_attempts (host) WHERE finished_at IS NULL;
