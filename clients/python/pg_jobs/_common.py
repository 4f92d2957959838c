"""What the thread and asyncio workers share: the statements, the job and event types, and
how an error is classified.

Every statement is one autocommit call of a ``jobs_*`` function. Parameters are passed as
Python strings (sent untyped, as no ``jobs_*`` function is overloaded the server resolves each
call by name) or as ``Jsonb``; nothing relies on session state, so the same statements run
behind PgBouncer in transaction pooling mode.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import traceback
from datetime import datetime, timedelta
from typing import Any, Callable, Literal, Mapping, NamedTuple

import psycopg
from psycopg.types.json import Jsonb

# The claim is the bare call, nothing in its select list: in autocommit that is the form whose
# wait the server runs without a snapshot (it stops advertising its xmin while it sleeps), so
# waiting workers never hold back vacuum. What the worker needs beside the rows it works out
# from them (see claimed_job).
CLAIM_SQL = "SELECT * FROM jobs_claim(%s, worker => %s, n => %s, lease => %s, kinds => %s, wait => %s)"
# The queue's lease, for a worker without a lease of its own: it then passes it on every claim,
# so it knows each claim's lease length exactly (heartbeats every third of it; the claim's
# time on the server's clock is lease_until minus it).
QUEUE_LEASE_SQL = "SELECT extract(epoch FROM lease)::float8 FROM jobs.queue WHERE name = %s"
#: How long a worker uses the queue's lease it read before reading it again, in seconds.
QUEUE_LEASE_READ_EVERY = 60.0
HEARTBEAT_SQL = "SELECT jobs_heartbeat(%s, %s, progress => %s)"
COMPLETE_SQL = "SELECT jobs_complete(%s, %s, %s)"
COMPLETE_BATCH_SQL = "SELECT id, outcome FROM jobs_complete_batch(%s, %s)"
FAIL_SQL = "SELECT jobs_fail(%s, %s, %s, retry => %s)"
RELEASE_SQL = "SELECT jobs_release(%s, %s, %s, retry_in => %s)"
SUCCEEDED_UNDER_SQL = "SELECT (j).state::text = 'succeeded' AND (j).lease::text = %s FROM jobs_get(%s) AS j"
AWAIT_SQL = "SELECT jobs_await(%s, %s, %s)"
AWAIT_TIMEOUT_SQL = "SELECT jobs_await(%s, %s, %s, timeout => %s)"
# A retried jobs_await answers lost when the first attempt did commit (the await clears the
# lease): the job then waits for our signal, or was queued with it, under no lease.
AWAITED_SQL = ("SELECT (j).state::text FROM jobs_get(%s) AS j WHERE (j).state::text IN ('waiting', 'queued')"
               " AND (j).lease IS NULL AND (j).signal->>'name' = %s")
# One commit per job: completes the jobs that succeeded (each with its result) and claims the
# next ones, never waiting. Rows: one per settled job (settled, outcome), then one per claimed
# job (settled NULL, the claim's columns).
COMPLETE_AND_CLAIM_SQL = ("SELECT settled, outcome, (claimed).* FROM jobs_complete_and_claim("
                          "%s, %s, %s, %s, worker => %s, n => %s, lease => %s, kinds => %s)")
#: How long a job that succeeded may wait for the claim loop to complete it with its next
#: claim (the loop is busy with a claim, a reconnect or a retry's backoff) before it is
#: completed on its own, in seconds.
COMPLETE_WITH_CLAIM_WITHIN = 0.1
#: The SQLSTATE of a call to a function the server lacks: a server before 0.3.0 has no
#: jobs_complete_and_claim, and the workers then complete and claim in separate calls.
UNDEFINED_FUNCTION = "42883"

#: Outcomes of a heartbeat or settle call that mean "this job is no longer ours".
GONE = ("lost", "cancelled")

#: A job's state (``waiting``: for its dependencies or a signal, holding no lease and no attempt).
JobState = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]
#: Every state a job can be in.
STATES: tuple[str, ...] = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")
#: The states a job has ended in: :func:`pg_jobs.wait` returns once every job is in one of them.
FINISHED_STATES: tuple[str, ...] = ("succeeded", "failed", "cancelled")


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


class JobTimeoutError(Exception):
    """The reason a job fails when its handler runs past its time limit."""


#: The name of :class:`JobTimeoutError` before 0.3.0.
JobTimeout = JobTimeoutError


class UnknownKindError(Exception):
    """The error a job of a kind without a handler fails with: at once with
    ``unknown_kind='fail'``, or once the job is older than ``unknown_kind_max_age`` (no deploy
    takes that long to bring its handler). ``kind`` is the job's kind, ``handled`` the kinds
    the worker has handlers for."""

    def __init__(self, kind: str, worker: str, handled: list[str], detail: str | None = None):
        kinds = ", ".join(json.dumps(k) for k in handled) if handled else "no kinds"
        text = f"no handler for kind {json.dumps(kind)} in worker {worker}, which handles {kinds}"
        super().__init__(f"{text}; {detail}" if detail else text)
        self.kind = kind
        self.handled = handled


def _frames(error: BaseException) -> str:
    return "".join(traceback.format_tb(error.__traceback__)).rstrip()


def describe_error(error: BaseException) -> tuple[str, str | None]:
    """An error as both libraries report it: its message, the first line (``Name: message``),
    and its stack in a separate string (the frames, then each exception it was raised from;
    ``None`` when it has none)."""
    message = describe_error_message(error)
    parts = [_frames(error)] if error.__traceback__ is not None else []
    cause, seen = error, {id(error)}
    while True:
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        parts.append(f"caused by {describe_error_message(cause)}")
        if cause.__traceback__ is not None:
            parts.append(_frames(cause))
    stack = "\n".join(p for p in parts if p)
    return message, stack or None


def describe_error_message(error: BaseException) -> str:
    """The first line of :func:`describe_error`: ``Name: message``; for an error the server
    raised, its SQLSTATE and hint too, as the Node library writes node-postgres's."""
    if isinstance(error, psycopg.Error) and error.sqlstate:
        diag = error.diag
        hint = f"; hint: {diag.message_hint}" if diag.message_hint else ""
        return f"{type(error).__name__}: {diag.message_primary or error} (SQLSTATE {error.sqlstate}{hint})"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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


#: The fields each event type carries (``type`` besides); README.md's table of events lists
#: the same, and the Node library's events have the same names and fields.
EVENT_FIELDS: Mapping[str, tuple[str, ...]] = {
    "picked": ("job",),
    "completed": ("job", "duration", "outcome", "result"),
    "failed": ("job", "duration", "outcome", "permanent", "error", "message", "stack"),
    "released": ("job", "duration", "outcome", "reason"),
    "awaiting": ("job", "duration", "outcome", "signal"),
    "lost": ("job", "duration", "outcome", "during"),
    "retrying": ("job", "during", "error", "message"),
    "error": ("job", "during", "error", "message"),
    "stopped": (),
}


@dataclasses.dataclass
class Event:
    """Something that happened to a worker or one of its jobs, for metrics and logs.

    ``type`` is the event's name; each type carries the fields :data:`EVENT_FIELDS` lists for
    it (the others are ``None``): see README.md, "Events". ``message`` and ``stack`` are
    filled in from ``error``.
    """

    type: str
    job: Any = None
    duration: float | None = None
    outcome: str | None = None
    result: Any = None
    reason: str | None = None
    permanent: bool | None = None
    error: BaseException | None = None
    message: str | None = None
    stack: str | None = None
    during: str | None = None
    #: The signal's name (``awaiting``).
    signal: str | None = None

    def __post_init__(self) -> None:
        if self.type not in EVENT_FIELDS:
            raise ValueError(f"unknown event type {self.type!r}; the types are {', '.join(EVENT_FIELDS)}")
        if self.error is not None and self.message is None:
            self.message, stack = describe_error(self.error)
            if "stack" in EVENT_FIELDS[self.type]:
                self.stack = stack

    @property
    def attempt(self) -> int | None:
        """The attempt the event is about."""
        return None if self.job is None else self.job.attempt

    def as_dict(self) -> dict[str, Any]:
        """The event's type and its fields, for a structured log line."""
        return {"type": self.type, **{name: getattr(self, name) for name in EVENT_FIELDS[self.type]}}


@dataclasses.dataclass
class Signal:
    """The signal a job's run was woken by (``jobs.claimed.signal``): its name, the payload
    ``jobs_signal`` sent, and whether the await timed out instead (then ``payload`` is None)."""

    name: str
    payload: Any = None
    timed_out: bool = False


class JobResult(NamedTuple):
    """The outcome of one job, as :func:`pg_jobs.results` and :func:`pg_jobs.wait` return it:
    its state then, what its handler returned, its error history (one ``{attempt, at,
    error}`` per failed attempt) and when it finished (None while unfinished)."""

    id: int
    state: str
    result: Any
    errors: list | None
    finished_at: datetime | None


@dataclasses.dataclass
class JobRow:
    """The columns of a claimed job that a handler sees; ``signal`` is set on a run woken by
    the signal an earlier run awaited (``await_signal``), None on every other run."""

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
    signal: Signal | None = None


_JOB_COLUMNS = tuple(f.name for f in dataclasses.fields(JobRow) if f.name != "signal")


def complete_and_claim_params(worker: Any, finished: list[tuple[Any, Any]], n: int, lease: float | None) -> list:
    """The parameters of :data:`COMPLETE_AND_CLAIM_SQL` for ``finished`` (pairs of a job and
    its handler's result), claiming up to ``n`` jobs with a lease of ``lease`` seconds. Without
    any result the results are NULL (the server then completes them as one batch)."""
    results = None
    if any(result is not None for _, result in finished):
        results = [jsonb(result) for _, result in finished]
    return [worker.queue, [str(job.id) for job, _ in finished], [job.lease for job, _ in finished], results,
            worker.name, str(n), interval(lease), worker.kinds]


def split_complete_and_claim(names: list[str], rows: list[tuple]) -> tuple[dict[int, str], list[tuple]]:
    """The rows of :data:`COMPLETE_AND_CLAIM_SQL`: the outcomes by job id, and the claimed
    jobs' rows (for :func:`claimed_job`, with the same ``names``)."""
    outcomes: dict[int, str] = {}
    claimed: list[tuple] = []
    for row in rows:
        if row[0] is None:
            claimed.append(row)
        else:
            outcomes[row[0]] = row[1]
    return outcomes, claimed


def claimed_job(names: list[str], row: tuple, lease_seconds: float) -> tuple[JobRow, datetime]:
    """A row of ``SELECT * FROM jobs_claim(...)`` (column ``names``) that asked for a lease of
    ``lease_seconds``: the job's columns, and the claim's time on the server's clock (the
    row's ``lease_until`` less the lease)."""
    columns = dict(zip(names, row))
    columns["lease"] = str(columns["lease"])
    claimed_at = columns["lease_until"] - timedelta(seconds=lease_seconds)
    # Servers before workflows have no signal column.
    woken = columns.get("signal")
    signal = None if woken is None else Signal(woken["name"], woken.get("payload"), woken.get("timed_out") is True)
    return JobRow(**{name: columns[name] for name in _JOB_COLUMNS}, signal=signal), claimed_at


def unknown_kind(worker: Any, job: JobRow, claimed_at: datetime) -> tuple[str, Any]:
    """What a worker does with a job of a kind it has no handler for: ``("release", reason)``
    while the job is younger than ``unknown_kind_max_age`` (a deploy in progress may bring its
    handler), else ``("fail", UnknownKindError)`` (with retries; at once and for good with
    ``unknown_kind='fail'``). The job's age is the claim's time against its ``created_at``,
    both on the server's clock."""
    handled = list(worker.handlers)
    if worker.unknown_kind == "fail":
        return "fail", UnknownKindError(job.kind, worker.name, handled)
    age = (claimed_at - job.created_at).total_seconds()
    if age < worker.unknown_kind_max_age:
        return "release", f"no handler for kind {json.dumps(job.kind)}"
    detail = (f"the job is {int(age)} s old, past unknown_kind_max_age ({worker.unknown_kind_max_age:g} s)"
              " of releases waiting for a deploy")
    return "fail", UnknownKindError(job.kind, worker.name, handled, detail)


def check_options(unknown_kind_: str, unknown_kind_delay: float, unknown_kind_max_age: float, kinds: str) -> None:
    """Refuses worker options out of range, naming the option."""
    if unknown_kind_ not in ("release", "fail"):
        raise ValueError(f"unknown_kind must be 'release' or 'fail', not {unknown_kind_!r}")
    for name, value in (("unknown_kind_delay", unknown_kind_delay), ("unknown_kind_max_age", unknown_kind_max_age)):
        if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
            raise ValueError(f"{name} must be a finite, non-negative number of seconds, not {value!r}")
    if kinds not in ("all", "handled"):
        raise ValueError(f"kinds must be 'all' or 'handled', not {kinds!r}")


def error_text(error: BaseException) -> str:
    """The text stored in the job's error history: the message first, then the stack."""
    message, stack = describe_error(error)
    return f"{message}\n{stack}" if stack else message
