"""The benchmark's Python burn-down (benchmarks/src/scenarios/clients.rs): a Worker (threads)
or AsyncWorker with the library's defaults and a no-op handler drains a queue.

    python bench/burndown.py DSN QUEUE JOBS CONCURRENCY threads|asyncio

Prints READY once its connections are open, starts on a line GO on stdin, prints DONE once
JOBS jobs have completed, then stops."""

import asyncio
import sys
import threading

import psycopg

import pg_jobs


def main() -> None:
    dsn, queue, jobs, concurrency, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    done = threading.Event()
    count = 0
    lock = threading.Lock()

    def on_event(event):
        nonlocal count
        if event.type == "completed":
            with lock:
                count += 1
                if count == jobs:
                    done.set()
        elif event.type in ("failed", "lost", "released"):
            print(f"unexpected {event.type} of job {event.job.id}", file=sys.stderr, flush=True)

    if mode == "threads":
        worker = pg_jobs.Worker(dsn, queue, {"default": lambda job: None}, concurrency=concurrency, on_event=on_event)
        # READY once the server answers; the worker opens its own connections as it starts
        # (inside the measurement, a few milliseconds of a run of seconds).
        psycopg.connect(dsn, **pg_jobs.connect_kwargs()).close()
        print("READY", flush=True)
        sys.stdin.readline()
        worker.start()
        done.wait()
        print("DONE", flush=True)
        worker.stop()
    else:
        async def noop(job):
            return None

        async def run():
            worker = pg_jobs.AsyncWorker(dsn, queue, {"default": noop}, concurrency=concurrency, on_event=on_event)
            print("READY", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            worker.start()
            await asyncio.to_thread(done.wait)
            print("DONE", flush=True)
            await worker.stop()

        asyncio.run(run())


if __name__ == "__main__":
    main()
