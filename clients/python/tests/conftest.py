"""Fixtures of the Python client tests: connections to the test cluster (direct and through
PgBouncer) that clients/test starts, fresh queues, and workers that record their events."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time

import psycopg
import pytest

import pg_jobs

_counter = itertools.count()


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the tests through clients/test, which starts the servers")
    return value


def url(who: str, via: str = "direct") -> str:
    """Workers connect as a login role granted jobs_worker, producers as one granted
    jobs_client; ``via`` is the server or one of PgBouncer's pools (40 or 2 server connections)."""
    user = env("PG_JOBS_TEST_WORKER_ROLE" if who == "worker" else "PG_JOBS_TEST_PRODUCER_ROLE")
    if via == "direct":
        return f"postgresql://{user}@127.0.0.1:{env('PG_JOBS_TEST_PORT')}/postgres"
    database = {"bouncer": "pgjobs", "bouncer2": "pgjobs_small"}[via]
    return f"postgresql://{user}@127.0.0.1:{env('PG_JOBS_TEST_BOUNCER_PORT')}/{database}"


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    """Set-up and checks: the superuser, directly."""
    return env("PG_JOBS_TEST_DSN")


@pytest.fixture(scope="session")
def dsn() -> str:
    """The workers' connection string."""
    return url("worker")


@pytest.fixture(scope="session")
def bouncer_dsn() -> str:
    return url("worker", "bouncer")


@pytest.fixture(scope="session")
def bouncer_small_dsn() -> str:
    return url("worker", "bouncer2")


@pytest.fixture
def db(admin_dsn):
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def producer():
    """A producer's connection (autocommit, no prepared statements)."""
    with psycopg.connect(url("producer"), **pg_jobs.connect_kwargs()) as conn:
        yield conn


def new_queue(db, settings: str = "") -> str:
    """A queue no other test uses; ``settings`` are named SQL arguments of jobs_create_queue."""
    name = f"py-{os.getpid()}-{next(_counter)}"
    db.execute(f"SELECT jobs_create_queue('{name}'{', ' + settings if settings else ''})")
    return name


def job_row(db, job_id) -> dict:
    cur = db.execute("SELECT * FROM jobs.job WHERE id = %s", [job_id])
    row = cur.fetchone()
    return None if row is None else dict(zip([c.name for c in cur.description], row))


def eventually(what: str, check, timeout: float = 10.0):
    """Polls ``check`` until it returns something truthy, or fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
            if last:
                return last
        except Exception as error:  # the condition may raise until it holds
            last = error
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(0.025)


def state_is(db, job_id, state: str):
    """A check for :func:`eventually`: the job's row once it is in ``state``."""
    def check():
        row = job_row(db, job_id)
        return row if row and row["state"] == state else None
    return check


class Recorder:
    """Collects a worker's events."""

    def __init__(self):
        self.events: list[pg_jobs.Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: pg_jobs.Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, type_: str) -> list[pg_jobs.Event]:
        with self._lock:
            return [e for e in self.events if e.type == type_]

    def types(self) -> list[str]:
        with self._lock:
            return [e.type for e in self.events]


@pytest.fixture
def start_worker(dsn):
    """Starts a thread worker with an event recorder; stops it at the end of the test."""
    started: list[pg_jobs.Worker] = []

    def start(queue, handlers, conninfo=None, **options):
        recorder = Recorder()
        worker = pg_jobs.Worker(conninfo or dsn, queue, handlers, on_event=recorder, **options)
        worker.start()
        started.append(worker)
        return worker, recorder

    yield start
    for worker in started:
        worker.stop(grace=0)


def calls(sent: list[str], name: str) -> int:
    """How many of the statements sent call the function ``name``."""
    return sum(1 for query in sent if re.search(rf"\b{name}\(", query))


def spying(sent: list[str]):
    """Connection classes that record each statement's text in ``sent``."""

    class Sync(psycopg.Connection):
        def execute(self, query, params=None, **kwargs):
            sent.append(str(query))
            return super().execute(query, params, **kwargs)

    class Async(psycopg.AsyncConnection):
        async def execute(self, query, params=None, **kwargs):
            sent.append(str(query))
            return await super().execute(query, params, **kwargs)

    return Sync, Async
