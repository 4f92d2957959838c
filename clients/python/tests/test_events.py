"""What a worker tells ``on_event`` and what it stores: every event carries exactly the fields
README.md's table of events lists, the same table as the Node library's README (checked
here), and an error reads the same everywhere: its message first, its stack in a field of
its own."""

from __future__ import annotations

import asyncio
import pathlib
import re

import pg_jobs
from conftest import Recorder, eventually, job_row, new_queue, state_is

HERE = pathlib.Path(__file__).resolve().parent


def documented_events(readme: pathlib.Path) -> dict[str, list[str]]:
    """The events a README's "Events" section lists, each with its fields (``type`` besides)."""
    text = readme.read_text()
    section = text[text.index("\n## Events"):]
    events = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[1]) if len(cells) >= 5 else None
        if match:
            events[match[1]] = re.findall(r"`(\w+)`", cells[3])
    return events


def test_the_readme_documents_every_event_with_its_fields_as_the_node_readme_does():
    python = documented_events(HERE.parent / "README.md")
    node = documented_events(HERE.parent.parent / "node" / "README.md")
    assert {name: list(fields) for name, fields in pg_jobs.EVENT_FIELDS.items()} == python
    # Node spells the duration durationMs (milliseconds); every other field is the same word.
    assert {name: ["duration" if f == "durationMs" else f for f in fields] for name, fields in node.items()} == python


def run_every_event(db, producer, worker_dsn, admin_dsn, start):
    """Makes a worker (started by ``start(queue, handlers, recorder)``, stopped by the
    returned callable) emit every event type; returns the recorder."""
    queue = new_queue(db, "lease => '900 milliseconds', backoff_base => '100 milliseconds', jitter => 0")
    ok = pg_jobs.enqueue(producer, queue, {}, kind="ok")
    flaky = pg_jobs.enqueue(producer, queue, {}, kind="flaky")
    broken = pg_jobs.enqueue(producer, queue, {}, kind="broken")
    pg_jobs.enqueue(producer, queue, {}, kind="nobody")
    doomed = pg_jobs.enqueue(producer, queue, {}, kind="doomed")
    patient = pg_jobs.enqueue(producer, queue, {}, kind="patient")
    recorder = Recorder()
    stop = start(queue, recorder)
    eventually("the doomed job to run", state_is(db, doomed, "running"))
    db.execute("SELECT jobs_cancel(%s)", [doomed])
    eventually("every job settled", lambda: (
        [job_row(db, i)["state"] for i in (ok, flaky, broken, patient)] == ["succeeded", "succeeded", "failed", "waiting"]
        and recorder.of("released") and recorder.of("lost") and recorder.of("awaiting")))
    awaiting = recorder.of("awaiting")[0]
    assert (awaiting.outcome, awaiting.signal, awaiting.job.id) == ("waiting", f"events-test-{patient}", patient)
    # A claim whose connection dies is retried.
    eventually("the claim to wait", lambda: db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'events-test' AND query LIKE '%%jobs_claim%%' AND state = 'active'").fetchall())
    eventually("the retry", lambda: recorder.of("retrying"))
    stop()
    return recorder


def check_fields(recorder: Recorder, also: list[pg_jobs.Event]):
    events = recorder.events + also
    for event in events:
        documented = pg_jobs.EVENT_FIELDS[event.type]
        assert list(event.as_dict()) == ["type", *documented]
        # Nothing outside the event's fields carries anything.
        for name in ("job", "duration", "outcome", "result", "reason", "permanent", "error", "message", "stack", "during",
                     "signal"):
            if name not in documented:
                assert getattr(event, name) is None, (event.type, name)
    assert {e.type for e in events} == set(pg_jobs.EVENT_FIELDS)
    retrying = [e for e in events if e.type == "retrying"][0]
    assert (retrying.during, retrying.job) == ("claim", None)
    failed = [e for e in events if e.type == "failed" and e.outcome == "failed"][0]
    assert (failed.permanent, failed.message) == (True, "PermanentError: cannot ever work")
    assert failed.stack.startswith('  File "') and "in broken" in failed.stack
    released = recorder.of("released")[0]
    assert released.reason == 'no handler for kind "nobody"' and released.result is None


def handlers():
    def ok(job):
        return {"fine": True}

    def flaky(job):
        if job.attempt == 1:
            raise TimeoutError("upstream slow")

    def broken(job):
        raise pg_jobs.PermanentError("cannot ever work")

    def doomed(job):
        job.cancelled.wait(10)

    def patient(job):
        return job.await_signal(f"events-test-{job.id}")

    return {"ok": ok, "flaky": flaky, "broken": broken, "doomed": doomed, "patient": patient}


def unknown_queue_error(dsn, worker_class) -> list[pg_jobs.Event]:
    recorder = Recorder()

    async def main():
        worker = pg_jobs.AsyncWorker(dsn, "no-such-queue-for-events", {}, on_event=recorder).start()
        await asyncio.to_thread(eventually, "the error", lambda: recorder.of("error"))
        await worker.stop()

    if worker_class is pg_jobs.Worker:
        worker = pg_jobs.Worker(dsn, "no-such-queue-for-events", {}, on_event=recorder).start()
        eventually("the error", lambda: recorder.of("error"))
        worker.stop()
    else:
        asyncio.run(main())
    error = recorder.of("error")[0]
    # As the Node library writes it, but for the driver's class name.
    assert (error.during, error.message) == ("claim", "UndefinedObject: queue 'no-such-queue-for-events' does not exist"
                                             " (SQLSTATE 42704; hint: Create it with SELECT jobs_create_queue('no-such-queue-for-events');)")
    return [e for e in recorder.events if e.type == "error"]


def test_every_thread_worker_event_carries_exactly_its_fields(db, producer, dsn, admin_dsn):
    def start(queue, recorder):
        worker = pg_jobs.Worker(dsn + "?application_name=events-test", queue, handlers(), on_event=recorder).start()
        return worker.stop

    recorder = run_every_event(db, producer, dsn, admin_dsn, start)
    check_fields(recorder, unknown_queue_error(dsn, pg_jobs.Worker))


def test_every_async_worker_event_carries_exactly_its_fields(db, producer, dsn, admin_dsn):
    def as_async(handler):
        async def run(job):
            if job.kind == "doomed":
                await asyncio.Event().wait()  # cancelled with the job
            return handler(job)
        run.__name__ = handler.__name__
        return run

    async_handlers = {kind: as_async(h) for kind, h in handlers().items()}
    # A handler's own frame shows in the stack of what it raised.
    async def broken(job):
        raise pg_jobs.PermanentError("cannot ever work")
    async_handlers["broken"] = broken

    async def patient(job):
        return await job.await_signal(f"events-test-{job.id}")
    async_handlers["patient"] = patient

    loop = asyncio.new_event_loop()
    worker_box = []

    def start(queue, recorder):
        async def begin():
            worker_box.append(pg_jobs.AsyncWorker(dsn + "?application_name=events-test", queue, async_handlers, on_event=recorder).start())
        loop.run_until_complete(begin())
        import threading
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def stop():
            asyncio.run_coroutine_threadsafe(worker_box[0].stop(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        return stop

    recorder = run_every_event(db, producer, dsn, admin_dsn, start)
    loop.close()
    check_fields(recorder, unknown_queue_error(dsn, pg_jobs.AsyncWorker))


def test_an_error_reads_the_same_in_the_event_and_the_job(db, start_worker, producer):
    queue = new_queue(db, "backoff_base => '1 hour'")
    job_id = pg_jobs.enqueue(producer, queue, {})

    def render_invoice(job):
        try:
            int("twelve")
        except ValueError as error:
            raise TypeError("amount is not a number") from error

    worker, rec = start_worker(queue, {"default": render_invoice})
    eventually("the failure", lambda: rec.of("failed"))
    worker.stop()
    failed = rec.of("failed")[0]
    assert isinstance(failed.error, TypeError)
    assert failed.message == "TypeError: amount is not a number"
    assert failed.stack.startswith('  File "') and "in render_invoice" in failed.stack
    assert "\ncaused by ValueError: invalid literal for int() with base 10: 'twelve'\n" in failed.stack
    assert failed.permanent is False
    assert job_row(db, job_id)["errors"][0]["error"] == f"{failed.message}\n{failed.stack}"
