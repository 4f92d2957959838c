"""One commit per job, for the thread and the asyncio worker: a steady worker completes each
job in the same call, and the same transaction, that claims its next one
(``jobs_complete_and_claim``). Counted by the server's committed transactions in a database
of its own; each settle's outcome becomes the same event as before; a job that finishes while
the claim waits, or while the claim loop is held up, is completed on its own at once;
``one_commit_per_job=False`` keeps the separate calls."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading

import psycopg
import pytest

import pg_jobs
from conftest import Recorder, calls, eventually, job_row, new_queue, spying, url

JOBS = 200
_databases = itertools.count()


class Started:
    """A running worker: its events, the statements it sent, and how to stop it."""

    def __init__(self, recorder: Recorder, sent: list[str], stop):
        self.recorder = recorder
        self.sent = sent
        self.stop = stop


def start_thread_worker(conninfo: str, queue: str, handlers: dict, **options) -> Started:
    sent: list[str] = []
    sync, _ = spying(sent)
    recorder = Recorder()
    worker = pg_jobs.Worker(conninfo, queue, handlers, on_event=recorder,
                            connect=lambda: sync.connect(conninfo, **pg_jobs.connect_kwargs()), **options).start()
    return Started(recorder, sent, lambda: worker.stop(grace=5))


def start_async_worker(conninfo: str, queue: str, handlers: dict, **options) -> Started:
    """The asyncio worker on an event loop of its own thread; each (blocking) handler runs in
    a thread of the loop's executor."""
    sent: list[str] = []
    _, async_ = spying(sent)
    recorder = Recorder()
    loop = asyncio.new_event_loop()
    wrapped = {kind: (lambda h: lambda job: asyncio.to_thread(h, job))(h) for kind, h in handlers.items()}

    async def begin():
        return pg_jobs.AsyncWorker(conninfo, queue, wrapped, on_event=recorder,
                                   connect=lambda: async_.connect(conninfo, **pg_jobs.connect_kwargs()), **options).start()

    worker = loop.run_until_complete(begin())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop():
        asyncio.run_coroutine_threadsafe(worker.stop(grace=5), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()

    return Started(recorder, sent, stop)


@pytest.fixture(params=["thread", "asyncio"])
def start(request):
    """Starts a worker of either kind; stops what is still running at the end."""
    started: list[Started] = []
    stopped: set[int] = set()
    starter = start_thread_worker if request.param == "thread" else start_async_worker

    def begin(*args, **options) -> Started:
        s = starter(*args, **options)
        stop = s.stop

        def stop_once():
            if id(s) not in stopped:
                stopped.add(id(s))
                stop()

        s.stop = stop_once
        started.append(s)
        return s

    yield begin
    for s in started:
        s.stop()


class Gates:
    """Events a handler waits on, by job id: the test opens each when the job should finish."""

    def __init__(self):
        self._gates: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _gate(self, job_id: int) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(job_id, threading.Event())

    def wait(self, job_id: int) -> None:
        if not self._gate(job_id).wait(30):
            raise TimeoutError(f"the gate of job {job_id} was not opened")

    def open(self, job_id: int) -> None:
        self._gate(job_id).set()


def commits_of(db, name: str) -> int:
    """The database's committed transactions so far, once no client is connected to it: a
    backend sends its counts to the statistics when it exits (an idle one only every ten
    seconds)."""
    eventually(f"no client connected to {name}", lambda: db.execute(
        "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
        [name]).fetchone()[0])
    return db.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [name]).fetchone()[0]


@pytest.fixture
def own_database(db, admin_dsn):
    """A database of its own with pg_jobs, for counting commits: nothing else runs there (the
    background worker serves only ``postgres``), so its ``pg_stat_database.xact_commit``
    counts the transactions of the worker under test. Yields its name and a function giving
    the connection string of ``'admin'``, ``'worker'`` or ``'producer'`` there."""
    name = f"pgjobs_commits_py_{os.getpid()}_{next(_databases)}"

    def dsn(who: str) -> str:
        base = admin_dsn if who == "admin" else url(who)
        return re.sub(r"/postgres$", f"/{name}", base)

    db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    db.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(dsn("admin"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_jobs")
        yield name, dsn
    finally:
        db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def burn_down(db, own_database, start, one_commit_per_job: bool):
    """A worker of concurrency 1 with a no-op handler burns down JOBS queued jobs in a database
    of its own: the transactions it committed there, and the worker."""
    name, dsn = own_database
    with psycopg.connect(dsn("admin"), autocommit=True) as setup:
        setup.execute("SELECT jobs_create_queue('steady')")
        setup.execute("SELECT count(*) FROM jobs_enqueue_batch('steady', (SELECT array_agg(jsonb_build_object('n', i))"
                      " FROM generate_series(1, %s) AS i))", [JOBS])
    before = commits_of(db, name)
    worker = start(dsn("worker"), "steady", {"default": lambda job: None}, concurrency=1,
                   one_commit_per_job=one_commit_per_job)
    eventually("every job to complete", lambda: len(worker.recorder.of("completed")) == JOBS, timeout=120)
    worker.stop()
    return commits_of(db, name) - before, worker


def test_a_steady_worker_commits_once_per_job(db, own_database, start):
    commits, worker = burn_down(db, own_database, start, True)
    print(f"{commits} commits for {JOBS} jobs")
    # A waiting claim for the first job, one jobs_complete_and_claim per job after it (the last
    # one claims nothing), the queue's lease read; autovacuum may add a few.
    assert JOBS <= commits <= JOBS + JOBS // 10 + 10, f"{commits} commits for {JOBS} jobs"
    assert calls(worker.sent, "jobs_complete_and_claim") >= JOBS - 5
    assert set(worker.recorder.types()) == {"picked", "completed", "stopped"}


def test_without_one_commit_per_job_completes_and_claims_in_separate_calls(db, own_database, start):
    commits, worker = burn_down(db, own_database, start, False)
    print(f"{commits} commits for {JOBS} jobs")
    assert calls(worker.sent, "jobs_complete_and_claim") == 0
    # A claim per job, and a completion per job or two (jobs that finish while the previous
    # completion is on its way go together): above what one commit per job allows.
    assert calls(worker.sent, "jobs_complete_batch") >= JOBS // 4
    assert commits > JOBS + JOBS // 10 + 10, f"{commits} commits for {JOBS} jobs: a claim and a completion each"
    assert set(worker.recorder.types()) == {"picked", "completed", "stopped"}


def test_each_settles_outcome_gives_its_event(db, dsn, producer, start):
    queue = new_queue(db, "lease => '1 minute'")
    a, b, c = (pg_jobs.enqueue(producer, queue, {"n": n}) for n in "abc")
    gates = Gates()

    def handler(job):
        gates.wait(job.id)
        return {"done": job.payload["n"]}

    worker = start(dsn, queue, {"default": handler}, concurrency=1)

    def running(job_id):
        eventually(f"job {job_id} to run", lambda: job_row(db, job_id)["state"] == "running")

    # Cancelled while its handler runs: the completion answers cancelled.
    running(a)
    assert db.execute("SELECT jobs_cancel(%s)", [a]).fetchone()[0] == "cancelled"
    gates.open(a)
    # Its lease cleared by a retry (due in an hour): the completion answers lost.
    running(b)
    db.execute("SELECT jobs_cancel(%s)", [b])
    db.execute("SELECT jobs_retry(%s, now() + interval '1 hour')", [b])
    gates.open(b)
    running(c)
    gates.open(c)
    eventually("c to succeed", lambda: job_row(db, c)["state"] == "succeeded")
    worker.stop()

    seen = [(e.type, e.job.id if e.job else None, e.outcome, e.during) for e in worker.recorder.events]
    assert seen == [
        ("picked", a, None, None),
        ("lost", a, "cancelled", "settle"),
        ("picked", b, None, None),
        ("lost", b, "lost", "settle"),
        ("picked", c, None, None),
        ("completed", c, "succeeded", None),
        ("stopped", None, None, None),
    ]
    assert worker.recorder.of("completed")[0].result == {"done": "c"}
    # Every completion went with a claim; none on its own.
    assert calls(worker.sent, "jobs_complete_and_claim") == 3
    assert calls(worker.sent, "jobs_complete") + calls(worker.sent, "jobs_complete_batch") == 0
    rows = [job_row(db, job_id) for job_id in (a, b, c)]
    assert [(r["state"], r["result"]) for r in rows] == [("cancelled", None), ("queued", None), ("succeeded", {"done": "c"})]


def test_a_job_that_finishes_while_the_claim_waits_is_completed_at_once(db, dsn, producer, start):
    queue = new_queue(db, "lease => '1 minute'")
    job_id = pg_jobs.enqueue(producer, queue, {})
    gates = Gates()
    name = f"waits-{os.getpid()}"

    def handler(job):
        gates.wait(job.id)
        return "done"

    worker = start(f"{dsn}?application_name={name}", queue, {"default": handler}, concurrency=2, wait=30)
    eventually("the job to run", lambda: job_row(db, job_id)["state"] == "running")
    # The free slot's claim waits in the server for 30 s.
    eventually("a claim to wait", lambda: db.execute(
        "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'active'"
        " AND query LIKE '%%jobs_claim(%%'", [name]).fetchone()[0])
    gates.open(job_id)
    # Well before the wait ends (eventually gives up after 10 s).
    eventually("the job to succeed", lambda: job_row(db, job_id)["state"] == "succeeded")
    assert calls(worker.sent, "jobs_complete") == 1
    assert calls(worker.sent, "jobs_complete_and_claim") == 0
    worker.stop()
    assert worker.recorder.types() == ["picked", "completed", "stopped"]


def test_a_job_that_finishes_while_the_claim_loop_is_held_up_is_completed_within_a_bound(db, dsn, admin_dsn, producer, start):
    queue = new_queue(db, "lease => '1 minute'")
    x = pg_jobs.enqueue(producer, queue, {"n": "x"})
    y = pg_jobs.enqueue(producer, queue, {"n": "y"})
    gates = Gates()

    def handler(job):
        gates.wait(job.id)

    worker = start(dsn, queue, {"default": handler}, concurrency=2)
    eventually("both jobs to run", lambda: job_row(db, x)["state"] == job_row(db, y)["state"] == "running")
    # x's row locked: the jobs_complete_and_claim completing x waits for the lock.
    with psycopg.connect(admin_dsn) as locker:
        locker.execute("SELECT 1 FROM jobs.job WHERE id = %s FOR UPDATE", [x])
        gates.open(x)
        eventually("the combined call to wait for the lock", lambda: calls(worker.sent, "jobs_complete_and_claim") == 1)
        gates.open(y)
        # y does not wait for x's call: it is completed in a call of its own.
        eventually("y to succeed", lambda: job_row(db, y)["state"] == "succeeded")
        assert job_row(db, x)["state"] == "running"
        assert calls(worker.sent, "jobs_complete_batch") == 1
        locker.rollback()
    eventually("x to succeed", lambda: job_row(db, x)["state"] == "succeeded")
    worker.stop()
    assert sorted(e.job.id for e in worker.recorder.of("completed")) == sorted([x, y])


def test_stop_does_not_cancel_a_complete_and_claim(db, dsn, admin_dsn, producer, start):
    queue = new_queue(db, "lease => '1 minute'")
    x = pg_jobs.enqueue(producer, queue, {"n": "x"})
    gates = Gates()
    app = f"held-{os.getpid()}"

    def handler(job):
        gates.wait(job.id)
        return "kept"

    worker = start(f"{dsn}?application_name={app}", queue, {"default": handler}, concurrency=1)
    eventually("x to run", lambda: job_row(db, x)["state"] == "running")
    with psycopg.connect(admin_dsn) as locker:
        locker.execute("SELECT 1 FROM jobs.job WHERE id = %s FOR UPDATE", [x])
        gates.open(x)
        eventually("the combined call to wait for the lock", lambda: calls(worker.sent, "jobs_complete_and_claim") == 1)
        stopper = threading.Thread(target=worker.stop)
        stopper.start()
        # Past several of the stop's cancel rounds (every 0.2 s): the call still waits.
        stopper.join(1.0)
        assert stopper.is_alive()
        assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'"
                          " AND query LIKE '%%jobs_complete_and_claim(%%'", [app]).fetchone()[0] == 1
        locker.rollback()
    stopper.join(30)
    row = job_row(db, x)
    assert (row["state"], row["result"]) == ("succeeded", "kept")
    assert worker.recorder.types() == ["picked", "completed", "stopped"]


@pytest.mark.parametrize("worker_class", [pg_jobs.Worker, pg_jobs.AsyncWorker])
def test_one_commit_per_job_must_be_a_boolean(dsn, worker_class):
    with pytest.raises(ValueError, match="one_commit_per_job must be True or False, not 'yes'"):
        worker_class(dsn, "any", {}, one_commit_per_job="yes")
