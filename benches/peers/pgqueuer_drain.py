"""Peer for S1 on PostgreSQL: pgqueuer draining N jobs of `sh -c true`, WORKERS at a time.

Usage: pgqueuer_drain.py DSN N WORKERS. DSN names an empty database: installs pgqueuer's schema
and enqueues N jobs (not timed, as runner's runs are seeded before its tick starts), then runs
one PgQueuer in drain mode with the entrypoint's concurrency limit at WORKERS and prints the
seconds until the queue is empty. Exits non-zero unless each of the N jobs ran exactly once.
"""
import asyncio
import sys
import time
from datetime import timedelta

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

dsn, n, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


async def main() -> float:
    setup = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(setup))
    await queries.install()
    for first in range(0, n, 1000):
        size = min(1000, n - first)
        await queries.enqueue(["sh_true"] * size, [None] * size, [0] * size)
    await setup.close()

    connection = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(connection))
    ran: list[int] = []

    @pgq.entrypoint("sh_true", concurrency_limit=workers)
    async def sh_true(job: Job) -> None:
        process = await asyncio.create_subprocess_exec("/bin/sh", "-c", "true")
        if await process.wait() != 0:
            raise RuntimeError("sh -c true failed")
        ran.append(job.id)

    start = time.monotonic()
    await pgq.run(
        mode=QueueExecutionMode.drain,
        batch_size=workers,
        dequeue_timeout=timedelta(seconds=0.1),
    )
    elapsed = time.monotonic() - start
    await connection.close()
    if len(ran) != n or len(set(ran)) != n:
        sys.exit(f"pgqueuer ran {len(ran)} jobs ({len(set(ran))} distinct) of {n}")
    return elapsed


print(f"{asyncio.run(main()):.6f}")
