"""Runs every query of queries.yaml against a real server (clients/test starts it), as the
exporter would: as a login role granted jobs_client, checking that each query returns exactly
the columns its metrics declare, labels as text and samples as numbers, and that the numbers
follow what happened to a queue."""

from __future__ import annotations

import math
import os
import pathlib
import uuid

import psycopg
import pytest
import yaml

QUERIES = pathlib.Path(__file__).with_name("queries.yaml")
USAGES = {"LABEL", "GAUGE", "COUNTER"}
EXPORTER_ROLE = "pgjobs_test_exporter"


def admin_dsn() -> str:
    dsn = os.environ.get("PG_JOBS_TEST_DSN")
    if not dsn:
        pytest.fail("PG_JOBS_TEST_DSN is not set: run the tests through clients/test")
    return dsn


@pytest.fixture(scope="module")
def queries() -> dict:
    return yaml.safe_load(QUERIES.read_text())


@pytest.fixture(scope="module")
def exporter() -> psycopg.Connection:
    """A connection as the exporter's role: jobs_client and pg_monitor, nothing else."""
    with psycopg.connect(admin_dsn(), autocommit=True) as admin:
        admin.execute(
            f"""DO $$ BEGIN
                  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{EXPORTER_ROLE}') THEN
                    CREATE ROLE {EXPORTER_ROLE} LOGIN;
                  END IF;
                END $$;
                GRANT jobs_client, pg_monitor TO {EXPORTER_ROLE}"""
        )
    conninfo = psycopg.conninfo.make_conninfo(admin_dsn(), user=EXPORTER_ROLE)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


def scrape(conn: psycopg.Connection, spec: dict) -> list[dict]:
    """The query's rows as dicts, checked against its metric declarations."""
    declared = [next(iter(metric)) for metric in spec["metrics"]]
    with conn.cursor() as cur:
        cur.execute(spec["query"])
        columns = [column.name for column in cur.description]
        rows = [dict(zip(columns, row)) for row in cur.fetchall()]
    assert columns == declared, "the query's columns must be its declared metrics, in order"
    for metric in spec["metrics"]:
        ((column, settings),) = metric.items()
        for row in rows:
            value = row[column]
            if settings["usage"] == "LABEL":
                assert isinstance(value, str), f"label {column} is {value!r}"
            else:
                assert isinstance(value, (int, float)) and not isinstance(value, bool), (
                    f"sample {column} is {value!r}"
                )
                assert not math.isnan(value), column
    return rows


def test_every_query_is_declared_as_postgres_exporter_reads_it(queries: dict) -> None:
    assert set(queries) == {"pg_jobs_queue", "pg_jobs_settled", "pg_jobs_worker"}
    for name, spec in queries.items():
        assert set(spec) == {"query", "metrics"}, name
        for metric in spec["metrics"]:
            assert len(metric) == 1, f"{name}: one column per metric entry"
            ((column, settings),) = metric.items()
            assert settings["usage"] in USAGES, f"{name}.{column}"
            assert settings["description"], f"{name}.{column} needs a description"


def test_the_queries_follow_a_queue(queries: dict, exporter: psycopg.Connection) -> None:
    queue = f"exported-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn(), autocommit=True) as admin:
        admin.execute("SELECT jobs_create_queue(%s, max_attempts => 1)", (queue,))
        for _ in range(3):
            admin.execute("SELECT jobs_enqueue(%s, '{}')", (queue,))
        (later,) = admin.execute("SELECT jobs_enqueue(%s, '{}', run_at => now() + interval '1 hour')", (queue,)).fetchone()
        admin.execute("SELECT jobs_enqueue(%s, '{}', after => ARRAY[%s]::bigint[])", (queue, later))
        held = admin.execute("SELECT id, lease FROM jobs_claim(%s, n => 2)", (queue,)).fetchall()
        assert len(held) == 2
        admin.execute("SELECT jobs_complete(%s, %s)", held[0])
        admin.execute("SELECT jobs_fail(%s, %s, 'boom')", held[1])

    by_queue = {row["queue"]: row for row in scrape(exporter, queries["pg_jobs_queue"])}
    stats = by_queue[queue]
    assert (stats["ready"], stats["scheduled"], stats["running"], stats["waiting"]) == (1, 1, 0, 1)
    assert (stats["succeeded"], stats["failed"], stats["cancelled"]) == (1, 1, 0)
    assert stats["running_past_lease"] == 0 and stats["paused"] == 0
    assert stats["finished_last_minute"] == 2
    assert 0 <= stats["oldest_ready_age_seconds"] < 60

    settled = {row["queue"]: row for row in scrape(exporter, queries["pg_jobs_settled"])}
    assert (settled[queue]["completed"], settled[queue]["failed"], settled[queue]["retried"]) == (1, 1, 0)

    workers = scrape(exporter, queries["pg_jobs_worker"])
    assert len(workers) == 1, "one worker serves the database"
    (worker,) = workers
    assert worker["up"] == 1
    assert 0 <= worker["last_tick_age_seconds"] < 30
    assert worker["ticks"] > 0
    assert worker["last_error_age_seconds"] == math.inf
