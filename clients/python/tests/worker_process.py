"""A worker process for the SIGTERM and stall tests: ``python worker_process.py DSN QUEUE
[async]`` runs the queue with the worker's default signal handling and a grace of 1 s, and
prints one line per event (``picked <id>``, ``lost <id> <outcome>``, ...) and ``stopped``."""

import asyncio
import sys
import threading
import time

import pg_jobs


def report(event: pg_jobs.Event) -> None:
    job_id = event.job.id if event.job is not None else "-"
    print(event.type, job_id, event.outcome or "", flush=True)


def main() -> None:
    dsn, queue = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "async":
        async def slow(job):
            await asyncio.sleep(0.3)
            return "finished in the grace"

        async def hung(job):
            await asyncio.Event().wait()

        async def stall(job):
            await job.cancelled.wait()
            return "stale result"

        worker = pg_jobs.AsyncWorker(dsn, queue, {"slow": slow, "hung": hung, "stall": stall},
                                     grace=1.0, on_event=report, concurrency=1)
        asyncio.run(worker.run())
    else:
        def stall(job):
            job.cancelled.wait(30)
            return "stale result"

        worker = pg_jobs.Worker(dsn, queue, {
            "slow": lambda job: (time.sleep(0.3), "finished in the grace")[1],
            "hung": lambda job: threading.Event().wait(),
            "stall": stall,
        }, grace=1.0, on_event=report, concurrency=1)
        worker.run()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
