"""pg_jobs: worker and producer library for pg_jobs, the job queue inside PostgreSQL, on
psycopg 3. Every rule of the queue is in the server's ``jobs_*`` functions; this library runs
the worker loop around them, on threads (:class:`Worker`) or asyncio (:class:`AsyncWorker`)."""

from ._common import (
    EVENT_FIELDS,
    FINISHED_STATES,
    STATES,
    Event,
    Handler,
    JobResult,
    JobState,
    Signal,
    JobTimeout,
    JobTimeoutError,
    PermanentError,
    UnknownKindError,
    connect_kwargs,
    describe_error,
    error_text,
    is_connection_error,
)
from .aio import AsyncJob, AsyncWorker
from .producer import (
    enqueue,
    enqueue_async,
    enqueue_batch,
    enqueue_batch_async,
    results,
    results_async,
    signal,
    signal_async,
    wait,
    wait_async,
)
from .worker import Job, Worker

__all__ = [
    "AsyncJob",
    "AsyncWorker",
    "EVENT_FIELDS",
    "FINISHED_STATES",
    "STATES",
    "Event",
    "Handler",
    "Job",
    "JobResult",
    "JobState",
    "JobTimeout",
    "JobTimeoutError",
    "PermanentError",
    "Signal",
    "UnknownKindError",
    "Worker",
    "connect_kwargs",
    "describe_error",
    "enqueue",
    "enqueue_async",
    "enqueue_batch",
    "enqueue_batch_async",
    "error_text",
    "is_connection_error",
    "results",
    "results_async",
    "signal",
    "signal_async",
    "wait",
    "wait_async",
]
