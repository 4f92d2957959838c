"""Every statement the library sends passes its parameters as Python strings (sent untyped),
Jsonb, booleans, NULLs or lists of strings (or of Jsonb and NULLs), never with a cast: the server resolves each call
by the function's name alone (no jobs_* function is overloaded)."""

from __future__ import annotations

import re
import time

import psycopg
from psycopg.types.json import Jsonb

import pg_jobs
from conftest import eventually, new_queue

ALLOWED = (str, bool, Jsonb, type(None))


class RecordingConnection(psycopg.Connection):
    seen: list = []

    def execute(self, query, params=None, **kwargs):
        RecordingConnection.seen.append((query, list(params or [])))
        return super().execute(query, params, **kwargs)


def test_every_statement_sends_untyped_parameters_without_casts(db, dsn):
    queue = new_queue(db, "lease => '600 milliseconds'")
    RecordingConnection.seen = []
    conn = RecordingConnection.connect(dsn, **pg_jobs.connect_kwargs())
    pg_jobs.enqueue(conn, queue, {"a": 1}, kind="ok", priority=1, headers={"h": 1}, run_at="now")
    pg_jobs.enqueue_batch(conn, queue, [{"b": 1}], kind="fail")
    pg_jobs.enqueue(conn, queue, {}, kind="unknown")
    pg_jobs.enqueue(conn, queue, {}, kind="slow")

    def ok(job):
        job.progress({"p": 1})
        return {"r": 1}

    def fail(job):
        raise ValueError("x")

    worker = pg_jobs.Worker(dsn, queue, {"ok": ok, "fail": fail, "slow": lambda job: time.sleep(0.7)}, lease=0.6,
                            connect=lambda: RecordingConnection.connect(dsn, **pg_jobs.connect_kwargs())).start()
    try:
        eventually("every job settled", lambda: db.execute(
            "SELECT count(*) FILTER (WHERE state = 'running') = 0 AND count(*) FILTER (WHERE state = 'succeeded') = 2"
            " FROM jobs.job WHERE queue = %s", [queue]).fetchone()[0])
    finally:
        worker.stop()
    # One job at a time, each completed with the next claim (one with a result, one without).
    try:
        pg_jobs.enqueue_batch(conn, queue, [{"c": 1}, {"c": 2}, {"c": 3}], kind="cycle")
        done = []
        cycler = pg_jobs.Worker(dsn, queue, {"cycle": lambda job: None if job.payload["c"] == 2 else job.payload},
                                concurrency=1, kinds="handled", on_event=lambda e: done.append(e.type == "completed"),
                                connect=lambda: RecordingConnection.connect(dsn, **pg_jobs.connect_kwargs())).start()
        try:
            eventually("the cycle jobs to succeed", lambda: sum(done) == 3)
        finally:
            cycler.stop()
        # Workflows: a job after another (single and batch), signals recorded before the awaits
        # (with a keep and without), a handler's await_signal (with a timeout and without),
        # results and wait.
        first = pg_jobs.enqueue(conn, queue, {"timeout": 60}, kind="awaits")
        ((second, _),) = pg_jobs.enqueue_batch(conn, queue, [{}], kind="awaits", after=[first])
        third = pg_jobs.enqueue(conn, queue, {}, kind="awaits", after=[first, second])
        pg_jobs.signal(conn, f"untyped-{first}", {"p": 1}, keep=60)
        pg_jobs.signal(conn, f"untyped-{second}")
        pg_jobs.signal(conn, f"untyped-{third}", "text")

        def awaits(job):
            if job.signal is not None:
                return job.signal.payload
            return job.await_signal(f"untyped-{job.id}", timeout=job.payload.get("timeout"))

        awaiter = pg_jobs.Worker(dsn, queue, {"awaits": awaits}, kinds="handled",
                                 connect=lambda: RecordingConnection.connect(dsn, **pg_jobs.connect_kwargs())).start()
        try:
            done = pg_jobs.wait(conn, [first, second, third], 20)
        finally:
            awaiter.stop()
        assert [r.state for r in done] == ["succeeded"] * 3
        assert [r.result for r in pg_jobs.results(conn, [first, third])] == [{"p": 1}, "text"]
    finally:
        conn.close()
    functions = {m.group(0) for query, _ in RecordingConnection.seen for m in [re.search(r"jobs_\w+", str(query))] if m}
    for name in ("jobs_enqueue", "jobs_enqueue_batch", "jobs_claim", "jobs_heartbeat", "jobs_complete",
                 "jobs_complete_and_claim", "jobs_fail", "jobs_release", "jobs_await", "jobs_signal", "jobs_results",
                 "jobs_wait"):
        assert name in functions, f"{name} was not called"
    for query, params in RecordingConnection.seen:
        assert not re.search(r"%s\s*::", str(query)), f"a parameter is cast in: {query}"
        for value in params:
            plain = isinstance(value, ALLOWED) or (isinstance(value, list) and all(isinstance(v, (str, Jsonb, type(None))) for v in value))
            assert plain, f"{value!r} in {query} is not sent untyped (or as jsonb)"
