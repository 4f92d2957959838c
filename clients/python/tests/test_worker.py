"""The thread worker against a real server: every outcome, progress and heartbeats,
cancellation mid-handler, shutdown with jobs in flight, handlers that never return."""

from __future__ import annotations

import re
import threading
import time

import psycopg
import pytest

import pg_jobs
from conftest import eventually, job_row, new_queue, state_is, url


def test_a_returned_value_completes_the_job_and_becomes_its_result(db, start_worker, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {"to": "ada"}, kind="mail", headers={"traceparent": "t-1"})
    seen = []
    worker, rec = start_worker(queue, {"mail": lambda job: (seen.append(job), {"sent_to": job.payload["to"]})[1]}, name="py-1")
    row = eventually("the job to succeed", state_is(db, job_id, "succeeded"))
    worker.stop()
    assert row["result"] == {"sent_to": "ada"}
    assert row["worker"] == "py-1"
    assert [(j.id, j.kind, j.attempt, j.headers) for j in seen] == [(job_id, "mail", 1, {"traceparent": "t-1"})]
    assert rec.types() == ["picked", "completed", "stopped"]
    assert rec.of("completed")[0].attempt == 1
    assert rec.of("completed")[0].duration >= 0


def test_a_raised_exception_fails_the_attempt_and_the_queue_retries_it(db, start_worker, producer):
    queue = new_queue(db, "backoff_base => '200 milliseconds', jitter => 0")
    job_id = pg_jobs.enqueue(producer, queue, {})
    attempts = []

    def handler(job):
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ConnectionError("smtp timeout")
        return "second time lucky"

    worker, rec = start_worker(queue, {"default": handler})
    row = eventually("the retry to succeed", state_is(db, job_id, "succeeded"))
    worker.stop()
    assert attempts == [1, 2]
    assert len(row["errors"]) == 1 and "ConnectionError: smtp timeout" in row["errors"][0]["error"]
    assert rec.of("failed")[0].outcome == "queued"
    waited = db.execute(
        "SELECT started_at - (errors -> 0 ->> 'at')::timestamptz >= interval '200 milliseconds' FROM jobs.job WHERE id = %s",
        [job_id],
    ).fetchone()[0]
    assert waited


def test_a_permanent_error_fails_the_job_at_once(db, start_worker, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {})

    def handler(job):
        raise pg_jobs.PermanentError("mailbox does not exist")

    worker, rec = start_worker(queue, {"default": handler})
    row = eventually("the job to fail", state_is(db, job_id, "failed"))
    worker.stop()
    assert row["attempt"] == 1 and row["max_attempts"] == 5
    assert "PermanentError: mailbox does not exist" in row["errors"][0]["error"]
    assert rec.of("failed")[0].outcome == "failed"


def test_a_job_the_handler_does_not_accept_fails_at_once_without_running(db, start_worker, producer):
    queue = new_queue(db)
    good = pg_jobs.enqueue(producer, queue, {"to": "ada"})
    bad = pg_jobs.enqueue(producer, queue, {"nobody": True})
    ran = []
    handler = pg_jobs.Handler(run=lambda job: ran.append(job.id), accepts=lambda job: isinstance(job.payload.get("to"), str))
    worker, _ = start_worker(queue, {"default": handler})
    eventually("the good job", state_is(db, good, "succeeded"))
    row = eventually("the bad job", state_is(db, bad, "failed"))
    worker.stop()
    assert ran == [good]
    assert "does not accept this job" in row["errors"][0]["error"]


def test_a_kind_without_a_handler_is_released_with_a_delay(db, start_worker, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="from-the-next-deploy")
    worker, rec = start_worker(queue, {})
    eventually("the release", lambda: rec.of("released"))
    worker.stop()
    row = db.execute(
        "SELECT state::text, attempt, release_reason, lease_until,"
        " run_at - now() BETWEEN interval '50 seconds' AND interval '61 seconds'"
        " FROM jobs.job WHERE id = %s",
        [job_id],
    ).fetchone()
    assert row == ("queued", 0, 'no handler for kind "from-the-next-deploy"', None, True)


def check_poison(db, job_id, events, worker_name):
    """A job of a kind nobody handles was released while young (its attempt given back each
    time), then failed three times with the queue's backoff, naming its kind and the kinds the
    worker handles."""
    row = job_row(db, job_id)
    mine = [f"failed:{e.outcome}" if e.type == "failed" else e.type for e in events
            if e.job is not None and e.job.id == job_id and e.type != "picked"]
    released = mine.count("released")
    assert released >= 1, mine
    assert mine == ["released"] * released + ["failed:queued", "failed:queued", "failed:failed"]
    assert (row["state"], row["attempt"], len(row["errors"])) == ("failed", 3, 3)
    pattern = (f'UnknownKindError: no handler for kind "poison" in worker {worker_name}, which handles "mail", "sms";'
               r" the job is \d+ s old, past unknown_kind_max_age \(1.5 s\)")
    for entry in row["errors"]:
        assert re.match(pattern, entry["error"]), entry["error"]
    failed = [e for e in events if e.type == "failed"][0]
    assert isinstance(failed.error, pg_jobs.UnknownKindError) and failed.permanent is False
    assert (failed.error.kind, failed.error.handled) == ("poison", ["mail", "sms"])
    backed_off = db.execute(
        "SELECT bool_and((b ->> 'at')::timestamptz - (a ->> 'at')::timestamptz >= interval '100 milliseconds')"
        " FROM jobs.job, jsonb_array_elements(errors) WITH ORDINALITY x(a, n)"
        " JOIN jsonb_array_elements(errors) WITH ORDINALITY y(b, m) ON m = n + 1 WHERE id = %s", [job_id]).fetchone()[0]
    assert backed_off


def claim_sleeping(db):
    return db.execute("SELECT count(*) > 0 FROM pg_stat_activity"
                      " WHERE query LIKE 'SELECT * FROM jobs_claim%%' AND wait_event_type = 'Extension'").fetchone()[0]


def test_a_kind_without_a_handler_fails_once_older_than_unknown_kind_max_age(db, start_worker, producer):
    queue = new_queue(db, "max_attempts => 3, backoff_base => '100 milliseconds', jitter => 0")
    worker, rec = start_worker(queue, {"mail": lambda job: "sent", "sms": lambda job: "sent"}, name="py-poison",
                               unknown_kind_delay=0.1, unknown_kind_max_age=1.5)
    eventually("the claim to wait", lambda: claim_sleeping(db))
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="poison")
    eventually("the job to fail for good", state_is(db, job_id, "failed"), timeout=30)
    worker.stop()
    check_poison(db, job_id, rec.events, "py-poison")


def test_unknown_kind_options_are_checked():
    for options, message in (
        ({"unknown_kind_max_age": -1}, "unknown_kind_max_age must be a finite, non-negative number of seconds"),
        ({"unknown_kind_delay": float("nan")}, "unknown_kind_delay must be a finite, non-negative number of seconds"),
        ({"unknown_kind": "drop"}, "unknown_kind must be 'release' or 'fail'"),
    ):
        for worker_class in (pg_jobs.Worker, pg_jobs.AsyncWorker):
            with pytest.raises(ValueError, match=re.escape(message)):
                worker_class("", "q", {}, **options)


def test_a_kind_without_a_handler_fails_instead_when_configured(db, start_worker, producer):
    queue = new_queue(db)
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="nobody-knows")
    worker, _ = start_worker(queue, {}, unknown_kind="fail")
    row = eventually("the failure", state_is(db, job_id, "failed"))
    worker.stop()
    assert row["errors"][0]["error"].startswith('UnknownKindError: no handler for kind "nobody-knows"')


def test_kinds_handled_claims_only_kinds_with_a_handler(db, start_worker, producer):
    queue = new_queue(db)
    other = pg_jobs.enqueue(producer, queue, {}, kind="other")
    mine = pg_jobs.enqueue(producer, queue, {}, kind="mine")
    worker, _ = start_worker(queue, {"mine": lambda job: 1}, kinds="handled")
    eventually("my job", state_is(db, mine, "succeeded"))
    time.sleep(0.2)
    worker.stop()
    assert (job_row(db, other)["state"], job_row(db, other)["attempt"]) == ("queued", 0)


def test_progress_is_stored_and_heartbeats_keep_a_long_job_alive(db, start_worker, producer):
    queue = new_queue(db, "lease => '600 milliseconds'")
    job_id = pg_jobs.enqueue(producer, queue, {})
    outcomes = []

    def handler(job):
        outcomes.append(job.progress({"step": 1}))
        time.sleep(2.0)  # more than three leases: only heartbeats keep it ours
        return "done"

    worker, _ = start_worker(queue, {"default": handler})
    eventually("progress", lambda: (job_row(db, job_id)["progress"] or {}).get("step") == 1)
    row = eventually("the job to succeed", state_is(db, job_id, "succeeded"))
    worker.stop()
    assert outcomes == ["running"]
    assert (row["attempt"], row["result"]) == (1, "done")


def test_a_cancel_mid_handler_sets_job_cancelled_and_records_nothing(db, start_worker, producer):
    queue = new_queue(db, "lease => '900 milliseconds'")
    job_id = pg_jobs.enqueue(producer, queue, {})
    reasons = []

    def handler(job):
        job.cancelled.wait(10)
        reasons.append(job.reason)
        return "finished anyway"

    worker, rec = start_worker(queue, {"default": handler})
    eventually("the job to run", state_is(db, job_id, "running"))
    assert db.execute("SELECT jobs_cancel(%s)", [job_id]).fetchone()[0] == "cancelled"
    eventually("the handler to notice", lambda: reasons, timeout=3)
    worker.stop()
    assert reasons == ["cancelled"]
    assert [(e.outcome, e.during) for e in rec.of("lost")] == [("cancelled", "heartbeat")]
    assert not rec.of("completed")
    row = job_row(db, job_id)
    assert (row["state"], row["result"]) == ("cancelled", None)


def test_stop_lets_handlers_finish_within_the_grace_then_releases_the_rest(db, start_worker, producer):
    queue = new_queue(db)
    quick = pg_jobs.enqueue(producer, queue, {}, kind="quick")
    slow = pg_jobs.enqueue(producer, queue, {}, kind="slow")
    hung = pg_jobs.enqueue(producer, queue, {}, kind="hung")
    slow_jobs = []
    never = threading.Event()

    def slow_handler(job):
        slow_jobs.append(job)
        time.sleep(5)
        return "too late"

    worker, rec = start_worker(queue, {
        "quick": lambda job: (time.sleep(0.3), "quick")[1],
        "slow": slow_handler,
        "hung": lambda job: never.wait(),
    })
    eventually("all three to run", lambda: len(rec.of("picked")) == 3)
    started = time.monotonic()
    worker.stop(grace=1.0)
    took = time.monotonic() - started
    assert 0.9 <= took < 4, f"stop took {took:.2f} s"
    assert worker.active == 0
    assert slow_jobs[0].cancelled.is_set()
    assert job_row(db, quick)["state"] == "succeeded"
    for job_id in (slow, hung):
        row = job_row(db, job_id)
        assert (row["state"], row["attempt"], row["lease_until"], row["release_reason"]) == ("queued", 0, None, "shutting down")


def test_a_handler_past_its_time_limit_fails_and_frees_its_slot(db, start_worker, producer):
    queue = new_queue(db, "backoff_base => '1 hour'")
    hung = pg_jobs.enqueue(producer, queue, {}, kind="hung")
    never = threading.Event()
    worker, rec = start_worker(queue, {"hung": lambda job: never.wait(), "ok": lambda job: "ok"}, concurrency=1, timeout=0.3)
    eventually("the timeout", lambda: rec.of("failed"))
    following = pg_jobs.enqueue(producer, queue, {}, kind="ok")
    eventually("the next job on the only slot", state_is(db, following, "succeeded"))
    worker.stop()
    row = job_row(db, hung)
    assert row["state"] == "queued"
    assert row["errors"][0]["error"] == "JobTimeoutError: the handler ran longer than its time limit of 0.3 s"
    assert isinstance(rec.of("failed")[0].error, pg_jobs.JobTimeoutError)


def test_a_handler_that_never_returns_keeps_its_lease_and_other_slots_work(db, start_worker, producer):
    queue = new_queue(db, "lease => '600 milliseconds'")
    hung = pg_jobs.enqueue(producer, queue, {}, kind="hung")
    never = threading.Event()
    worker, _ = start_worker(queue, {"hung": lambda job: never.wait(), "ok": lambda job: "ok"}, concurrency=2)
    eventually("the hung job to run", state_is(db, hung, "running"))
    ids = [pg_jobs.enqueue(producer, queue, {}, kind="ok") for _ in range(5)]
    eventually("the others", lambda: db.execute(
        "SELECT count(*) = 5 FROM jobs.job WHERE id = ANY(%s) AND state = 'succeeded'", [ids]).fetchone()[0])
    time.sleep(1.5)  # well past its lease
    row = job_row(db, hung)
    assert (row["state"], row["attempt"]) == ("running", 1)
    worker.stop(grace=0.1)
    assert job_row(db, hung)["state"] == "queued"


def test_stop_while_the_claim_waits_in_the_server_returns_at_once(db, start_worker):
    queue = new_queue(db)
    worker, _ = start_worker(queue, {}, wait=60)
    eventually("the claim to wait", lambda: db.execute(
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%%jobs_claim%%' AND pid <> pg_backend_pid()").fetchone()[0])
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 2


def test_stop_cancels_a_claim_whose_statement_reaches_the_server_after_the_first_cancel(db, dsn, start_worker):
    # The claim's statement is held back for 0.5 s, as a starved backend or a slow network
    # would: stop()'s first cancel request finds the backend idle and the server drops it.
    queue = new_queue(db)
    claim_sent = threading.Event()

    class SlowClaims(psycopg.Connection):
        def execute(self, query, params=None, **kwargs):
            if "jobs_claim" in str(query):
                claim_sent.set()
                time.sleep(0.5)
            return super().execute(query, params, **kwargs)

    worker, _ = start_worker(queue, {}, wait=60, connect=lambda: SlowClaims.connect(dsn, **pg_jobs.connect_kwargs()))
    assert claim_sent.wait(10)
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 5


def test_enqueue_joins_the_callers_transaction(db):
    queue = new_queue(db)
    import psycopg

    with psycopg.connect(url("producer")) as conn:
        with conn.transaction(force_rollback=True):
            rolled_back = pg_jobs.enqueue(conn, queue, {"n": 1})
        with conn.transaction():
            committed = pg_jobs.enqueue(conn, queue, {"n": 2})
    assert job_row(db, rolled_back) is None
    assert job_row(db, committed)["state"] == "queued"


def test_enqueue_options_and_batches(db, producer):
    queue = new_queue(db)
    import datetime

    run_at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    job_id = pg_jobs.enqueue(producer, queue, [1, "two"], kind="k", priority=-5, max_attempts=2, run_at=run_at, headers={"h": 1})
    row = job_row(db, job_id)
    assert (row["payload"], row["kind"], row["priority"], row["max_attempts"], row["run_at"], row["headers"]) == (
        [1, "two"], "k", -5, 2, run_at, {"h": 1})
    rows = pg_jobs.enqueue_batch(producer, queue, [{"n": 1}, {"n": 2}, {"n": 3}], kind="b")
    assert [inserted for _, inserted in rows] == [True, True, True]
    assert [job_row(db, i)["payload"]["n"] for i, _ in rows] == [1, 2, 3]
