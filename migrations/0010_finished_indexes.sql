-- runner schema, version 10: the three indexes that order runs by status hold finished runs
-- only. A pending or running run is never looked up through them (the claim, recovery and the
-- overlap rule have their own partial indexes), yet each one cost every new run three index
-- inserts and every claim and end three index moves: materialising 100,000 schedules spent an
-- eighth of its time there. Queries that use them say `finished_at IS NOT NULL` (or compare
-- finished_at), which a finished run always has. Append-only: never edit a shipped migration.

DROP INDEX job_runs_status;
CREATE INDEX job_runs_status ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;
DROP INDEX job_runs_status_history;
CREATE INDEX job_runs_status_history ON job_runs (status, scheduled_for DESC, id DESC)
    WHERE finished_at IS NOT NULL;
DROP INDEX job_runs_definition_status_history;
CREATE INDEX job_runs_definition_status_history
    ON job_runs (definition_id, status, scheduled_for DESC, id DESC, finished_at)
    WHERE finished_at IS NOT NULL;

-- The tally's triggers look up a bucket's latest finish through the last one: max(finished_at)
-- ignores NULLs, so saying so changes no result and lets them keep using it.
DROP TRIGGER job_run_tally_update;
CREATE TRIGGER job_run_tally_update AFTER UPDATE OF definition_id, status, finished_at ON job_runs
WHEN old.id <= (SELECT value FROM runner_state WHERE key = 'tally_through')
    AND (old.definition_id IS NOT new.definition_id OR old.status IS NOT new.status
         OR old.finished_at IS NOT new.finished_at)
BEGIN
    UPDATE job_run_tally SET
        runs = runs - 1,
        last_finished_at = CASE
            WHEN old.finished_at IS NULL OR old.finished_at < last_finished_at THEN last_finished_at
            ELSE (SELECT max(finished_at) FROM job_runs INDEXED BY job_runs_definition_status_history
                  WHERE definition_id = old.definition_id AND status = old.status
                    AND finished_at IS NOT NULL
                    AND id <= (SELECT value FROM runner_state WHERE key = 'tally_through'))
        END
    WHERE definition_id = old.definition_id AND status = old.status;
    INSERT INTO job_run_tally (definition_id, status, runs, last_finished_at)
    VALUES (new.definition_id, new.status, 1, new.finished_at)
    ON CONFLICT (definition_id, status) DO UPDATE SET
        runs = runs + 1,
        last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                               coalesce(excluded.last_finished_at, last_finished_at));
END;

DROP TRIGGER job_run_tally_delete;
CREATE TRIGGER job_run_tally_delete AFTER DELETE ON job_runs
BEGIN
    UPDATE job_run_tally SET
        runs = runs - 1,
        last_finished_at = CASE
            WHEN old.finished_at IS NULL OR old.finished_at < last_finished_at THEN last_finished_at
            WHEN NOT EXISTS (SELECT 1 FROM job_definitions WHERE id = old.definition_id)
                THEN last_finished_at
            ELSE (SELECT max(finished_at) FROM job_runs INDEXED BY job_runs_definition_status_history
                  WHERE definition_id = old.definition_id AND status = old.status
                    AND finished_at IS NOT NULL
                    AND id <= (SELECT value FROM runner_state WHERE key = 'tally_through'))
        END
    WHERE definition_id = old.definition_id AND status = old.status
      AND old.id <= (SELECT value FROM runner_state WHERE key = 'tally_through');
    UPDATE runner_state SET value = (SELECT coalesce(max(id), 0) FROM job_runs)
    WHERE key = 'tally_through' AND value > (SELECT coalesce(max(id), 0) FROM job_runs);
END;
