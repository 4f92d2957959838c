"""Workflows against a real server, with the thread and the asyncio worker, directly and through
PgBouncer: jobs enqueued ``after`` others (fan-out and fan-in, a batch after a job, a failed
parent), ``results`` and ``wait`` (woken by the commit that finishes the last job, a timeout,
REPEATABLE READ refused, no snapshot held while asleep), and a handler that awaits a signal:
sent after the await or before it (no lost wake-up), in the sender's own transaction (a
rolled-back one wakes nothing), timed out, on a cancelled job, refused; the payload reaches
the next run and the attempt is not spent."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import psycopg
import pytest

import pg_jobs
from conftest import Recorder, eventually, job_row, new_queue, state_is, url

MODES = ("threads", "asyncio")
VIAS = ("direct", "bouncer")


class Running:
    """A started worker of ``mode`` (an AsyncWorker on an event loop of its own thread)."""

    def __init__(self, mode: str, conninfo: str, queue: str, handlers: dict, **options):
        self.mode = mode
        self.recorder = Recorder()
        if mode == "threads":
            self.worker = pg_jobs.Worker(conninfo, queue, handlers, on_event=self.recorder, **options).start()
            return
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def begin():
            return pg_jobs.AsyncWorker(conninfo, queue, handlers, on_event=self.recorder, **options).start()

        self.worker = asyncio.run_coroutine_threadsafe(begin(), self.loop).result(10)

    @property
    def active(self) -> int:
        return self.worker.active

    def stop(self) -> None:
        if self.mode == "threads":
            self.worker.stop()
            return
        asyncio.run_coroutine_threadsafe(self.worker.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def sleeping_waits(db, name: str) -> list[tuple]:
    """The backends of application ``name`` asleep in a wait, with their backend_xmin."""
    return db.execute(
        "SELECT backend_xmin::text, query FROM pg_stat_activity"
        " WHERE application_name = %s AND state = 'active' AND wait_event_type = 'Extension'",
        [name],
    ).fetchall()


def connect(who: str = "producer", via: str = "direct", **params) -> psycopg.Connection:
    return psycopg.connect(url(who, via), **{**pg_jobs.connect_kwargs(), **params})


# -- dependencies ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via", VIAS)
def test_fan_out_and_fan_in_a_merge_after_its_parts_reads_their_results(db, mode, via):
    queue = new_queue(db)
    with connect("producer", via) as producer:
        parts = [job_id for job_id, _ in pg_jobs.enqueue_batch(producer, queue, [{"part": n} for n in (1, 2, 3)], kind="part")]
        merge = pg_jobs.enqueue(producer, queue, {"parts": parts}, kind="merge", after=parts)
        # A batch after the merge: every job of it waits for the same parent (ids as strings too).
        reports = [job_id for job_id, _ in pg_jobs.enqueue_batch(producer, queue, [{"to": "ada"}, {"to": "grace"}],
                                                                 kind="report", after=[str(merge)])]
        assert [r.state for r in pg_jobs.results(producer, [merge, *reports])] == ["waiting"] * 3
        reader = connect("worker", via)  # psycopg connections may be shared by threads
        try:
            if mode == "threads":
                def read(ids):
                    return pg_jobs.results(reader, ids)

                handlers = {
                    "part": lambda job: {"rows": 100 * job.payload["part"]},
                    "merge": lambda job: {"rows": sum(r.result["rows"] for r in read(job.payload["parts"])),
                                          "states": [r.state for r in read(job.payload["parts"])]},
                    "report": lambda job: {"to": job.payload["to"], "rows": read([merge])[0].result["rows"]},
                }
            else:
                async def read(ids):
                    async with await psycopg.AsyncConnection.connect(url("worker", via), **pg_jobs.connect_kwargs()) as conn:
                        return await pg_jobs.results_async(conn, ids)

                async def part(job):
                    return {"rows": 100 * job.payload["part"]}

                async def merge_(job):
                    parents = await read(job.payload["parts"])
                    return {"rows": sum(r.result["rows"] for r in parents), "states": [r.state for r in parents]}

                async def report(job):
                    return {"to": job.payload["to"], "rows": (await read([merge]))[0].result["rows"]}

                handlers = {"part": part, "merge": merge_, "report": report}
            running = Running(mode, url("worker", via), queue, handlers)
            try:
                done = pg_jobs.wait(producer, [merge, *reports], 30)
            finally:
                running.stop()
        finally:
            reader.close()
    assert [(r.id, r.state) for r in done] == [(merge, "succeeded")] + [(i, "succeeded") for i in reports]
    assert done[0].result == {"rows": 600, "states": ["succeeded"] * 3}
    assert [r.result for r in done[1:]] == [{"to": "ada", "rows": 600}, {"to": "grace", "rows": 600}]
    assert all(r.finished_at is not None and r.errors == [] for r in done)
    assert job_row(db, merge)["after"] == parts


def test_a_parent_that_fails_for_good_cancels_its_dependents_the_error_naming_it(db, producer, dsn):
    queue = new_queue(db)
    parent = pg_jobs.enqueue(producer, queue, {}, kind="broken")
    child = pg_jobs.enqueue(producer, queue, {}, kind="never", after=[parent])
    grandchild = pg_jobs.enqueue(producer, queue, {}, kind="never", after=[child])
    ran = []

    def broken(job):
        raise pg_jobs.PermanentError("the file is corrupt")

    running = Running("threads", dsn, queue, {"broken": broken, "never": ran.append})
    try:
        done = pg_jobs.wait(producer, [parent, child, grandchild], 30)
    finally:
        running.stop()
    assert [r.state for r in done] == ["failed", "cancelled", "cancelled"]
    assert f"dependency {parent} failed" in done[1].errors[0]["error"]
    assert f"dependency {child} cancelled" in done[2].errors[0]["error"]
    assert ran == []


# -- results and wait --------------------------------------------------------------------


def test_results_reads_each_job_in_the_order_given_and_skips_unknown_ones(db, producer):
    queue = new_queue(db)
    a = pg_jobs.enqueue(producer, queue, {})
    b = pg_jobs.enqueue(producer, queue, {})
    held = db.execute("SELECT id, lease FROM jobs_claim(%s) WHERE id = %s", [queue, a]).fetchone()
    db.execute("SELECT jobs_complete(%s, %s, '{\"ok\": true}')", held)
    read = pg_jobs.results(producer, [b, 999999999999, str(a)])
    assert [(r.id, r.state, r.result, r.finished_at is None) for r in read] == [
        (b, "queued", None, True), (a, "succeeded", {"ok": True}, False)]
    assert isinstance(read[0], pg_jobs.JobResult) and read[0].state in pg_jobs.STATES


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via", VIAS)
def test_wait_is_woken_by_the_commit_that_finishes_the_last_job_holding_no_snapshot(db, producer, mode, via):
    queue = new_queue(db)
    ids = [pg_jobs.enqueue(producer, queue, {}), pg_jobs.enqueue(producer, queue, {})]
    held = db.execute("SELECT id, lease FROM jobs_claim(%s, n => 2)", [queue]).fetchall()
    name = f"py-wait-{mode}-{via}"
    box: dict = {}

    def waiter():
        try:
            if mode == "threads":
                with connect("producer", via, application_name=name) as conn:
                    box["done"] = pg_jobs.wait(conn, ids, 20)
            else:
                async def main():
                    async with await psycopg.AsyncConnection.connect(
                            url("producer", via), application_name=name, **pg_jobs.connect_kwargs()) as conn:
                        return await pg_jobs.wait_async(conn, ids, 20)
                box["done"] = asyncio.run(main())
        except BaseException as error:  # reported by the assertions below
            box["error"] = error

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        eventually("the wait to sleep", lambda: sleeping_waits(db, name))
        for _ in range(10):
            for xmin, query in sleeping_waits(db, name):
                assert xmin is None, f"the waiting jobs_wait advertises xmin {xmin}"
                assert query.startswith("SELECT * FROM jobs_wait(")
        db.execute("SELECT jobs_complete(%s, %s, '\"first\"')", held[0])
        with psycopg.connect(db.info.dsn) as settler:  # a transaction of its own
            settler.execute("SELECT jobs_fail(%s, %s, 'no luck', retry => false)", held[1])
            # Both jobs are finished in that transaction, but it has not committed.
            eventually("the wait to sleep on", lambda: sleeping_waits(db, name))
            assert "done" not in box and thread.is_alive()
        thread.join(20)
    finally:
        thread.join(30)
    assert "error" not in box, box.get("error")
    done = box["done"]
    assert [(r.id, r.state, r.result) for r in done] == [(ids[0], "succeeded", "first"), (ids[1], "failed", None)]
    assert "no luck" in done[1].errors[0]["error"]


def test_wait_returns_at_its_timeout_with_the_jobs_as_they_are(db, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {})
    assert [(r.id, r.state, r.finished_at) for r in pg_jobs.wait(producer, [job_id], 0.3)] == [(job_id, "queued", None)]


def test_wait_refuses_repeatable_read_whose_snapshot_would_never_see_the_jobs_finish(db, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {})
    with connect() as conn:
        with pytest.raises(psycopg.errors.InvalidTransactionState) as refused:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                pg_jobs.wait(conn, [job_id], 1)
        assert refused.value.sqlstate == "25000"
    with pytest.raises(ValueError):
        pg_jobs.wait(producer, [job_id], -1)


# -- signals -----------------------------------------------------------------------------


def awaiting_handler(mode: str, signal_of, timeout: float | None, answers: list, runs: list, cancelled: list):
    """A handler that awaits ``signal_of(job)`` on the job's first run (recording what
    await_signal answered and whether the run's ``cancelled`` was set then) and on a run woken
    by the signal returns what it carried."""
    if mode == "threads":
        def order(job):
            runs.append(job)
            if job.signal is None:
                answers.append(job.await_signal(signal_of(job), timeout=timeout))
                cancelled.append(job.cancelled.is_set())
                return "ignored: the run has ended"
            return {"woken": dataclasses.asdict(job.signal)}
    else:
        async def order(job):
            runs.append(job)
            if job.signal is None:
                answers.append(await job.await_signal(signal_of(job), timeout=timeout))
                cancelled.append(job.cancelled.is_set())
                return "ignored: the run has ended"
            return {"woken": dataclasses.asdict(job.signal)}
    return order


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via", VIAS)
def test_signalled_after_the_await_in_the_senders_transaction(db, mode, via):
    queue = new_queue(db)
    answers, runs, ended = [], [], []
    with connect("producer", via) as producer:
        job_id = pg_jobs.enqueue(producer, queue, {"order": 1042}, kind="order")
        name = f"payment:{mode}:{via}:{job_id}"
        running = Running(mode, url("worker", via), queue,
                          {"order": awaiting_handler(mode, lambda job: name, 60, answers, runs, ended)})
        try:
            eventually("the await", lambda: running.recorder.of("awaiting") and ended and running.active == 0)
            row = job_row(db, job_id)
            assert (row["state"], row["attempt"], row["lease"]) == ("waiting", 0, None)
            assert answers == ["waiting"] and ended == [True]
            awaiting = running.recorder.of("awaiting")[0]
            assert (awaiting.outcome, awaiting.signal, awaiting.job.id) == ("waiting", name, job_id)
            # A webhook's handler: its own write and the signal in one transaction. Rolled back first.
            with connect("producer", via, autocommit=False) as webhook:
                assert pg_jobs.signal(webhook, name, {"amount": 1}) == 1
                webhook.rollback()
                assert job_row(db, job_id)["state"] == "waiting", "a rolled-back signal wakes nothing"
                with webhook.transaction():
                    assert pg_jobs.signal(webhook, name, {"amount": 59.9, "provider": "acmepay"}, keep=60) == 1
                    assert job_row(db, job_id)["state"] == "waiting", "the signal acts at its commit"
            (done,) = pg_jobs.wait(producer, [job_id], 20)
        finally:
            running.stop()
    woken = {"name": name, "payload": {"amount": 59.9, "provider": "acmepay"}, "timed_out": False}
    assert (done.state, done.result) == ("succeeded", {"woken": woken})
    assert [job.attempt for job in runs] == [1, 1], "the await gave the attempt back"
    assert runs[1].signal == pg_jobs.Signal(**woken)
    assert job_row(db, job_id)["attempt"] == 1
    assert running.recorder.types() == ["picked", "awaiting", "picked", "completed", "stopped"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via", VIAS)
def test_signalled_before_the_await_the_await_answers_queued_and_the_job_runs_with_it(db, mode, via):
    queue = new_queue(db)
    answers, runs, ended = [], [], []
    name = f"early:{mode}:{via}:{queue}"
    with connect("producer", via) as producer:
        assert pg_jobs.signal(producer, name, {"fast": True}) == 0, "nobody awaits it yet: recorded for later"
        job_id = pg_jobs.enqueue(producer, queue, {}, kind="order")
        running = Running(mode, url("worker", via), queue,
                          {"order": awaiting_handler(mode, lambda job: name, None, answers, runs, ended)})
        try:
            (done,) = pg_jobs.wait(producer, [job_id], 20)
        finally:
            running.stop()
    assert answers == ["queued"]
    assert running.recorder.of("awaiting")[0].outcome == "queued"
    assert done.state == "succeeded"
    assert runs[1].signal == pg_jobs.Signal(name, {"fast": True}, False)
    assert [job.attempt for job in runs] == [1, 1]


@pytest.mark.parametrize("mode", MODES)
def test_an_await_that_times_out_runs_the_job_again_flagged_timed_out(db, producer, dsn, mode):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="order")
    answers, runs, ended = [], [], []
    # The background worker fires timeouts on its tick (200 ms in the test cluster).
    running = Running(mode, dsn, queue,
                      {"order": awaiting_handler(mode, lambda job: f"never-sent:{job.id}", 0.3, answers, runs, ended)})
    try:
        (done,) = pg_jobs.wait(producer, [job_id], 20)
    finally:
        running.stop()
    assert answers == ["waiting"] and done.state == "succeeded"
    assert runs[1].signal == pg_jobs.Signal(f"never-sent:{job_id}", None, True)
    assert [job.attempt for job in runs] == [1, 1]


@pytest.mark.parametrize("mode", MODES)
def test_awaiting_a_job_cancelled_meanwhile_answers_cancelled_and_records_nothing(db, producer, dsn, mode):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="order")
    go = threading.Event()
    answers = []
    if mode == "threads":
        def order(job):
            go.wait(10)
            answers.append(job.await_signal(f"cancelled:{job.id}"))
    else:
        async def order(job):
            await asyncio.to_thread(go.wait, 10)
            answers.append(await job.await_signal(f"cancelled:{job.id}"))
    running = Running(mode, dsn, queue, {"order": order})
    try:
        eventually("the job to run", state_is(db, job_id, "running"))
        db.execute("SELECT jobs_cancel(%s)", [job_id])
        go.set()
        eventually("the answer", lambda: answers)
    finally:
        running.stop()
    assert answers == ["cancelled"]
    (lost,) = running.recorder.of("lost")
    assert (lost.outcome, lost.during) == ("cancelled", "settle")
    assert not running.recorder.of("awaiting")
    assert job_row(db, job_id)["state"] == "cancelled"


@pytest.mark.parametrize("mode", MODES)
def test_an_await_the_server_refuses_raises_in_the_handler_and_fails_the_attempt(db, producer, dsn, mode):
    queue = new_queue(db, "max_attempts => 1")
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="order")
    errors = []
    if mode == "threads":
        def order(job):
            try:
                job.await_signal("x" * 256)
            except Exception as error:
                errors.append(error)
                raise
    else:
        async def order(job):
            try:
                await job.await_signal("x" * 256)
            except Exception as error:
                errors.append(error)
                raise
    running = Running(mode, dsn, queue, {"order": order})
    try:
        (done,) = pg_jobs.wait(producer, [job_id], 20)
    finally:
        running.stop()
    assert done.state == "failed"
    assert errors[0].sqlstate == "22023"
    assert "SQLSTATE 22023" in done.errors[0]["error"]
    assert [e.outcome for e in running.recorder.of("failed")] == ["failed"]
