"""The library through a real PgBouncer 1.18 in transaction pooling mode, and the fact about
psycopg that README.md states, measured here: with prepared statements (psycopg prepares a
query after 5 runs by default) a statement prepared by one client runs for another, so a
worker's heartbeat ran as another client's complete; the library's connections do not prepare."""

from __future__ import annotations

import asyncio
import time

import psycopg

import pg_jobs
from conftest import Recorder, calls, eventually, job_row, new_queue, spying, url


def test_a_thread_worker_and_a_producer_through_pgbouncer(db, bouncer_dsn, start_worker):
    queue = new_queue(db, "lease => '600 milliseconds'")
    with psycopg.connect(url("producer", "bouncer"), **pg_jobs.connect_kwargs()) as producer:
        for i in range(20):
            with producer.transaction(force_rollback=(i == 7)):
                pg_jobs.enqueue(producer, queue, {"n": i}, kind="long" if i % 5 == 0 else "short")
        pg_jobs.enqueue_batch(producer, queue, [{"n": 100 + i} for i in range(180)], kind="short")

    def long(job):
        job.progress({"started": True})
        time.sleep(1.5)  # past two leases: heartbeats through the pooler keep it
        return job.payload["n"]

    sent: list[str] = []
    sync, _ = spying(sent)
    worker, rec = start_worker(queue, {"short": lambda job: job.payload["n"], "long": long},
                               conninfo=bouncer_dsn, name="py-through-pgbouncer",
                               connect=lambda: sync.connect(bouncer_dsn, **pg_jobs.connect_kwargs()))
    eventually("every job", lambda: db.execute(
        "SELECT count(*) = 199 FROM jobs.job WHERE queue = %s AND state = 'succeeded'", [queue]).fetchone()[0], timeout=30)
    worker.stop()
    row = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE worker = 'py-through-pgbouncer'),"
        " count(*) FILTER (WHERE attempt = 1 AND result = payload -> 'n'), count(*) FILTER (WHERE progress IS NOT NULL)"
        " FROM jobs.job WHERE queue = %s", [queue]).fetchone()
    assert row == (199, 199, 199, 4)
    assert not rec.of("lost") and not rec.of("retrying") and not rec.of("error")
    # Completed with the next claims (one commit per job), results included, through the pooler.
    assert calls(sent, "jobs_complete_and_claim") > 0


def test_an_async_worker_and_producer_through_pgbouncer(db, bouncer_dsn):
    queue = new_queue(db)
    recorder = Recorder()

    async def handler(job):
        await asyncio.sleep(0.001)
        return job.payload["n"]

    async def main():
        async with await psycopg.AsyncConnection.connect(url("producer", "bouncer"), **pg_jobs.connect_kwargs()) as producer:
            await pg_jobs.enqueue_batch_async(producer, queue, [{"n": i} for i in range(100)])
            worker = pg_jobs.AsyncWorker(bouncer_dsn, queue, {"default": handler}, on_event=recorder,
                                         name="py-async-through-pgbouncer").start()
            for i in range(100, 150):
                await pg_jobs.enqueue_async(producer, queue, {"n": i})
        await asyncio.to_thread(eventually, "every job", lambda: db.execute(
            "SELECT count(*) = 150 FROM jobs.job WHERE queue = %s AND state = 'succeeded'", [queue]).fetchone()[0], 30)
        await worker.stop()

    asyncio.run(main())
    row = db.execute("SELECT count(*) FILTER (WHERE worker = 'py-async-through-pgbouncer' AND result = payload -> 'n')"
                     " FROM jobs.job WHERE queue = %s", [queue]).fetchone()
    assert row == (150,)


def deallocate_everywhere(a, c):
    """Drops the prepared statements on both server connections of the pool of 2: they
    outlive the clients that made them (a later client's prepare then fails with 42P05)."""
    with c.transaction():
        c.execute("DEALLOCATE ALL")
        a.execute("DEALLOCATE ALL")


def heartbeat_after_someone_elses_complete(bouncer_small_dsn, db, options, prepare):
    """Two clients behind a pool of 2 server connections: a runs its heartbeat, b its
    complete (on the other server connection, while c holds a's), then a heartbeats again
    while c holds the connection a ran on. ``prepare`` is psycopg's execute() argument (True:
    prepare now, as psycopg does by default from a statement's 5th run; None: as configured).
    Returns the second heartbeat's outcome and a's job afterwards."""
    queue = new_queue(db)
    job_a = pg_jobs.enqueue(db, queue, {})
    job_b = pg_jobs.enqueue(db, queue, {})
    with psycopg.connect(bouncer_small_dsn, **options) as a, psycopg.connect(bouncer_small_dsn, **options) as b, \
            psycopg.connect(bouncer_small_dsn, **options) as c:
        deallocate_everywhere(a, c)
        lease_a = db.execute("SELECT lease::text FROM jobs_claim(%s, worker => 'a')", [queue]).fetchone()[0]
        lease_b = db.execute("SELECT lease::text FROM jobs_claim(%s, worker => 'b')", [queue]).fetchone()[0]
        # Without an explicit prepare, run each statement past psycopg's default threshold (5).
        runs = 1 if prepare else 6
        for _ in range(runs):
            a.execute("SELECT jobs_heartbeat(%s, %s)", [str(job_a), lease_a], prepare=prepare)
        with c.transaction():
            c.execute("SELECT 1")  # holds the server connection a used
            for _ in range(runs):
                b.execute("SELECT jobs_complete(%s, %s)", [str(job_b), lease_b], prepare=prepare)
        with c.transaction():
            c.execute("SELECT 1")  # now holds that one again: a lands where b prepared
            outcome = a.execute("SELECT jobs_heartbeat(%s, %s)", [str(job_a), lease_a], prepare=prepare).fetchone()[0]
        deallocate_everywhere(a, c)
    return outcome, job_row(db, job_a)


def test_prepared_statements_cross_wire_between_clients_behind_pgbouncer_1_18(db, bouncer_small_dsn):
    outcome, row = heartbeat_after_someone_elses_complete(bouncer_small_dsn, db, {"autocommit": True}, prepare=True)
    print(f"# with prepared statements a's heartbeat answered {outcome!r}; a's job is {row['state']} with result {row['result']!r}")
    # a asked for a heartbeat; the server ran b's prepared complete with a's parameters.
    assert outcome == "succeeded"
    assert (row["state"], row["result"]) == ("succeeded", None)


def test_the_librarys_connections_do_not_prepare_so_nothing_cross_wires(db, bouncer_small_dsn):
    # The library's connection settings, and its statements run far more than 5 times.
    outcome, row = heartbeat_after_someone_elses_complete(bouncer_small_dsn, db, pg_jobs.connect_kwargs(), prepare=None)
    assert outcome == "running"
    assert row["state"] == "running"
    assert pg_jobs.connect_kwargs()["prepare_threshold"] is None
