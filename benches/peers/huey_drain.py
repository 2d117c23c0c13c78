"""Peer for S1: huey (SQLite storage) draining N jobs of `sh -c true`, WORKERS at a time.

Usage: huey_drain.py QUEUE_DB N WORKERS. Enqueues N tasks (not timed, as runner's runs are
seeded before its tick starts), then starts a consumer with WORKERS threads and prints the
seconds until every task has run once. Exits non-zero unless exactly N tasks ran.
"""
import subprocess
import sys
import threading
import time

from huey import SqliteHuey

queue_db, n, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
huey = SqliteHuey(filename=queue_db, results=False)
done = 0
lock = threading.Lock()
finished = threading.Event()


@huey.task()
def job():
    global done
    subprocess.run(["/bin/sh", "-c", "true"], check=True)
    with lock:
        done += 1
        if done == n:
            finished.set()


for _ in range(n):
    job()

# The consumer's idle back-off starts short so an idle worker finds work quickly, as huey's own
# tuning advice for latency suggests.
consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False,
                                initial_delay=0.001, backoff=1.15, max_delay=0.1,
                                check_worker_health=False)
start = time.monotonic()
consumer.start()
finished.wait(timeout=3600)
elapsed = time.monotonic() - start
consumer.stop(graceful=True)
if done != n or huey.pending_count() != 0:
    sys.exit(f"huey ran {done} of {n} tasks, {huey.pending_count()} still queued")
print(f"{elapsed:.6f}")
