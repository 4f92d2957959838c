"""A waiting worker holds nothing back: while its claim sleeps in the server, its backend
advertises no snapshot (``pg_stat_activity.backend_xmin`` is NULL), so VACUUM is free to clean
up behind it. The server lets go of the snapshot only for a claim that is the bare call in
autocommit, which is what both workers send."""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

import pg_jobs
from conftest import eventually, job_row, new_queue, state_is


def sleeping_claims(db, name: str) -> list[tuple]:
    return db.execute(
        "SELECT backend_xmin::text, query FROM pg_stat_activity"
        " WHERE application_name = %s AND state = 'active' AND wait_event_type = 'Extension'",
        [name],
    ).fetchall()


def check_waits_hold_nothing(db, producer, name: str, queue: str, lease: float | None):
    eventually("the claim to sleep", lambda: sleeping_claims(db, name))
    # Sampled while the claim sleeps: a snapshot held for the wait would show in every sample.
    for _ in range(10):
        for xmin, query in sleeping_claims(db, name):
            assert xmin is None, f"the waiting claim advertises xmin {xmin}"
            assert query.startswith("SELECT * FROM jobs_claim(")
        time.sleep(0.02)
    # And the wait still ends with the job, on the claim's lease (the worker's or the queue's).
    job_id = pg_jobs.enqueue(producer, queue, {})
    row = eventually("the job", state_is(db, job_id, "succeeded"))
    assert row["lease_duration"].total_seconds() == (lease or 7)


def test_a_thread_workers_waiting_claim_holds_no_snapshot(db, dsn, producer):
    for lease in (None, 5.0):
        queue = new_queue(db, "lease => '7 seconds'")
        name = f"py-waits-{lease}"
        worker = pg_jobs.Worker(f"{dsn}?application_name={name}", queue, {"default": lambda job: "done"},
                                lease=lease, wait=20).start()
        try:
            check_waits_hold_nothing(db, producer, name, queue, lease)
        finally:
            worker.stop()


def test_an_async_workers_waiting_claim_holds_no_snapshot(db, dsn, producer):
    async def done(job):
        return "done"

    for lease in (None, 5.0):
        queue = new_queue(db, "lease => '7 seconds'")
        name = f"py-async-waits-{lease}"

        async def main():
            worker = pg_jobs.AsyncWorker(f"{dsn}?application_name={name}", queue, {"default": done},
                                         lease=lease, wait=20).start()
            try:
                await asyncio.to_thread(check_waits_hold_nothing, db, producer, name, queue, lease)
            finally:
                await worker.stop()

        asyncio.run(main())


def test_a_queue_created_between_the_read_of_its_lease_and_the_claim(db, dsn, producer):
    """The worker reads the queue's lease before each claim (again once a minute); here the
    queue does not exist at that read and is created, with a job of a kind nobody handles,
    before the claim. The claim then ran on the queue's lease, which the worker reads again to
    date the claim: the young job is released, as a job of a deploy in progress (dated by
    lease_until alone, it would look a lease, 60 s, older than it is)."""
    queue = f"py-{os.getpid()}-late"
    created = []

    class CreatesTheQueue(psycopg.Connection):
        def execute(self, query, params=None, **kwargs):
            cur = super().execute(query, params, **kwargs)
            if "FROM jobs.queue" in str(query) and not created:
                db.execute("SELECT jobs_create_queue(%s, lease => '60 seconds')", [queue])
                created.append(pg_jobs.enqueue(db, queue, {}, kind="from-the-next-deploy"))
            return cur

    events = []
    worker = pg_jobs.Worker(dsn, queue, {}, unknown_kind_max_age=5, on_event=events.append,
                            connect=lambda: CreatesTheQueue.connect(dsn, **pg_jobs.connect_kwargs())).start()
    try:
        eventually("the release", lambda: [e for e in events if e.type in ("released", "failed")])
    finally:
        worker.stop()
    assert [e.type for e in events if e.type not in ("picked", "stopped")] == ["released"]
    assert job_row(db, created[0])["lease_duration"].total_seconds() == 60
