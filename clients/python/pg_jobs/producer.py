"""Producing jobs on the caller's own connection (so inside its transaction, if one is open):
``jobs_enqueue`` and ``jobs_enqueue_batch`` with every option passed as a named argument; and
workflows: the outcome of jobs (``jobs_results``), a wait until they have finished
(``jobs_wait``) and a signal that wakes the jobs awaiting it (``jobs_signal``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from psycopg.types.json import Jsonb

from ._common import JobResult, interval, jsonb


def _ids(values: Iterable[Any]) -> list[str]:
    """Job ids as a parameter: a list of strings, sent untyped."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"job ids must be a list, not {values!r}")
    return [str(int(v)) for v in values]

# Python keyword → SQL argument name, and how the value is passed.
_OPTIONS = {
    "kind": ("kind", str),
    "run_at": ("run_at", lambda v: v.isoformat() if isinstance(v, datetime) else str(v)),
    "priority": ("priority", str),
    "max_attempts": ("max_attempts", str),
    "headers": ("headers", Jsonb),
    "unique_key": ("unique_key", str),
    "unique_for": ("unique_for", interval),
    "on_conflict": ("on_conflict", str),
    "tenant": ("tenant", str),
    "group_key": ("group_key", str),
    "after": ("after", _ids),
}


def _named(options: dict[str, Any], params: list[Any]) -> str:
    sql = ""
    for key, value in options.items():
        if key not in _OPTIONS:
            raise TypeError(f"unknown enqueue option {key!r}; the options are {', '.join(_OPTIONS)}")
        if value is None:
            continue
        name, convert = _OPTIONS[key]
        params.append(convert(value))
        sql += f", {name} => %s"
    return sql


def enqueue(conn, queue: str, payload: Any = None, **options: Any) -> int:
    """Enqueues one job on ``conn`` and returns its id (for a unique duplicate: the existing
    job's). Options: kind, run_at (a datetime, or text the server parses), priority,
    max_attempts, headers, unique_key, unique_for (seconds), on_conflict, tenant, group_key.

    ``after`` (job ids) makes it wait, ``waiting``, until every one of those jobs has
    succeeded; a parent that fails or is cancelled cancels it (README "Workflows").

    ``conn`` is a psycopg connection (sync); inside ``with conn.transaction():`` the job
    exists only if the transaction commits.
    """
    params: list[Any] = [queue, Jsonb({} if payload is None else payload)]
    sql = f"SELECT jobs_enqueue(%s, %s{_named(options, params)})"
    return conn.execute(sql, params).fetchone()[0]


def enqueue_batch(conn, queue: str, payloads: Iterable[Any], **options: Any) -> list[tuple[int, bool]]:
    """Enqueues one job per payload in one statement, with the same options for all; returns
    ``(id, inserted)`` per payload, in payload order (``inserted`` is False where a unique
    duplicate was found)."""
    params: list[Any] = [queue, [Jsonb(p) for p in payloads]]
    sql = f"SELECT * FROM jobs_enqueue_batch(%s, %s{_named(options, params)}) AS e"
    cur = conn.execute(sql, params)
    return [(row[0], row[1] if len(row) > 1 else True) for row in cur.fetchall()]


async def enqueue_async(conn, queue: str, payload: Any = None, **options: Any) -> int:
    """:func:`enqueue` on a psycopg ``AsyncConnection``."""
    params: list[Any] = [queue, Jsonb({} if payload is None else payload)]
    sql = f"SELECT jobs_enqueue(%s, %s{_named(options, params)})"
    cur = await conn.execute(sql, params)
    return (await cur.fetchone())[0]


async def enqueue_batch_async(conn, queue: str, payloads: Iterable[Any], **options: Any) -> list[tuple[int, bool]]:
    """:func:`enqueue_batch` on a psycopg ``AsyncConnection``."""
    params: list[Any] = [queue, [Jsonb(p) for p in payloads]]
    sql = f"SELECT * FROM jobs_enqueue_batch(%s, %s{_named(options, params)}) AS e"
    cur = await conn.execute(sql, params)
    return [(row[0], row[1] if len(row) > 1 else True) for row in await cur.fetchall()]


RESULTS_SQL = "SELECT * FROM jobs_results(%s)"
# The bare call, nothing in its select list: in autocommit the form whose wait holds no snapshot.
WAIT_SQL = "SELECT * FROM jobs_wait(%s, %s)"


def _signal_call(name: str, payload: Any, keep: float | None) -> tuple[str, list[Any]]:
    params: list[Any] = [name, jsonb(payload)]
    if keep is None:
        return "SELECT jobs_signal(%s, %s)", params
    params.append(interval(keep))
    return "SELECT jobs_signal(%s, %s, keep => %s)", params


def results(conn, ids: Iterable[Any]) -> list[JobResult]:
    """The outcome of each listed job the caller may see, in the order given
    (``jobs_results``): a job that does not exist, was purged or belongs to another tenant
    has no entry."""
    return [JobResult(*row) for row in conn.execute(RESULTS_SQL, [_ids(ids)]).fetchall()]


def wait(conn, ids: Iterable[Any], timeout: float) -> list[JobResult]:
    """Waits until every listed job has finished, or ``timeout`` seconds have passed, then
    returns their outcomes as :func:`results` does (``jobs_wait``): woken by the commits that
    finish them, not by polling. On an autocommit connection (``connect_kwargs()``) the call
    holds no snapshot while it sleeps; it refuses a REPEATABLE READ or SERIALIZABLE
    transaction (``psycopg.errors.InvalidTransactionState``, SQLSTATE 25000)."""
    return [JobResult(*row) for row in conn.execute(WAIT_SQL, [_ids(ids), interval(timeout)]).fetchall()]


def signal(conn, name: str, payload: Any = None, keep: float | None = None) -> int:
    """Signals ``name`` (``jobs_signal``) on ``conn``, so inside its transaction when one is
    open: when it commits, every job of the session's tenant awaiting the signal is queued and
    its next run has ``job.signal`` with ``payload``; the signal stays recorded for ``keep``
    seconds (default: the server's, a day; 0: not recorded) so that an await that comes later
    returns at once. A rolled-back signal wakes nothing. Returns the number of jobs it wakes
    (when the transaction commits)."""
    sql, params = _signal_call(name, payload, keep)
    return conn.execute(sql, params).fetchone()[0]


async def results_async(conn, ids: Iterable[Any]) -> list[JobResult]:
    """:func:`results` on a psycopg ``AsyncConnection``."""
    cur = await conn.execute(RESULTS_SQL, [_ids(ids)])
    return [JobResult(*row) for row in await cur.fetchall()]


async def wait_async(conn, ids: Iterable[Any], timeout: float) -> list[JobResult]:
    """:func:`wait` on a psycopg ``AsyncConnection``."""
    cur = await conn.execute(WAIT_SQL, [_ids(ids), interval(timeout)])
    return [JobResult(*row) for row in await cur.fetchall()]


async def signal_async(conn, name: str, payload: Any = None, keep: float | None = None) -> int:
    """:func:`signal` on a psycopg ``AsyncConnection``."""
    sql, params = _signal_call(name, payload, keep)
    cur = await conn.execute(sql, params)
    return (await cur.fetchone())[0]
