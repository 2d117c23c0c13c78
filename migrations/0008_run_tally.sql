-- runner schema, version 8: runs per schedule and status, kept as a tally, so `status` and
-- `metrics` read a few rows per schedule plus the last hour's runs instead of counting the whole
-- history (1,000,000 runs: about 10 ms for `status`, 100 ms for `metrics`, both growing with
-- it). Append-only: never edit a shipped migration.

-- Exactly `SELECT definition_id, status, count(*), max(finished_at) FROM job_runs
-- WHERE id <= T GROUP BY 1, 2`, where T is runner_state's 'tally_through'. Runs above T (made
-- since the last fold) are counted where they are read; at most once an hour a tick folds them in
-- and moves T ('tally_folded_at'). Only changes to runs at or below T touch the tally, through the
-- triggers below: a run's insert never does, which keeps materialising as cheap as before (a
-- trigger on INSERT would cost every run a statement journal). A bucket emptied stays, runs = 0.
CREATE TABLE job_run_tally (
    definition_id    INTEGER NOT NULL REFERENCES job_definitions (id) ON DELETE CASCADE,
    status           TEXT    NOT NULL,
    runs             INTEGER NOT NULL CHECK (runs >= 0),
    last_finished_at INTEGER,
    PRIMARY KEY (definition_id, status)
) WITHOUT ROWID;

-- A folded run moves between buckets (or its finish changes): it leaves the old bucket, whose
-- latest finish is looked up again only when this run held it (rare: a retried dead run), and
-- joins the new one. max() of two values where one may be NULL: coalesce each with the other.
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

-- A run goes. If it was folded, it leaves its bucket (the latest finish looked up again only
-- when it held it: a prune that empties a bucket, which deletes oldest first; never while its
-- schedule is being deleted, since the bucket goes with the schedule). And T never stays above
-- the largest run id left: SQLite gives a new row the largest id plus one, which must not be
-- taken for a folded run.
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
                    AND id <= (SELECT value FROM runner_state WHERE key = 'tally_through'))
        END
    WHERE definition_id = old.definition_id AND status = old.status
      AND old.id <= (SELECT value FROM runner_state WHERE key = 'tally_through');
    UPDATE runner_state SET value = (SELECT coalesce(max(id), 0) FROM job_runs)
    WHERE key = 'tally_through' AND value > (SELECT coalesce(max(id), 0) FROM job_runs);
END;

-- Every run kept so far is folded now; the next fold is due an hour from now.
INSERT INTO job_run_tally (definition_id, status, runs, last_finished_at)
SELECT definition_id, status, count(*), max(finished_at) FROM job_runs GROUP BY definition_id, status;
INSERT INTO runner_state (key, value)
VALUES ('tally_through', (SELECT coalesce(max(id), 0) FROM job_runs)),
       ('tally_folded_at', unixepoch());
