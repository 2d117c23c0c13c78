#!/usr/bin/env bash
# How `history`, `status` and `metrics` scale: the same commands on a database with 1,000
# finished runs and one with 1,000,000, printed side by side (median of several runs each).
# A benchmark, not a test: it asserts nothing. Needs the sqlite3 CLI.
#
#   benches/observe.sh            # 1,000 vs 1,000,000 runs
#   RUNS=5 benches/observe.sh     # fewer repetitions per command
#   KEEP=1 benches/observe.sh     # keep the generated databases (to try EXPLAIN QUERY PLAN)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v sqlite3 >/dev/null || { echo "benches/observe.sh needs the sqlite3 CLI (apt-get install sqlite3)" >&2; exit 1; }

cargo build --release --quiet
runner="$PWD/target/release/runner"
work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then
    echo "keeping the databases in $work" >&2
else
    trap 'rm -rf "$work"' EXIT
fi
repeat=${RUNS:-11}
now=$(date +%s)

# A database with $2 finished runs spread over the past (one every 3 seconds, 20 schedules;
# 2% dead, 1% skipped, the rest succeeded), each with its attempt and three events, plus a few
# pending and running runs. One INSERT ... SELECT over a recursive CTE per table.
make_db() {
    local db=$1 count=$2
    RUNNER_DB=$db "$runner" init
    for j in $(seq 1 20); do
        RUNNER_DB=$db "$runner" schedule add "job-$j" --cron '* * * * *' -- true >/dev/null
    done
    sqlite3 "$db" <<SQL
PRAGMA foreign_keys = ON;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $count)
INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, attempt, command,
    max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
    error_code, error_detail, skip_reason, created_at, started_at, finished_at)
SELECT 1 + i % 20, 'schedule', $now - 60 - i * 3,
       CASE WHEN i % 50 = 0 THEN 'dead' WHEN i % 100 = 1 THEN 'skipped' ELSE 'succeeded' END,
       $now - 60 - i * 3,
       CASE WHEN i % 100 = 1 THEN 0 WHEN i % 50 = 0 THEN 3 ELSE 1 END,
       'true', 3, 3600, 30, 3600, 'bench-' || i,
       CASE WHEN i % 50 = 0 THEN 'EXIT:' || (1 + i % 3) END,
       CASE WHEN i % 50 = 0 THEN 'exited with status ' || (1 + i % 3) END,
       CASE WHEN i % 100 = 1 THEN 'overlap: another run was running' END,
       $now - 60 - i * 3,
       CASE WHEN i % 100 <> 1 THEN $now - 60 - i * 3 END,
       $now - 60 - i * 3 + 1 + i % 7
FROM n;
INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token, started_at,
    finished_at, duration_ms, outcome, exit_code, error_code, error_detail, stdout_tail,
    stdout_bytes, stderr_bytes, definition_id)
SELECT id, attempt, 'bench:1', 'bench', 1, 'token-' || id, started_at, finished_at,
       (finished_at - started_at) * 1000 + id % 1000,
       CASE status WHEN 'dead' THEN 'failed' ELSE 'succeeded' END,
       CASE status WHEN 'dead' THEN CAST(substr(error_code, 6) AS INTEGER) ELSE 0 END,
       error_code, error_detail, CAST('done' AS BLOB), 4, 0, definition_id
FROM job_runs WHERE attempt > 0;
INSERT INTO job_events (run_id, at, kind, actor, detail)
SELECT r.id, r.created_at + k.offset, k.kind, 'bench:1', '{}'
FROM job_runs r
JOIN (SELECT 0 AS offset, 'ENQUEUED' AS kind UNION ALL SELECT 0, 'CLAIMED' UNION ALL SELECT 1, 'SUCCEEDED') k
WHERE r.attempt > 0;
-- Live work: 5 due pending runs and 2 running ones (one with an expired lease).
INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command, max_attempts,
    timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key, created_at)
SELECT 1 + value, 'manual', $now - 30, 'pending', $now - 30 + value, 'true', 3, 3600, 30, 3600,
       'bench-pending-' || value, $now - 30
FROM json_each('[0,1,2,3,4]');
INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, attempt, command,
    max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key, owner,
    lease_token, lease_expires_at, heartbeat_at, created_at, started_at)
SELECT 6 + value, 'manual', $now - 20, 'running', $now - 20, 1, 'true', 3, 3600, 30, 3600,
       'bench-running-' || value, 'bench:2', 'lease-' || value, $now - 100 + value * 200, $now - 20,
       $now - 20, $now - 20
FROM json_each('[0,1]');
INSERT INTO runner_state (key, value) VALUES ('last_tick_at', $now - 30)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;
-- A history this old has had its runs folded into the run tally by the hourly tick (schema.sql,
-- job_run_tally); the tally is empty until then, so one INSERT ... SELECT folds them all.
INSERT INTO job_run_tally (definition_id, status, runs, last_finished_at)
SELECT definition_id, status, count(*), max(finished_at) FROM job_runs GROUP BY definition_id, status;
UPDATE runner_state SET value = (SELECT max(id) FROM job_runs) WHERE key = 'tally_through';
COMMIT;
SQL
}

# Median wall time of a command in milliseconds.
median_ms() {
    local times=() start end
    for _ in $(seq 1 "$repeat"); do
        start=$(date +%s%N)
        "$@" >/dev/null
        end=$(date +%s%N)
        times+=($(( (end - start) / 1000000 )))
    done
    printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (repeat + 1) / 2 ))p"
}

echo "generating databases (1,000 and 1,000,000 finished runs)..." >&2
small="$work/small.db"
large="$work/large.db"
t0=$(date +%s%N)
make_db "$small" 1000
make_db "$large" 1000000
t1=$(date +%s%N)
echo "generated in $(( (t1 - t0) / 1000000 )) ms; large database: $(du -h "$large" | cut -f1)" >&2

commands=(
    "history --limit 50"
    "history --status dead --limit 50"
    "history job-7 --limit 50"
    "history job-7 --status dead --limit 50"
    "history --since 1h --limit 50"
    "show 500"
    "status"
    "status --json"
    "metrics"
)
printf '%-46s %12s %14s\n' "command (median of $repeat)" "1,000 runs" "1,000,000 runs"
for c in "${commands[@]}"; do
    read -r -a words <<<"$c"
    small_ms=$(median_ms "$runner" --db "$small" "${words[@]}")
    large_ms=$(median_ms "$runner" --db "$large" "${words[@]}")
    printf '%-46s %9s ms %11s ms\n' "runner $c" "$small_ms" "$large_ms"
done
printf '%-46s %9s ms %11s ms\n' "runner prune --older-than 1h --dry-run" \
    "$(repeat=1 median_ms "$runner" --db "$small" prune --older-than 1h --dry-run)" \
    "$(repeat=1 median_ms "$runner" --db "$large" prune --older-than 1h --dry-run)"
printf '%-46s %9s ms %11s\n' "runner prune --older-than 1h" \
    "$(repeat=1 median_ms "$runner" --db "$small" prune --older-than 1h)" "(below)"

# Prune the 1,000,000 runs while ticks run, as cron would keep starting them: every tick must
# succeed (no "database is locked"); pending and running runs are never touched. The ticks'
# own hourly prune is off here, so the command does all the deleting.
echo >&2
echo "pruning 1,000,000 runs while ticks run..." >&2
RUNNER_DB=$large "$runner" schedule add live --cron '* * * * *' -- true >/dev/null
start=$(date +%s%N)
"$runner" --db "$large" prune --older-than 1h >"$work/prune.out" 2>&1 &
pruner=$!
ticks=0 failed=0 slowest=0
while kill -0 "$pruner" 2>/dev/null; do
    t0=$(date +%s%N)
    if ! RUNNER_RETENTION=off "$runner" --db "$large" run live >/dev/null 2>>"$work/ticks.err" \
        || ! RUNNER_RETENTION=off "$runner" --db "$large" tick 2>>"$work/ticks.err"; then
        failed=$((failed + 1))
    fi
    t1=$(date +%s%N)
    ticks=$((ticks + 1))
    (( (t1 - t0) / 1000000 > slowest )) && slowest=$(( (t1 - t0) / 1000000 ))
done
wait "$pruner"
end=$(date +%s%N)
echo "prune: $(cat "$work/prune.out") in $(( (end - start) / 1000000 )) ms"
echo "ticks meanwhile: $ticks (each with a manual run), failed: $failed, slowest run+tick: $slowest ms"
if [ -s "$work/ticks.err" ]; then
    echo "tick stderr:"; sort "$work/ticks.err" | uniq -c | head -5
fi
echo "runs left by status: $(sqlite3 "$large" "SELECT group_concat(status || ' ' || n, ', ')
    FROM (SELECT status, count(*) AS n FROM job_runs GROUP BY status)")"
