"""The asyncio worker: the same model as :class:`pg_jobs.Worker` on one event loop.

One claim task waits in the server for up to as many jobs as there are free slots; each job
runs as a task of its own, with a lease keeper task beside it that heartbeats every lease/3.
When a heartbeat answers ``cancelled`` or ``lost``, when the job runs past its time limit, or
when the worker shuts down after its grace, the handler's task is cancelled
(``asyncio.CancelledError`` inside the handler) and ``job.cancelled`` is set. A job that
succeeded is completed by the claim task's next claim, in the same call
(``jobs_complete_and_claim``): one commit per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from datetime import datetime
from typing import Any, Awaitable, Callable, Mapping

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


class AsyncJob(JobRow):
    """A claimed job for an async handler: the job's columns (``signal``: what woke this run,
    see :meth:`await_signal`), ``cancelled`` (an ``asyncio.Event``), :meth:`progress` and
    :meth:`await_signal`."""

    def __init__(self, row: JobRow, worker: "AsyncWorker", lease_seconds: float, claimed_at: datetime):
        super().__init__(**row.__dict__)
        self.cancelled = asyncio.Event()
        self.reason: str | None = None
        self._worker = worker
        self._lease_seconds = max(lease_seconds, 0.05)
        self._claimed_at = claimed_at
        self._done = False
        self._started = time.monotonic()
        self._task: asyncio.Task | None = None
        # A call carrying its completion failed in transit (it may have committed): a lost
        # completion sent again is checked.
        self._uncertain = False

    async def progress(self, value: Any) -> str:
        """Stores progress on the job (and renews its lease); returns ``'running'``, or
        ``'cancelled'``/``'lost'`` (then the handler's task is being cancelled)."""
        return await self._worker._heartbeat(self, value)

    async def await_signal(self, name: str, timeout: float | None = None) -> str:
        """Ends this run to wait for the signal ``name`` (``jobs_await``) without spending the
        attempt, as :meth:`pg_jobs.Job.await_signal` does: returns ``'waiting'``,
        ``'queued'``, ``'cancelled'`` or ``'lost'``; return from the handler right after (its
        slot is free at once, and what it returns is ignored)."""
        return await self._worker._await_signal(self, name, timeout)

    def _conclude(self) -> bool:
        if self._done:
            return False
        self._done = True
        return True

    @property
    def _elapsed(self) -> float:
        return time.monotonic() - self._started


class _Pool:
    """Connections for heartbeats and settles, opened on demand up to ``size``."""

    def __init__(self, connect: Callable[[], Awaitable[psycopg.AsyncConnection]], size: int):
        self._connect = connect
        self._idle: list[psycopg.AsyncConnection] = []
        self._count = 0
        self._size = size
        self._freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def connection(self):
        async with self._freed:
            while not self._idle and self._count >= self._size:
                await self._freed.wait()
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                self._count += 1
        try:
            if conn is None or conn.closed:
                conn = await self._connect()
        except BaseException:
            async with self._freed:
                self._count -= 1
                self._freed.notify()
            raise
        broken = False
        try:
            yield conn
        except BaseException as error:
            broken = is_connection_error(error) or isinstance(error, asyncio.CancelledError)
            raise
        finally:
            async with self._freed:
                if broken or conn.closed:
                    self._count -= 1
                    with contextlib.suppress(Exception):
                        await conn.close()
                else:
                    self._idle.append(conn)
                self._freed.notify()

    async def close(self) -> None:
        for conn in self._idle:
            with contextlib.suppress(Exception):
                await conn.close()
        self._idle.clear()


class AsyncWorker:
    """A pg_jobs worker for one queue, on asyncio. The options are those of
    :class:`pg_jobs.Worker`; handlers are coroutine functions ``async def handler(job)``, and
    ``connect`` is a coroutine function that opens an ``AsyncConnection``."""

    # A job that succeeded waits in _finished, with a future, for the claim task: the future's
    # result is None when the claim task's jobs_complete_and_claim settled it, else whether a
    # call carrying it may have committed (then the job's own task completes it on its own).

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
        connect: Callable[[], Awaitable[psycopg.AsyncConnection]] | None = None,
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
        self._connect = connect or (lambda: psycopg.AsyncConnection.connect(conninfo, **connect_kwargs()))
        self._running: dict[int, AsyncJob] = {}
        self._slot_freed = asyncio.Event()
        self._stopping = False
        self._stopped = asyncio.Event()
        self._claim_conn: psycopg.AsyncConnection | None = None
        self._claiming = False
        self._claim_task: asyncio.Task | None = None
        # The queue's lease (for a worker without a lease of its own) and when it was read.
        self._queue_lease: tuple[float, float] | None = None
        self._pool: _Pool | None = None
        self._stop_task: asyncio.Task | None = None
        # Jobs whose handlers returned None, completed together by one jobs_complete_batch.
        self._completions: list[AsyncJob] = []
        self._flush_task: asyncio.Task | None = None
        # One commit per job (off by the option, or for good on a server without it): jobs
        # that succeeded, for the claim task's next jobs_complete_and_claim.
        self.one_commit_per_job = one_commit_per_job
        self._finished: list[tuple[AsyncJob, Any, asyncio.Future]] = []
        self._finished_timer: asyncio.TimerHandle | None = None
        self._settling: dict[int, AsyncJob] = {}
        # The claim task is in a waiting jobs_claim: completions go out on their own meanwhile.
        self._claim_waits = False
        # The last jobs_complete_and_claim claimed nothing: the next claim waits (jobs_claim).
        self._claimed_nothing = False
        # The last jobs_complete_and_claim was refused: the next claim is a jobs_claim, whose
        # error says what is wrong.
        self._plain_claim_next = False

    @property
    def active(self) -> int:
        """Jobs whose handlers are running now."""
        return len(self._running)

    def start(self) -> "AsyncWorker":
        """Starts claiming on the running event loop and returns at once."""
        if self._claim_task is not None:
            raise RuntimeError("this worker was already started; create a new AsyncWorker to start again")
        self._pool = _Pool(self._connect, self.concurrency + 1)
        self._claim_task = asyncio.get_running_loop().create_task(self._claim_loop())
        return self

    async def run(self, *, handle_signals: bool = True) -> None:
        """Starts the worker and returns once it has stopped; with ``handle_signals``,
        SIGTERM and SIGINT stop it gracefully."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
        try:
            self.start()
            await self._stopped.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def stop(self, grace: float | None = None) -> None:
        """Stops claiming, gives running handlers ``grace`` seconds to finish, then cancels
        their tasks and releases their jobs (``'shutting down'``)."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._shutdown(self.grace if grace is None else grace))
        await asyncio.shield(self._stop_task)

    async def _shutdown(self, grace: float) -> None:
        self._stopping = True
        self._slot_freed.set()
        await self._interrupt_claim()
        tasks = [job._task for job in self._running.values() if job._task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        await asyncio.gather(
            *(self._release(job, "shutting down", 0) for job in list(self._running.values())),
            return_exceptions=True,
        )
        settling = [job._task for job in self._settling.values() if job._task is not None]
        if settling:
            await asyncio.wait(settling)
        while self._flush_task is not None and not self._flush_task.done():
            await asyncio.wait({self._flush_task})
        if self._pool is not None:
            await self._pool.close()
        self._emit(Event("stopped"))
        self._stopped.set()

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

    async def _interrupt_claim(self) -> None:
        """Cancels the claim waiting in the server, again every 0.2 s until the claim task has
        ended: a cancel request that reaches the server before the claim's statement does finds
        the backend idle and is dropped, and the claim would then wait out its whole ``wait``."""
        task = self._claim_task
        if task is None:
            return
        while not task.done():
            if self._claim_conn is not None and self._claiming:
                with contextlib.suppress(Exception):
                    await self._claim_conn.cancel_safe(timeout=5.0)
            await asyncio.wait({task}, timeout=0.2)
        with contextlib.suppress(BaseException):
            task.result()

    async def _claim_loop(self) -> None:
        backoff = 0.1
        while not self._stopping:
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            batch: list[tuple[AsyncJob, Any, asyncio.Future]] = []
            try:
                if self._claim_conn is None or self._claim_conn.closed:
                    self._claim_conn = await self._connect()
                lease = await self._claim_lease()
                # From here to the call nothing awaits: a completion arriving meanwhile either
                # joins this batch or, once _claim_waits is set, goes out on its own.
                batch = self._take_finished()
                if batch and not self._claimed_nothing and not self._plain_claim_next and not self._stopping:
                    params = complete_and_claim_params(self, [(job, result) for job, result, _ in batch], free, lease)
                    cur = await self._claim_conn.execute(COMPLETE_AND_CLAIM_SQL, params)
                    rows = await cur.fetchall()
                    names = [column.name for column in cur.description]
                    outcomes, rows = split_complete_and_claim(names, rows)
                    self._settled_with_claim(batch, outcomes)
                    batch = []
                    self._claimed_nothing = not rows
                else:
                    # Before a claim that may wait: a settle must not wait with it.
                    self._settle_alone(batch, False)
                    batch = []
                    self._claimed_nothing = self._plain_claim_next = False
                    params = [self.queue, self.name, str(free), interval(lease), self.kinds, interval(self.wait)]
                    self._claim_waits = self._claiming = True
                    cur = await self._claim_conn.execute(CLAIM_SQL, params)
                    rows = await cur.fetchall()
                    names = [column.name for column in cur.description]
                self._claiming = False  # what follows must not be cancelled: it would strand the rows
                self._claim_waits = False
                if lease is None and rows:
                    # A queue created between the lease's read and the claim: its claim used its lease.
                    lease = await self._claim_lease()
                backoff = 0.1
            except Exception as error:
                self._claiming = self._claim_waits = False
                if batch and not is_connection_error(error):
                    # jobs_complete_and_claim refused (a result too large, an unknown queue, a
                    # server without it): nothing of it happened. Each job is completed on its
                    # own, and the next claim is a jobs_claim, whose error says what is wrong.
                    self._settle_alone(batch, False)
                    if getattr(error, "sqlstate", None) == UNDEFINED_FUNCTION:
                        self.one_commit_per_job = False
                        log.warning("pg_jobs worker %s: the server has no jobs_complete_and_claim (pg_jobs before"
                                    " 0.3.0); completing and claiming in separate calls", self.name)
                    self._plain_claim_next = True
                    continue
                # In transit: the call may have committed, so a lost completion sent again is checked.
                self._settle_alone(batch, True)
                if self._stopping:
                    break
                with contextlib.suppress(Exception):
                    await self._claim_conn.close()
                self._claim_conn = None
                if is_connection_error(error):
                    self._emit(Event("retrying", error=error, during="claim"))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                else:
                    self._emit(Event("error", error=error, during="claim"))
                    await asyncio.sleep(5.0)
                continue
            finally:
                self._claiming = False
            for row in rows:
                self._begin(*claimed_job(names, row, lease), lease)
        # Stopping: what succeeded since the last claim is completed on its own.
        self._settle_alone(self._take_finished(), False)
        if self._claim_conn is not None:
            with contextlib.suppress(Exception):
                await self._claim_conn.close()

    def _take_finished(self) -> list[tuple[AsyncJob, Any, asyncio.Future]]:
        """The jobs waiting to be completed with the next claim, taken: the caller settles them."""
        if self._finished_timer is not None:
            self._finished_timer.cancel()
            self._finished_timer = None
        batch, self._finished = self._finished, []
        return batch

    @staticmethod
    def _settle_alone(batch: list[tuple[AsyncJob, Any, asyncio.Future]], uncertain: bool) -> None:
        """Hands ``batch`` back to the jobs' own tasks, which complete each on its own."""
        for _, _, future in batch:
            if not future.done():
                future.set_result(uncertain)

    def _settled_with_claim(self, batch: list[tuple[AsyncJob, Any, asyncio.Future]], outcomes: dict[int, str]) -> None:
        """Reports each job of ``batch`` as its jobs_complete_and_claim outcome says."""
        for job, result, future in batch:
            outcome = outcomes.get(job.id)
            if outcome is None:
                future.set_result(False)  # not answered for (never so): asked on its own
                continue
            if outcome == "succeeded":
                self._emit(Event("completed", job=job, duration=job._elapsed, result=result, outcome="succeeded"))
            else:
                self._gone(job, outcome, "settle")
            future.set_result(None)

    async def _claim_lease(self) -> float | None:
        """The lease the next claim asks for, in seconds: the worker's own, or the queue's (read
        again once a minute). None when the queue does not exist: the claim then says so."""
        if self.lease is not None:
            return self.lease
        now = time.monotonic()
        if self._queue_lease is not None and now - self._queue_lease[1] < QUEUE_LEASE_READ_EVERY:
            return self._queue_lease[0]
        cur = await self._claim_conn.execute(QUEUE_LEASE_SQL, [self.queue])
        row = await cur.fetchone()
        if row is None:
            return None
        self._queue_lease = (float(row[0]), now)
        return self._queue_lease[0]

    def _begin(self, row: JobRow, claimed_at: datetime, lease_seconds: float) -> None:
        job = AsyncJob(row, self, lease_seconds, claimed_at)
        self._running[job.id] = job
        self._emit(Event("picked", job=job))
        job._task = asyncio.get_running_loop().create_task(self._run(job))

    async def _call(self, job: AsyncJob | None, sql: str, params: list, during: str, retry: bool = True):
        """One statement on a pooled connection; transport errors are retried with the same
        (id, lease) while ``retry`` (until the worker has stopped). Returns (rows, retried)."""
        backoff = 0.1
        retried = False
        while True:
            try:
                async with self._pool.connection() as conn:
                    cur = await conn.execute(sql, params)
                    return await cur.fetchall(), retried
            except Exception as error:
                if not is_connection_error(error):
                    raise
                self._emit(Event("retrying", job=job, error=error, during=during))
                if not retry or self._stopped.is_set():
                    raise
                retried = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _finish(self, job: AsyncJob) -> None:
        self._running.pop(job.id, None)
        self._slot_freed.set()

    def _interrupt(self, job: AsyncJob, reason: str) -> None:
        """Tells the handler to stop: sets ``cancelled`` and cancels its task."""
        job.reason = reason
        job.cancelled.set()
        handler_task = getattr(job, "_handler_task", None)
        if handler_task is not None and not handler_task.done():
            handler_task.cancel()

    async def _run(self, job: AsyncJob) -> None:
        handler = self.handlers.get(job.kind)
        if handler is None:
            action, what = unknown_kind(self, job, job._claimed_at)
            if action == "release":
                await self._release(job, what, self.unknown_kind_delay)
            else:
                await self._fail(job, what, self.unknown_kind == "fail")
            return
        try:
            accepted = handler.accepts is None or handler.accepts(job) is not False
        except Exception as error:
            await self._fail(job, error, True)
            return
        if not accepted:
            await self._fail(job, PermanentError(f"the {json.dumps(job.kind)} handler does not accept this job (accepts() returned False)"), True)
            return
        keeper = asyncio.get_running_loop().create_task(self._keep(job))
        limit = handler.timeout if handler.timeout is not None else self.timeout
        job._handler_task = asyncio.ensure_future(handler.run(job))
        try:
            # asyncio.wait rather than wait_for: a handler's own TimeoutError is its failure,
            # not the time limit.
            finished, _ = await asyncio.wait({job._handler_task}, timeout=limit)
            if not finished:
                self._interrupt(job, "timeout")
                await self._fail(job, JobTimeoutError(f"the handler ran longer than its time limit of {limit} s"), False)
                return
            try:
                result = job._handler_task.result()
            except asyncio.CancelledError:
                if job._done:
                    return  # lost, cancelled or released: nothing to record
                await self._fail(job, RuntimeError("the handler's task was cancelled"), False)
                return
            except Exception as error:
                await self._fail(job, error, isinstance(error, PermanentError))
                return
            await self._complete(job, result)
        finally:
            keeper.cancel()

    async def _keep(self, job: AsyncJob) -> None:
        while not job._done:
            await asyncio.sleep(job._lease_seconds / 3)
            await self._heartbeat(job, None)

    async def _heartbeat(self, job: AsyncJob, progress: Any) -> str:
        if job._done:
            return job.reason if job.reason in GONE else "lost"
        try:
            rows, _ = await self._call(job, HEARTBEAT_SQL, [str(job.id), job.lease, jsonb(progress)], "heartbeat", retry=False)
        except Exception as error:
            self._emit(Event("retrying", job=job, error=error, during="heartbeat"))
            return "running"
        outcome = rows[0][0]
        if outcome in GONE and job._conclude():
            self._gone(job, outcome, "heartbeat")
            self._interrupt(job, outcome)
            self._finish(job)
        return outcome

    def _gone(self, job: AsyncJob, outcome: str, during: str) -> None:
        job.reason = outcome
        job.cancelled.set()
        self._emit(Event("lost", job=job, duration=job._elapsed, outcome=outcome, during=during))

    async def _settle(self, job: AsyncJob, sql: str, params: list, during: str) -> tuple[str, bool] | None:
        try:
            rows, retried = await self._call(job, sql, params, during)
        except Exception as error:
            if is_connection_error(error):
                return None
            raise
        return rows[0][0], retried

    async def _await_signal(self, job: AsyncJob, name: str, timeout: float | None) -> str:
        """The handler's await_signal: hands the job back to wait for the signal (jobs_await)
        and ends the run. Its slot is free at once, as for a lost job: the job is out of our
        hands (the handler's task is not cancelled: it is the one awaiting this)."""
        params = [str(job.id), job.lease, name]
        if timeout is not None:
            params.append(interval(timeout))
        if not job._conclude():
            return job.reason if job.reason in GONE else "lost"
        try:
            answer = await self._settle(job, AWAIT_TIMEOUT_SQL if timeout is not None else AWAIT_SQL, params, "await")
            if answer and answer[0] == "lost" and answer[1]:
                rows, _ = await self._call(job, AWAITED_SQL, [str(job.id), name], "await")
                if rows:
                    answer = (rows[0][0], True)
        except asyncio.CancelledError:
            self._finish(job)  # the await may or may not have committed: its lease decides
            raise
        except Exception as error:
            # The server refused the await (a name out of range): the attempt fails with its error.
            job._done = False
            await self._fail(job, error, False)
            raise
        outcome = answer[0] if answer else "lost"
        if outcome in ("waiting", "queued"):
            job.reason = "awaiting"
            job.cancelled.set()
            self._emit(Event("awaiting", job=job, duration=job._elapsed, outcome=outcome, signal=name))
        elif answer:
            self._gone(job, outcome, "settle")
        self._finish(job)
        return outcome

    async def _complete(self, job: AsyncJob, result: Any) -> None:
        if not job._conclude():
            return
        if self.one_commit_per_job and not self._stopping and not self._claim_waits:
            # Completed by the claim task's next claim, in the same call and commit. Its slot
            # is free now: that claim takes the next job for it.
            future = asyncio.get_running_loop().create_future()
            self._running.pop(job.id, None)
            self._settling[job.id] = job
            self._finished.append((job, result, future))
            if self._finished_timer is None:
                self._finished_timer = asyncio.get_running_loop().call_later(
                    COMPLETE_WITH_CLAIM_WITHIN, lambda: self._settle_alone(self._take_finished(), False))
            self._slot_freed.set()
            try:
                uncertain = await future
                if uncertain is not None:
                    await self._complete_alone(job, result, uncertain)
            finally:
                self._settling.pop(job.id, None)
            return
        await self._complete_alone(job, result, False)

    async def _complete_alone(self, job: AsyncJob, result: Any, uncertain: bool) -> None:
        """Completes a job in a call of its own: jobs_complete with its result, or, without
        one, in the next jobs_complete_batch. ``uncertain``: a call carrying it may have
        committed."""
        job._uncertain = job._uncertain or uncertain
        if result is None:
            # Its slot is free now, so the next claim overlaps the batch's round trip.
            self._running.pop(job.id, None)
            self._slot_freed.set()
            self._completions.append(job)
            if self._flush_task is None or self._flush_task.done():
                self._flush_task = asyncio.get_running_loop().create_task(self._flush_completions())
            return
        try:
            answer = await self._settle(job, COMPLETE_SQL, [str(job.id), job.lease, jsonb(result)], "complete")
            if answer is not None and answer[0] == "lost" and (answer[1] or job._uncertain):
                rows, _ = await self._call(job, SUCCEEDED_UNDER_SQL, [job.lease, str(job.id)], "complete")
                if rows and rows[0][0]:
                    answer = ("succeeded", True)
        except Exception as error:
            job._done = False
            await self._fail(job, RuntimeError(f"could not record the result: {error}"), False)
            return
        if answer and answer[0] == "succeeded":
            self._emit(Event("completed", job=job, duration=job._elapsed, result=result, outcome="succeeded"))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)

    async def _flush_completions(self) -> None:
        """Completes the jobs that finished without a result: what finished while the
        previous batch was on its way goes in the next, one statement and one commit."""
        while self._completions:
            batch, self._completions = self._completions, []
            outcomes: dict[int, str] = {}
            retried = False
            try:
                rows, retried = await self._call(None, COMPLETE_BATCH_SQL,
                                                 [[str(j.id) for j in batch], [j.lease for j in batch]], "complete")
                outcomes = {job_id: outcome for job_id, outcome in rows}
            except Exception as error:
                # Left without an outcome: their leases run out and they are run again.
                self._emit(Event("error", error=error, during="complete"))
            for job in batch:
                outcome = outcomes.get(job.id)
                if outcome == "lost" and (retried or job._uncertain):
                    with contextlib.suppress(Exception):
                        rows, _ = await self._call(job, SUCCEEDED_UNDER_SQL, [job.lease, str(job.id)], "complete")
                        if rows and rows[0][0]:
                            outcome = "succeeded"
                if outcome == "succeeded":
                    self._emit(Event("completed", job=job, duration=job._elapsed, result=None, outcome="succeeded"))
                elif outcome:
                    self._gone(job, outcome, "settle")
                self._finish(job)

    async def _fail(self, job: AsyncJob, error: BaseException, permanent: bool) -> None:
        if not job._conclude():
            return
        try:
            answer = await self._settle(job, FAIL_SQL, [str(job.id), job.lease, error_text(error), not permanent], "fail")
        except Exception as sql_error:
            self._emit(Event("error", job=job, error=sql_error, during="fail"))
            answer = None
        if answer and answer[0] in ("queued", "failed"):
            self._emit(Event("failed", job=job, duration=job._elapsed, outcome=answer[0], permanent=permanent, error=error))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)

    async def _release(self, job: AsyncJob, reason: str, delay: float) -> None:
        if not job._conclude():
            return
        self._interrupt(job, f"released: {reason}")
        try:
            answer = await self._settle(job, RELEASE_SQL, [str(job.id), job.lease, reason, interval(delay)], "release")
        except Exception as sql_error:
            self._emit(Event("error", job=job, error=sql_error, during="release"))
            answer = None
        if answer and answer[0] == "queued":
            self._emit(Event("released", job=job, duration=job._elapsed, outcome="queued", reason=reason))
        elif answer:
            self._gone(job, answer[0], "settle")
        self._finish(job)
