"""Producing jobs on the caller's own connection (so inside its transaction, if one is open):
``jobs_enqueue`` and ``jobs_enqueue_batch`` with every option passed as a named argument."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from psycopg.types.json import Jsonb

from ._common import interval

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
