"""Runs every query of queries.yaml against a real server (clients/test starts it), as the
exporter would: as a login role granted jobs_client, checking that each query returns exactly
the columns its metrics declare, labels as text and samples as numbers, and that the numbers
follow what happened to a queue."""

from __future__ import annotations

import math
import os
import pathlib
import re
import uuid

import psycopg
import pytest
import yaml

QUERIES = pathlib.Path(__file__).with_name("queries.yaml")
# The dashboard's guide, whose alert rules must use the metrics' names.
GUIDE = pathlib.Path(__file__).parents[2] / "docs" / "src" / "guides" / "dashboard.md"
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
    assert set(queries) == {
        "pg_jobs",
        "pg_jobs_queue",
        "pg_jobs_client",
        "pg_jobs_database",
        "pg_jobs_worker",
        "pg_jobs_worker_last_error",
    }
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

    jobs = {
        (row["queue"], row["state"]): row["jobs"]
        for row in scrape(exporter, queries["pg_jobs_queue"])
    }
    assert [jobs[(queue, state)] for state in ("ready", "scheduled", "running", "waiting")] == [1, 1, 0, 1]
    assert [jobs[(queue, state)] for state in ("succeeded", "failed", "cancelled")] == [1, 1, 0]

    by_queue = {row["queue"]: row for row in scrape(exporter, queries["pg_jobs"])}
    stats = by_queue[queue]
    assert stats["running_past_lease"] == 0 and stats["queue_paused"] == 0
    assert stats["finished_last_minute"] == 2
    assert 0 <= stats["oldest_ready_age_seconds"] < 60
    counters = [stats[f"{c}_total"] for c in ("completed", "failed", "retried", "released", "lost", "cancelled", "enqueued")]
    assert counters == [1, 1, 0, 0, 0, 0, 5]

    workers = scrape(exporter, queries["pg_jobs_worker"])
    assert len(workers) == 1, "one worker serves the database"
    (worker,) = workers
    assert worker["up"] == 1
    assert 0 <= worker["last_tick_age_seconds"] < 30
    assert worker["ticks_total"] > 0
    assert worker["last_error_age_seconds"] == math.inf

    assert scrape(exporter, queries["pg_jobs_database"]) == [
        {"database": exporter.info.dbname, "served": 1}
    ]


def test_a_database_no_worker_serves_is_exported_as_unserved(queries: dict) -> None:
    database = f"exported_unserved_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        conninfo = psycopg.conninfo.make_conninfo(admin_dsn(), dbname=database)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_jobs")
            assert scrape(conn, queries["pg_jobs_database"]) == [
                {"database": database, "served": 0}
            ]
    finally:
        with psycopg.connect(admin_dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """The metric families of Prometheus text: name -> (type, label names of its samples)."""
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    labels: dict[str, set[str]] = {name: set() for name in kinds}
    for name, inner in re.findall(r"^(\w+)\{([^}]*)\} ", text, re.M):
        labels[name] |= set(re.findall(r'(\w+)="', inner))
    return {name: (kinds[name], frozenset(labels[name])) for name in kinds}


def declared_families(queries: dict) -> dict[str, tuple[str, frozenset[str]]]:
    """The families postgres_exporter makes of the query file: <query>_<column> for every
    sample column, with the query's label columns."""
    out = {}
    for query, spec in queries.items():
        columns = [next(iter(metric.items())) for metric in spec["metrics"]]
        labels = frozenset(c for c, settings in columns if settings["usage"] == "LABEL")
        for column, settings in columns:
            if settings["usage"] != "LABEL":
                out[f"{query}_{column}"] = (settings["usage"].lower(), labels)
    return out


def test_the_query_file_and_jobs_metrics_use_the_same_names(queries: dict, exporter: psycopg.Connection) -> None:
    """One naming scheme: every family jobs_metrics() writes is one postgres_exporter makes of
    the query file, of the same type and with the same labels, and the other way round."""
    with psycopg.connect(admin_dsn(), autocommit=True) as admin:
        queue = f"named-{uuid.uuid4().hex[:8]}"
        admin.execute("SELECT jobs_create_queue(%s)", (queue,))
        job = admin.execute("SELECT jobs_enqueue(%s, '{}')", (queue,)).fetchone()[0]
        admin.execute("SELECT jobs_claim(%s, worker => 'named-worker')", (queue,))
        # A failed tick is what makes the worker's error family appear; without one the
        # family is declared only.
        text = admin.execute("SELECT jobs_metrics()").fetchone()[0]
        admin.execute("SELECT jobs_cancel(%s)", (job,))
    written = families(text)
    declared = declared_families(queries)
    optional = {"pg_jobs_worker_last_error_info"}
    assert set(written) - set(declared) == set(), "families jobs_metrics() writes that the query file lacks"
    assert set(declared) - set(written) - optional == set(), "families of the query file jobs_metrics() lacks"
    for name, (kind, labels) in written.items():
        assert declared[name] == (kind, labels), name


def test_the_guides_alert_rules_name_existing_metrics(queries: dict) -> None:
    text = GUIDE.read_text()
    section = text[text.index("## Alert rules"):]
    named = set(re.findall(r"\b(pg_jobs_[a-z_]+)\b", section))
    assert named, "the guide's alert rules name no metric"
    unknown = named - set(declared_families(queries))
    assert unknown == set(), f"alert rules name metrics nobody writes: {unknown}"
