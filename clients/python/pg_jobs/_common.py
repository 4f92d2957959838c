"""What the thread and asyncio workers share: the statements, the job and event types, and
how an error is classified.

Every statement is one autocommit call of a ``jobs_*`` function. Parameters are passed as
Python strings (sent untyped, as no ``jobs_*`` function is overloaded the server resolves each
call by name) or as ``Jsonb``; nothing relies on session state, so the same statements run
behind PgBouncer in transaction pooling mode.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import traceback
from datetime import datetime
from typing import Any, Callable

import psycopg
from psycopg.types.json import Jsonb

CLAIM_SQL = (
    "SELECT c.id, c.queue, c.kind, c.payload, c.headers, c.attempt, c.max_attempts, c.priority,"
    " c.lease::text, c.created_at, c.run_at,"
    " extract(epoch FROM c.lease_until - clock_timestamp())::float8 AS lease_seconds"
    " FROM jobs_claim(%s, worker => %s, n => %s, lease => %s, kinds => %s, wait => %s) AS c"
)
HEARTBEAT_SQL = "SELECT jobs_heartbeat(%s, %s, progress => %s)"
COMPLETE_SQL = "SELECT jobs_complete(%s, %s, %s)"
COMPLETE_BATCH_SQL = "SELECT id, outcome FROM jobs_complete_batch(%s, %s)"
FAIL_SQL = "SELECT jobs_fail(%s, %s, %s, retry => %s)"
RELEASE_SQL = "SELECT jobs_release(%s, %s, %s, retry_in => %s)"
SUCCEEDED_UNDER_SQL = "SELECT (j).state::text = 'succeeded' AND (j).lease::text = %s FROM jobs_get(%s) AS j"

#: Outcomes of a heartbeat or settle call that mean "this job is no longer ours".
GONE = ("lost", "cancelled")


def interval(seconds: float | None) -> str | None:
    """Seconds as an interval literal the server parses exactly (``None`` stays ``None``)."""
    if seconds is None:
        return None
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"an interval must be a finite, non-negative number of seconds, not {seconds!r}")
    return f"{seconds!r} seconds"


def jsonb(value: Any) -> Jsonb | None:
    """A value as a jsonb parameter; ``None`` is SQL NULL."""
    return None if value is None else Jsonb(value)


def default_name() -> str:
    """The worker name stored on each job: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def connect_kwargs() -> dict[str, Any]:
    """Connection settings the workers use: autocommit, and no prepared statements.

    psycopg prepares a statement after it has run it ``prepare_threshold`` times (5 by
    default); behind PgBouncer before 1.21 in transaction pooling mode a prepared statement
    lives on one server connection and is then run by whichever client lands there, so the
    workers turn preparing off.
    """
    return {"autocommit": True, "prepare_threshold": None}


def is_connection_error(error: BaseException) -> bool:
    """Whether a database call failed for transport or availability reasons (retry it), as
    opposed to an SQL error the server raised for the statement itself."""
    if isinstance(error, psycopg.errors.QueryCanceled):
        return False
    return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError, OSError))


class PermanentError(Exception):
    """Raised by a handler for a failure that retrying cannot fix: the job fails at once."""


class JobTimeout(Exception):
    """The reason a job fails when its handler runs past its time limit."""


@dataclasses.dataclass
class Handler:
    """A handler with options; a plain callable is a handler too.

    ``run(job)`` returns the job's result (JSON-serialisable). ``accepts(job)`` returning
    False marks a malformed job, which fails at once without retries. ``timeout`` (seconds)
    overrides the worker's.
    """

    run: Callable[..., Any]
    accepts: Callable[[Any], bool] | None = None
    timeout: float | None = None


def as_handler(kind: str, handler: Any) -> Handler:
    """Normalises a handler given as a callable or a :class:`Handler`."""
    if isinstance(handler, Handler):
        return handler
    if callable(handler):
        return Handler(run=handler)
    raise TypeError(f"the handler for kind {kind!r} must be callable or a pg_jobs.Handler, not {handler!r}")


@dataclasses.dataclass
class Event:
    """Something that happened to a job, for metrics and logs.

    ``type`` is one of ``picked``, ``completed``, ``failed`` (``outcome`` ``queued``: retried
    later, or ``failed`` for good), ``released``, ``lost`` (``outcome`` ``lost`` or
    ``cancelled``: nothing was recorded) and ``connection_error`` (a database call failed and
    is retried; ``job`` may be ``None``).
    """

    type: str
    job: Any = None
    duration: float | None = None
    outcome: str | None = None
    error: BaseException | None = None
    result: Any = None
    during: str | None = None

    @property
    def attempt(self) -> int | None:
        """The attempt the event is about."""
        return None if self.job is None else self.job.attempt


@dataclasses.dataclass
class JobRow:
    """The columns of a claimed job that a handler sees."""

    id: int
    queue: str
    kind: str
    payload: Any
    headers: dict | None
    attempt: int
    max_attempts: int
    priority: int
    lease: str
    created_at: datetime
    run_at: datetime


def unpack_claim(row: tuple) -> tuple[JobRow, float]:
    """A claim row as the job's columns and the seconds left on its lease (server clock)."""
    *columns, lease_seconds = row
    return JobRow(*columns), float(lease_seconds)


def error_text(error: BaseException) -> str:
    """The text stored in the job's error history: the exception and its traceback."""
    return "".join(traceback.format_exception(error)).rstrip()
