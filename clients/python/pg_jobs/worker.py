"""The thread-based worker.

One claim thread waits in the server (``jobs_claim(wait => ...)``) for up to as many jobs as
there are free slots; ``concurrency`` runner threads run the handlers and settle on
connections of their own; one lease keeper thread heartbeats every running job every lease/3
and enforces time limits; one completer thread completes the jobs whose handlers returned
None in batches (``jobs_complete_batch``: whatever finished while the previous batch was on
its way, in one statement and one commit). A job that succeeded is completed by the claim
thread's next claim, in the same call (``jobs_complete_and_claim``): one commit per job; the
completer takes it instead when that claim would wait or is late. A handler that never
returns cannot be stopped in Python: its thread is abandoned (a daemon) and a fresh runner
takes its slot.
"""

from __future__ import annotations

import heapq
import json
import logging
import queue as queue_module
import signal
import threading
import time
from datetime import datetime
from typing import Any, Callable, Mapping

import psycopg

from ._common import (
    AWAIT_SQL,
    AWAIT_TIMEOUT_SQL,
    AWAITED_SQL,
    CLAIM_SQL,
    COMPLETE_AND_CLAIM_SQL,
    COMPLETE_BATCH_SQL,
    COMPLETE_WITH_CLAIM_WITHIN,
    COMPLETE_SQL,
    FAIL_SQL,
    GONE,
    HEARTBEAT_SQL,
    QUEUE_LEASE_READ_EVERY,
    QUEUE_LEASE_SQL,
    RELEASE_SQL,
    SUCCEEDED_UNDER_SQL,
    UNDEFINED_FUNCTION,
    Event,
    JobRow,
    JobTimeoutError,
    PermanentError,
    as_handler,
    check_options,
    claimed_job,
    complete_and_claim_params,
    connect_kwargs,
    default_name,
    error_text,
    interval,
    is_connection_error,
    jsonb,
    split_complete_and_claim,
    unknown_kind,
)

log = logging.getLogger("pg_jobs")


class Job(JobRow):
    """A claimed job as a handler sees it: the job's columns (``signal``: what woke this run,
    see :meth:`await_signal`), ``cancelled`` (a ``threading.Event`` set when the job is
    cancelled, lost, timed out, handed back at shutdown or awaiting a signal: stop then),
    :meth:`progress` and :meth:`await_signal`."""

    def __init__(self, row: JobRow, worker: "Worker", lease_seconds: float, claimed_at: datetime):
        super().__init__(**row.__dict__)
        self.cancelled = threading.Event()
        self.reason: str | None = None
        self._worker = worker
        self._lease_seconds = max(lease_seconds, 0.05)
        self._claimed_at = claimed_at
        self._lock = threading.Lock()
        self._done = False
        self._started = time.monotonic()
        self._runner: _Runner | None = None
        # What its handler returned, while its completion waits for a claim or the completer.
        self._result: Any = None
        # A call carrying its completion failed in transit (it may have committed): a lost
        # completion sent again is checked.
        self._uncertain = False
        # The handler called await_signal: its run has ended, and its slot is free once it returns.
        self._awaited = False

    def progress(self, value: Any) -> str:
        """Stores progress on the job (and renews its lease) from the handler's thread;
        returns ``'running'``, or ``'cancelled'``/``'lost'`` (then ``cancelled`` is set)."""
        runner = self._runner
        if runner is None:
            raise RuntimeError("progress() is for the handler's own thread")
        return self._worker._heartbeat(self, runner.conn, value)

    def await_signal(self, name: str, timeout: float | None = None) -> str:
        """Ends this run to wait for the signal ``name`` (``jobs_await``) without spending the
        attempt: the job is ``waiting``, holding no lease, until a ``jobs_signal`` of that name
        commits (or ``timeout`` seconds pass; default: the server's, a day), and then runs
        again with ``job.signal`` set. Returns ``'waiting'``, ``'queued'`` (the signal was
        recorded already: the job is queued at once), ``'cancelled'`` or ``'lost'`` (nothing
        was recorded). Return from the handler right after: the run has ended (``cancelled``
        is set) and what the handler returns is ignored. An await the server refuses (a name
        over 255 bytes) raises, and the attempt fails with that error."""
        runner = self._runner
        if runner is None:
            raise RuntimeError("await_signal() is for the handler's own thread")
        return self._worker._await_signal(self, runner.conn, name, timeout)

    def _conclude(self) -> bool:
        """Marks the job's fate decided; False when it already was."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True

    @property
    def _elapsed(self) -> float:
        return time.monotonic() - self._started


class _Connection:
    """A connection that reconnects: ``execute`` retries transport errors with backoff while
    ``retry`` says so."""

    def __init__(self, connect: Callable[[], psycopg.Connection], worker: "Worker"):
        self._connect = connect
        self._worker = worker
        self.conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            self.conn = self._connect()
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def execute(self, sql: str, params: list, *, during: str, job=None, retry: Callable[[], bool] = lambda: True):
        backoff = 0.1
        while True:
            try:
                return self.get().execute(sql, params).fetchall()
            except Exception as error:
                if not is_connection_error(error):
                    raise
                self.drop()
                self._worker._emit(Event("retrying", job=job, error=error, during=during))
                if not retry():
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


class _Runner(threading.Thread):
    """One slot: runs handlers one after another on its own thread and connection."""

    def __init__(self, worker: "Worker"):
        super().__init__(name="pg_jobs-runner", daemon=True)
        self.worker = worker
        self.conn = _Connection(worker._connect, worker)
        self.abandoned = False

    def run(self) -> None:
        try:
            while not self.abandoned:
                job = self.worker._jobs.get()
                if job is None:
                    return
                job._runner = self
                self.worker._run(job, self)
        finally:
            self.conn.drop()


class Worker:
    """A pg_jobs worker for one queue, on threads.

    ``handlers`` maps job kinds to callables ``handler(job) -> result`` (or
    :class:`pg_jobs.Handler`). ``lease`` and ``wait`` are seconds (``lease=None``: the
    queue's, read again once a minute). ``name`` is passed on every claim: behind a pooler the
    server's default names whichever connection the pooler lends. A job of a kind without a
    handler is released with ``unknown_kind_delay`` seconds of delay (a deploy in progress)
    while it is younger than ``unknown_kind_max_age`` seconds, then failed with
    :class:`pg_jobs.UnknownKindError`; ``unknown_kind='fail'`` fails it at once, for good.
    ``kinds='handled'`` claims only kinds that have a handler. ``timeout`` (seconds) fails a handler that runs
    longer. ``on_event`` receives an :class:`pg_jobs.Event` for every job event. ``connect``
    opens a connection (default: ``psycopg.connect(conninfo, autocommit=True,
    prepare_threshold=None)``). ``one_commit_per_job`` (default True) completes a job that
    succeeded in the same call and transaction that claims the next ones
    (``jobs_complete_and_claim``); False completes and claims in separate calls.
    """

    # Keeper entries: (due, job id, what): a heartbeat, a time limit, or a job that succeeded
    # and may wait no longer for the claim thread to complete it with its next claim.
    _HEARTBEAT, _TIME_LIMIT, _COMPLETE_ALONE = 0, 1, 2

    def __init__(
        self,
        conninfo: str,
        queue: str,
        handlers: Mapping[str, Any],
        *,
        concurrency: int = 8,
        lease: float | None = None,
        wait: float = 30.0,
        name: str | None = None,
        unknown_kind: str = "release",
        unknown_kind_delay: float = 60.0,
        unknown_kind_max_age: float = 3600.0,
        kinds: str = "all",
        timeout: float | None = None,
        grace: float = 10.0,
        on_event: Callable[[Event], None] | None = None,
        connect: Callable[[], psycopg.Connection] | None = None,
        one_commit_per_job: bool = True,
    ):
        if not 1 <= concurrency <= 1000:
            raise ValueError(f"concurrency must be from 1 to 1000, not {concurrency}")
        check_options(unknown_kind, unknown_kind_delay, unknown_kind_max_age, kinds)
        if not isinstance(one_commit_per_job, bool):
            raise ValueError(f"one_commit_per_job must be True or False, not {one_commit_per_job!r}")
        self.queue = queue
        self.name = name or default_name()
        self.handlers = {kind: as_handler(kind, h) for kind, h in handlers.items()}
        self.concurrency = concurrency
        self.lease = lease
        self.wait = wait
        self.unknown_kind = unknown_kind
        self.unknown_kind_delay = unknown_kind_delay
        self.unknown_kind_max_age = unknown_kind_max_age
        self.kinds = list(self.handlers) if kinds == "handled" else None
        self.timeout = timeout
        self.grace = grace
        self.on_event = on_event
        self._connect = connect or (lambda: psycopg.connect(conninfo, **connect_kwargs()))
        self._jobs: queue_module.SimpleQueue[Job | None] = queue_module.SimpleQueue()
        self._running: dict[int, Job] = {}
        # Jobs whose handlers returned None, waiting for the completer: they hold no slot.
        self._settling: dict[int, Job] = {}
        self._slots = threading.Condition()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._keeper_due: list[tuple[float, int, int]] = []
        self._keeper_wake = threading.Condition()
        self._claim_conn = _Connection(self._connect, self)
        self._completions: queue_module.SimpleQueue[Job | None] = queue_module.SimpleQueue()
        self._claiming = False
        # The queue's lease (for a worker without a lease of its own) and when it was read.
        self._queue_lease: tuple[float, float] | None = None
        self._threads: list[threading.Thread] = []
        self._runners: list[_Runner] = []
        self._started = False
        # One commit per job (off by the option, or for good on a server without it): jobs that
        # succeeded, for the claim thread's next jobs_complete_and_claim (under _slots).
        self.one_commit_per_job = one_commit_per_job
        self._finished: list[Job] = []
        # The claim thread is in a waiting jobs_claim: completions go out on their own meanwhile.
        self._claim_waits = False
        # The last jobs_complete_and_claim claimed nothing: the next claim waits (jobs_claim).
        self._claimed_nothing = False
        # The last jobs_complete_and_claim was refused: the next claim is a jobs_claim, whose
        # error says what is wrong.
        self._plain_claim_next = False

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> "Worker":
        """Starts the threads and returns at once."""
        if self._started:
            raise RuntimeError("this worker was already started; create a new Worker to start again")
        self._started = True
        for _ in range(self.concurrency):
            self._add_runner()
        for target, name in (
            (self._claim_loop, "pg_jobs-claim"),
            (self._keeper_loop, "pg_jobs-keeper"),
            (self._completer_loop, "pg_jobs-completer"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def run(self, *, handle_signals: bool = True) -> None:
        """Starts the worker and blocks until it has stopped. With ``handle_signals`` (and on
        the main thread) SIGTERM and SIGINT stop it gracefully, with the worker's grace."""
        previous = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: threading.Thread(target=self.stop, daemon=True).start())
        try:
            self.start()
            while not self._stopped.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def active(self) -> int:
        """Jobs whose handlers are running now."""
        with self._slots:
            return len(self._running)

    def stop(self, grace: float | None = None) -> None:
        """Stops claiming, gives running handlers ``grace`` seconds (default: the worker's) to
        finish, then sets their ``cancelled`` and releases their jobs (``'shutting down'``):
        no lease is left held. Returns when that is done."""
        grace = self.grace if grace is None else grace
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopping.set()
            with self._slots:
                self._slots.notify_all()
            self._interrupt_claim()
            deadline = time.monotonic() + grace
            with self._slots:
                while self._running and time.monotonic() < deadline:
                    self._slots.wait(deadline - time.monotonic())
                left = list(self._running.values())
            if left:
                conn = _Connection(self._connect, self)
                for job in left:
                    self._release(job, conn, "shutting down", 0)
                conn.drop()
            self._completions.put(None)
            self._threads[2].join()
            for _ in self._runners:
                self._jobs.put(None)
            with self._keeper_wake:
                self._keeper_wake.notify_all()
            # Before _stopped: run() returns once it is set, and the process may end then.
            self._emit(Event("stopped"))
            self._stopped.set()

    def _interrupt_claim(self) -> None:
        """Cancels the claim waiting in the server, again every 0.2 s until the claim thread has
        ended: a cancel request that reaches the server before the claim's statement does finds
        the backend idle and is dropped, and the claim would then wait out its whole ``wait``."""
        claimer = self._threads[0]
        while claimer.is_alive():
            conn = self._claim_conn.conn
            if conn is not None and self._claiming:
                try:
                    conn.cancel_safe(timeout=5.0)
                except Exception:
                    pass
            claimer.join(0.2)

    # -- events --------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                log.exception("the on_event callback raised")
        if event.type == "retrying":
            log.warning("pg_jobs worker %s: %s failed, retrying: %s", self.name, event.during, event.message)
        elif event.type == "error":
            log.error("pg_jobs worker %s: %s on queue %s failed: %s", self.name, event.during, self.queue, event.message)

    # -- claiming ------------------------------------------------------------------------

    def _add_runner(self) -> None:
        runner = _Runner(self)
        self._runners.append(runner)
        runner.start()

    def _claim_loop(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            with self._slots:
                while len(self._running) >= self.concurrency and not self._stopping.is_set():
                    self._slots.wait()
                free = self.concurrency - len(self._running)
            if self._stopping.is_set():
                break
            batch: list[Job] = []
            try:
                lease = self._claim_lease()
                with self._slots:
                    batch, self._finished = self._finished, []
                    combine = (bool(batch) and not self._claimed_nothing and not self._plain_claim_next
                               and not self._stopping.is_set())
                    # Before a claim that may wait, a settle must not wait with it: from here
                    # on completions go out on their own.
                    self._claim_waits = not combine
                if combine:
                    params = complete_and_claim_params(self, [(job, job._result) for job in batch], free, lease)
                    cur = self._claim_conn.get().execute(COMPLETE_AND_CLAIM_SQL, params)
                    rows = cur.fetchall()
                    names = [column.name for column in cur.description]
                    outcomes, rows = split_complete_and_claim(names, rows)
                    self._settled_with_claim(batch, outcomes)
                    batch = []
                    self._claimed_nothing = not rows
                else:
                    self._to_completer(batch, False)
                    batch = []
                    self._claimed_nothing = self._plain_claim_next = False
                    params = [self.queue, self.name, str(free), interval(lease), self.kinds, interval(self.wait)]
                    self._claiming = True
                    cur = self._claim_conn.get().execute(CLAIM_SQL, params)
                    rows = cur.fetchall()
                    names = [column.name for column in cur.description]
                self._claiming = False  # what follows must not be cancelled: it would strand the rows
                with self._slots:
                    self._claim_waits = False
                if lease is None and rows:
                    # A queue created between the lease's read and the claim: its claim used its lease.
                    lease = self._claim_lease()
                backoff = 0.1
            except Exception as error:
                self._claiming = False
                with self._slots:
                    self._claim_waits = False
                if batch and not is_connection_error(error):
                    # jobs_complete_and_claim refused (a result too large, an unknown queue, a
                    # server without it): nothing of it happened. Each job is completed on its
                    # own, and the next claim is a jobs_claim, whose error says what is wrong.
                    self._to_completer(batch, False)
                    if getattr(error, "sqlstate", None) == UNDEFINED_FUNCTION:
                        self.one_commit_per_job = False
                        log.warning("pg_jobs worker %s: the server has no jobs_complete_and_claim (pg_jobs before"
                                    " 0.3.0); completing and claiming in separate calls", self.name)
                    self._plain_claim_next = True
                    continue
                # In transit: the call may have committed, so a lost completion sent again is checked.
                self._to_completer(batch, True)
                if self._stopping.is_set():
                    break
                self._claim_conn.drop()
                if is_connection_error(error):
                    self._emit(Event("retrying", error=error, during="claim"))
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                else:
                    self._emit(Event("error", error=error, during="claim"))
                    self._stopping.wait(5.0)
                continue
            finally:
                self._claiming = False
            for row in rows:
                self._begin(*claimed_job(names, row, lease), lease)
        # Stopping: what succeeded since the last claim is completed on its own (no runner adds
        # to _finished once _stopping is set).
        with self._slots:
            batch, self._finished = self._finished, []
        self._to_completer(batch, False)
        self._claim_conn.drop()

    def _settled_with_claim(self, batch: list[Job], outcomes: dict[int, str]) -> None:
        """Reports each job of ``batch`` as its jobs_complete_and_claim outcome says."""
        for job in batch:
            outcome = outcomes.get(job.id)
            if outcome is None:
                self._to_completer([job], False)  # not answered for (never so): asked on its own
                continue
            if outcome == "succeeded":
                self._emit(Event("completed", job=job, duration=job._elapsed, result=job._result, outcome="succeeded"))
            else:
                self._gone(job, outcome, "settle")
            self._finish(job)

    def _to_completer(self, jobs: list[Job], uncertain: bool) -> None:
        """Hands jobs that succeeded to the completer, which completes them on its own calls.
        ``uncertain``: a call carrying them may have committed."""
        for job in jobs:
            job._uncertain = job._uncertain or uncertain
            self._completions.put(job)

    def _claim_lease(self) -> float | None:
        """The lease the next claim asks for, in seconds: the worker's own, or the queue's (read
        again once a minute). None when the queue does not exist: the claim then says so."""
        if self.lease is not None:
            return self.lease
        now = time.monotonic()
        if self._queue_lease is not None and now - self._queue_lease[1] < QUEUE_LEASE_READ_EVERY:
            return self._queue_lease[0]
        row = self._claim_conn.get().execute(QUEUE_LEASE_SQL, [self.queue]).fetchone()
        if row is None:
            return None
        self._queue_lease = (float(row[0]), now)
        return self._queue_lease[0]

    def _begin(self, row: JobRow, claimed_at: datetime, lease_seconds: float) -> None:
        job = Job(row, self, lease_seconds, claimed_at)
        with self._slots:
            self._running[job.id] = job
        self._emit(Event("picked", job=job))
        if self._stopping.is_set():
            conn = _Connection(self._connect, self)
            self._release(job, conn, "shutting down", 0)
            conn.drop()
            return
        self._schedule(job, job._lease_seconds / 3)
        self._jobs.put(job)

    # -- running -------------------------------------------------------------------------

    def _run(self, job: Job, runner: _Runner) -> None:
        conn = runner.conn
        handler = self.handlers.get(job.kind)
        if handler is None:
            action, what = unknown_kind(self, job, job._claimed_at)
            if action == "release":
                self._release(job, conn, what, self.unknown_kind_delay)
            else:
                self._fail(job, conn, what, self.unknown_kind == "fail")
            return
        try:
            accepted = handler.accepts is None or handler.accepts(job) is not False
        except Exception as error:
            self._fail(job, conn, error, True)
            return
        if not accepted:
            self._fail(job, conn, PermanentError(f"the {json.dumps(job.kind)} handler does not accept this job (accepts() returned False)"), True)
            return
        limit = handler.timeout if handler.timeout is not None else self.timeout
        if limit is not None:
            self._schedule(job, limit, self._TIME_LIMIT)
        try:
            result = handler.run(job)
        except Exception as error:
            if job._awaited:
                self._finish(job)  # the run ended at its await: what it raised after is ignored
            else:
                self._fail(job, conn, error, isinstance(error, PermanentError))
        else:
            if job._awaited:
                self._finish(job)  # the run ended at its await: what it returned is ignored
            else:
                self._complete(job, conn, result)

    def _await_signal(self, job: Job, conn: _Connection, name: str, timeout: float | None) -> str:
        """The handler's await_signal: hands the job back to wait for the signal (jobs_await)
        and ends the run; its slot is freed once the handler returns."""
        params = [str(job.id), job.lease, name]
        if timeout is not None:
            params.append(interval(timeout))
        if not job._conclude():
            return job.reason if job.reason in GONE else "lost"
        try:
            answer = self._settle(job, conn, AWAIT_TIMEOUT_SQL if timeout is not None else AWAIT_SQL, params, "await")
            if answer and answer[0] == "lost" and answer[1]:
                rows = conn.execute(AWAITED_SQL, [str(job.id), name], during="await", job=job)
                if rows:
                    answer = (rows[0][0], True)
        except Exception as error:
            # The server refused the await (a name out of range): the attempt fails with its error.
            with job._lock:
                job._done = False
            self._fail(job, conn, error, False)
            raise
        job._awaited = True
        outcome = answer[0] if answer else "lost"
        if outcome in ("waiting", "queued"):
            job.reason = "awaiting"
            job.cancelled.set()
            self._emit(Event("awaiting", job=job, duration=job._elapsed, outcome=outcome, signal=name))
        elif answer:
            self._gone(job, outcome, "settle")
        return outcome

    def _settle(self, job: Job, conn: _Connection, sql: str, params: list, during: str) -> tuple[str, bool] | None:
        """Runs a settle call until it answers; transport errors are retried with the same
        (id, lease) until the worker has stopped. Returns (outcome, retried)."""
        retried = False

        def retry() -> bool:
            nonlocal retried
            retried = True
            return not self._stopped.is_set()

        try:
            rows = conn.execute(sql, params, during=during, job=job, retry=retry)
        except Exception as error:
            if is_connection_error(error):
                return None
            raise
        return rows[0][0], retried

    def _finish(self, job: Job) -> None:
        with self._slots:
            self._running.pop(job.id, None)
            self._settling.pop(job.id, None)
            self._slots.notify_all()

    def _complete(self, job: Job, conn: _Connection, result: Any) -> None:
        if not job._conclude():
            return
        job._result = result
        if self.one_commit_per_job:
            with self._slots:
                combine = not self._stopping.is_set() and not self._claim_waits
                if combine:
                    # Completed by the claim thread's next claim, in the same call and commit.
                    # Its slot is free now: that claim takes the next job for it.
                    self._running.pop(job.id, None)
                    self._settling[job.id] = job
                    first = not self._finished
                    self._finished.append(job)
                    self._slots.notify_all()
            if combine:
                if first:  # the keeper bounds the wait of the first; the others go with it
                    self._schedule(job, COMPLETE_WITH_CLAIM_WITHIN, self._COMPLETE_ALONE)
                return
        if result is None:
            # The completer sends it with the others that finished; its slot is free now, so
            # the next claim overlaps that round trip.
            with self._slots:
                self._running.pop(job.id, None)
                self._settling[job.id] = job
                self._slots.notify_all()
            self._completions.put(job)
            return
        self._complete_with_result(job, conn, result)

    def _complete_with_result(self, job: Job, conn: _Connection, result: Any) -> None:
        """Completes a job with its result in a jobs_complete of its own."""
        try:
            answer = self._settle(job, conn, COMPLETE_SQL, [str(job.id), job.lease, jsonb(result)], "complete")
            if answer and answer[0] == "lost" and (answer[1] or job._uncertain):
                # A retried complete answers lost when the first attempt did commit: check which.
                ours = conn.execute(SUCCEEDED_UNDER_SQL, [job.lease, str(job.id)], during="complete", job=job)
                if ours and ours[0][0]:
                    answer = ("succeeded", True)
        except Exception as error:
            # The server refused to record the result (not JSON, too large): the attempt fails.
            with job._lock:
                job._done = False
            self._fail(job, conn, RuntimeError(f"could not record the result: {error}"), False)
            return
        if answer and answer[0] == "succeeded":
            self._emit(Event("completed", job=job, duration=job._elapsed, result=result, outcome="succeeded"))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)

    def _completer_loop(self) -> None:
        conn = _Connection(self._connect, self)
        try:
            while True:
                first = self._completions.get()
                if first is None:
                    return
                batch = [first]
                while True:
                    try:
                        job = self._completions.get_nowait()
                    except queue_module.Empty:
                        break
                    if job is None:
                        self._completions.put(None)  # stop after this batch
                        break
                    batch.append(job)
                self._complete_batch(batch, conn)
        finally:
            conn.drop()

    def _complete_batch(self, batch: list[Job], conn: _Connection) -> None:
        # Jobs with a result (handed over by the claim thread) are completed one by one.
        for job in [j for j in batch if j._result is not None]:
            self._complete_with_result(job, conn, job._result)
        batch = [j for j in batch if j._result is None]
        if not batch:
            return
        retried = False

        def retry() -> bool:
            nonlocal retried
            retried = True
            return not self._stopped.is_set()

        outcomes: dict[int, str] = {}
        try:
            rows = conn.execute(COMPLETE_BATCH_SQL, [[str(j.id) for j in batch], [j.lease for j in batch]],
                                during="complete", retry=retry)
            outcomes = {job_id: outcome for job_id, outcome in rows}
        except Exception as error:
            # Left without an outcome: their leases run out and they are run again.
            self._emit(Event("error", error=error, during="complete"))
        for job in batch:
            outcome = outcomes.get(job.id)
            if outcome == "lost" and (retried or job._uncertain):
                ours = conn.execute(SUCCEEDED_UNDER_SQL, [job.lease, str(job.id)], during="complete", job=job)
                if ours and ours[0][0]:
                    outcome = "succeeded"
            if outcome == "succeeded":
                self._emit(Event("completed", job=job, duration=job._elapsed, result=None, outcome="succeeded"))
            elif outcome:
                self._gone(job, outcome, "settle")
            self._finish(job)

    def _fail(self, job: Job, conn: _Connection, error: BaseException, permanent: bool) -> None:
        if not job._conclude():
            return
        try:
            answer = self._settle(job, conn, FAIL_SQL, [str(job.id), job.lease, error_text(error), not permanent], "fail")
        except Exception as sql_error:
            self._emit(Event("error", job=job, error=sql_error, during="fail"))
            answer = None
        if answer and answer[0] in ("queued", "failed"):
            self._emit(Event("failed", job=job, duration=job._elapsed, outcome=answer[0], permanent=permanent, error=error))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)

    def _release(self, job: Job, conn: _Connection, reason: str, delay: float) -> None:
        if not job._conclude():
            return
        job.reason = f"released: {reason}"
        job.cancelled.set()
        try:
            answer = self._settle(job, conn, RELEASE_SQL, [str(job.id), job.lease, reason, interval(delay)], "release")
        except Exception as sql_error:
            self._emit(Event("error", job=job, error=sql_error, during="release"))
            answer = None
        if answer and answer[0] == "queued":
            self._emit(Event("released", job=job, duration=job._elapsed, outcome="queued", reason=reason))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)

    def _gone(self, job: Job, outcome: str, during: str) -> None:
        """The job is no longer ours: tell its handler, record nothing."""
        job.reason = outcome
        job.cancelled.set()
        self._emit(Event("lost", job=job, duration=job._elapsed, outcome=outcome, during=during))

    # -- the lease keeper ----------------------------------------------------------------

    def _schedule(self, job: Job, after: float, what: int = _HEARTBEAT) -> None:
        with self._keeper_wake:
            heapq.heappush(self._keeper_due, (time.monotonic() + after, job.id, what))
            self._keeper_wake.notify()

    def _heartbeat(self, job: Job, conn: _Connection, progress: Any = None) -> str:
        if job._done:
            return job.reason if job.reason in GONE else "lost"
        try:
            rows = conn.execute(HEARTBEAT_SQL, [str(job.id), job.lease, jsonb(progress)], during="heartbeat", job=job, retry=lambda: False)
        except Exception as error:
            self._emit(Event("retrying", job=job, error=error, during="heartbeat"))
            return "running"
        outcome = rows[0][0]
        if outcome in GONE and job._conclude():
            self._gone(job, outcome, "heartbeat")
            self._retire(job)
            self._finish(job)
        return outcome

    def _retire(self, job: Job) -> None:
        """The job's handler may still be running on its runner thread: abandon that thread
        to it and start a fresh runner for the slot."""
        runner = job._runner
        if runner is not None and runner.is_alive() and not self._stopping.is_set():
            runner.abandoned = True
            self._add_runner()

    def _keeper_loop(self) -> None:
        conn = _Connection(self._connect, self)
        try:
            while not self._stopped.is_set():
                with self._keeper_wake:
                    now = time.monotonic()
                    if not self._keeper_due or self._keeper_due[0][0] > now:
                        timeout = self._keeper_due[0][0] - now if self._keeper_due else None
                        self._keeper_wake.wait(timeout)
                        continue
                    _, job_id, what = heapq.heappop(self._keeper_due)
                if what == self._COMPLETE_ALONE:
                    # A job that succeeded is still waiting for the claim thread (busy with a
                    # claim, a reconnect or a backoff): the completer completes them all.
                    with self._slots:
                        late = any(j.id == job_id for j in self._finished)
                        batch, self._finished = (self._finished, []) if late else ([], self._finished)
                    self._to_completer(batch, False)
                    continue
                with self._slots:
                    job = self._running.get(job_id)
                if job is None or job._done:
                    continue
                if what == self._TIME_LIMIT:
                    self._time_out(job, conn)
                    continue
                outcome = self._heartbeat(job, conn)
                if outcome == "running":
                    # A failed call answers 'running' too: try again sooner, the lease runs out.
                    self._schedule(job, job._lease_seconds / 3)
        finally:
            conn.drop()

    def _time_out(self, job: Job, conn: _Connection) -> None:
        handler = self.handlers.get(job.kind)
        limit = handler.timeout if handler and handler.timeout is not None else self.timeout
        job.reason = "timeout"
        job.cancelled.set()
        self._retire(job)
        self._fail(job, conn, JobTimeoutError(f"the handler ran longer than its time limit of {limit} s"), False)
