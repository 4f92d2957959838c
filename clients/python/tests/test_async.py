"""The asyncio worker against a real server: outcomes, cancellation (the handler's task is
cancelled), time limits, and shutdown with jobs in flight."""

from __future__ import annotations

import asyncio
import time

import psycopg

import pg_jobs
from conftest import Recorder, eventually, job_row, new_queue, state_is


def run(coro):
    return asyncio.run(coro)


async def wait_for(what, check, timeout=10.0):
    return await asyncio.to_thread(eventually, what, check, timeout)


def test_outcomes_complete_retry_permanent_unknown(db, dsn, producer):
    queue = new_queue(db, "backoff_base => '100 milliseconds', jitter => 0")
    done = pg_jobs.enqueue(producer, queue, {"n": 1}, kind="ok")
    retried = pg_jobs.enqueue(producer, queue, {}, kind="flaky")
    permanent = pg_jobs.enqueue(producer, queue, {}, kind="broken")
    unknown = pg_jobs.enqueue(producer, queue, {}, kind="unknown")
    recorder = Recorder()

    async def ok(job):
        return {"n": job.payload["n"], "attempt": job.attempt}

    async def flaky(job):
        if job.attempt == 1:
            raise TimeoutError("upstream slow")
        return "ok"

    async def broken(job):
        raise pg_jobs.PermanentError("cannot ever work")

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            produced = await pg_jobs.enqueue_async(conn, queue, {"n": 2}, kind="ok")
        worker = pg_jobs.AsyncWorker(dsn, queue, {"ok": ok, "flaky": flaky, "broken": broken}, on_event=recorder).start()
        await wait_for("every job settled", lambda: (
            job_row(db, done)["state"], job_row(db, produced)["state"], job_row(db, retried)["state"],
            job_row(db, permanent)["state"], recorder.of("released") != []) == ("succeeded", "succeeded", "succeeded", "failed", True))
        await worker.stop()
        return produced

    produced = run(main())
    assert job_row(db, done)["result"] == {"n": 1, "attempt": 1}
    assert job_row(db, produced)["result"] == {"n": 2, "attempt": 1}
    assert job_row(db, retried)["attempt"] == 2
    assert "TimeoutError: upstream slow" in job_row(db, retried)["errors"][0]["error"]
    assert job_row(db, permanent)["attempt"] == 1
    row = job_row(db, unknown)
    assert (row["state"], row["attempt"], row["release_reason"]) == ("queued", 0, 'no handler for kind "unknown"')


def test_a_cancel_cancels_the_handlers_task_and_records_nothing(db, dsn, producer):
    queue = new_queue(db, "lease => '900 milliseconds'")
    job_id = pg_jobs.enqueue(producer, queue, {})
    seen = []
    recorder = Recorder()

    async def handler(job):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(("cancelled", job.reason, job.cancelled.is_set()))
            raise
        return "never"

    async def main():
        worker = pg_jobs.AsyncWorker(dsn, queue, {"default": handler}, on_event=recorder).start()
        await wait_for("the job to run", state_is(db, job_id, "running"))
        await asyncio.to_thread(lambda: db.execute("SELECT jobs_cancel(%s)", [job_id]))
        await wait_for("the handler's cancellation", lambda: seen, timeout=3)
        await worker.stop()

    run(main())
    assert seen == [("cancelled", "cancelled", True)]
    assert [(e.outcome, e.during) for e in recorder.of("lost")] == [("cancelled", "heartbeat")]
    assert job_row(db, job_id)["state"] == "cancelled"


def test_stop_cancels_a_claim_whose_statement_reaches_the_server_after_the_first_cancel(db, dsn):
    # The claim's statement is held back for 0.5 s, as a starved backend or a slow network
    # would: stop()'s first cancel request finds the backend idle and the server drops it.
    queue = new_queue(db)

    async def main():
        claim_sent = asyncio.Event()

        class SlowClaims(psycopg.AsyncConnection):
            async def execute(self, query, params=None, **kwargs):
                if "jobs_claim" in str(query):
                    claim_sent.set()
                    await asyncio.sleep(0.5)
                return await super().execute(query, params, **kwargs)

        worker = pg_jobs.AsyncWorker(dsn, queue, {}, wait=60,
                                     connect=lambda: SlowClaims.connect(dsn, **pg_jobs.connect_kwargs())).start()
        await asyncio.wait_for(claim_sent.wait(), 10)
        started = time.monotonic()
        await worker.stop()
        return time.monotonic() - started

    assert run(main()) < 5


def test_time_limits_and_shutdown_with_jobs_in_flight(db, dsn, producer):
    queue = new_queue(db, "backoff_base => '1 hour'")
    timed_out = pg_jobs.enqueue(producer, queue, {}, kind="hung_limited")
    quick = pg_jobs.enqueue(producer, queue, {}, kind="quick")
    hung = pg_jobs.enqueue(producer, queue, {}, kind="hung")
    recorder = Recorder()

    async def never(job):
        await asyncio.Event().wait()

    async def quick_handler(job):
        await asyncio.sleep(0.3)
        return "quick"

    async def main():
        worker = pg_jobs.AsyncWorker(dsn, queue, {
            "hung_limited": pg_jobs.Handler(run=never, timeout=0.3),
            "quick": quick_handler,
            "hung": never,
        }, on_event=recorder).start()
        await wait_for("the time limit", lambda: recorder.of("failed"))
        await wait_for("all picked", lambda: len(recorder.of("picked")) == 3)
        started = time.monotonic()
        await worker.stop(grace=1.0)
        return time.monotonic() - started

    took = run(main())
    assert took < 4
    row = job_row(db, timed_out)
    assert row["state"] == "queued" and row["errors"][0]["error"].startswith("JobTimeoutError: the handler ran longer than its time limit")
    assert job_row(db, quick)["state"] == "succeeded"
    row = job_row(db, hung)
    assert (row["state"], row["attempt"], row["lease_until"], row["release_reason"]) == ("queued", 0, None, "shutting down")


def test_a_kind_without_a_handler_fails_once_older_than_unknown_kind_max_age(db, dsn, producer):
    from test_worker import check_poison, claim_sleeping

    queue = new_queue(db, "max_attempts => 3, backoff_base => '100 milliseconds', jitter => 0")
    recorder = Recorder()

    async def sent(job):
        return "sent"

    async def main():
        worker = pg_jobs.AsyncWorker(dsn, queue, {"mail": sent, "sms": sent}, name="py-async-poison", on_event=recorder,
                                     unknown_kind_delay=0.1, unknown_kind_max_age=1.5).start()
        await wait_for("the claim to wait", lambda: claim_sleeping(db))
        job_id = await asyncio.to_thread(pg_jobs.enqueue, producer, queue, {}, kind="poison")
        await wait_for("the job to fail for good", state_is(db, job_id, "failed"), timeout=30)
        await worker.stop()
        return job_id

    check_poison(db, run(main()), recorder.events, "py-async-poison")
