"""The worker as a process: SIGTERM stops it gracefully, and a process frozen past its lease
(SIGSTOP: a VM pause, a long GC) loses the job to another claim and records nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import pg_jobs
from conftest import eventually, job_row, new_queue

HERE = os.path.dirname(__file__)


class Process:
    """A worker_process.py child and the lines it printed."""

    def __init__(self, dsn, queue, mode):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_process.py"), dsn, queue, mode],
                                     stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def saw(self, prefix):
        return [line for line in self.lines if line.startswith(prefix)]


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_sigterm_finishes_what_fits_in_the_grace_and_releases_the_rest(db, dsn, mode, producer):
    queue = new_queue(db)
    slow = pg_jobs.enqueue(producer, queue, {}, kind="slow")
    hung = pg_jobs.enqueue(producer, queue, {}, kind="hung")
    # concurrency 1 in the child: slow runs first, hung waits for its slot; both picked in turn
    child = Process(dsn, queue, mode)
    try:
        eventually("the slow job to finish", lambda: child.saw("completed"))
        eventually("the hung job to run", lambda: len(child.saw("picked")) == 2)
        started = time.monotonic()
        child.proc.send_signal(signal.SIGTERM)
        child.proc.wait(10)
        took = time.monotonic() - started
    finally:
        child.proc.kill()
    assert child.proc.returncode == 0
    assert child.saw("stopped")
    assert 0.9 <= took < 4, f"shutdown took {took:.2f} s"
    assert job_row(db, slow)["result"] == "finished in the grace"
    row = job_row(db, hung)
    assert (row["state"], row["attempt"], row["lease_until"], row["release_reason"]) == ("queued", 0, None, "shutting down")


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_a_frozen_worker_loses_its_job_to_another_claim_and_records_nothing(db, dsn, mode, producer):
    queue = new_queue(db, "lease => '500 milliseconds'")
    job_id = pg_jobs.enqueue(producer, queue, {}, kind="stall")
    child = Process(dsn, queue, mode)
    try:
        eventually("the job to run", lambda: child.saw("picked"))
        child.proc.send_signal(signal.SIGSTOP)
        # The lease runs out, the background worker reclaims the job, this session claims it.
        rescued = db.execute("SELECT id, lease::text FROM jobs_claim(%s, worker => 'rescuer', lease => '1 minute',"
                             " wait => '10 seconds')", [queue]).fetchone()
        child.proc.send_signal(signal.SIGCONT)
        assert rescued is not None and rescued[0] == job_id
        eventually("the frozen worker to learn it lost the job", lambda: child.saw("lost"))
        child.proc.send_signal(signal.SIGTERM)
        child.proc.wait(10)
    finally:
        child.proc.kill()
    assert child.saw("lost") == [f"lost {job_id} lost"]
    assert not child.saw("completed")
    assert db.execute("SELECT jobs_complete(%s, %s, '\"rescued\"')", rescued).fetchone()[0] == "succeeded"
    row = job_row(db, job_id)
    assert (row["result"], row["worker"], row["attempt"]) == ("rescued", "rescuer", 2)
