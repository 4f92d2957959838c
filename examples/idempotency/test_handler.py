"""Tests the idempotent endpoint of handler.py against a throwaway PostgreSQL cluster with the
installed pg_jobs extension ($PG_JOBS_PG_BIN names its bin directory), over real HTTP and
real connections, as a login role that has only jobs_client.

Run: python3 examples/idempotency/test_handler.py (scripts/test does, in a venv with psycopg).
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest
from http.server import ThreadingHTTPServer
from pathlib import Path

import psycopg

from handler import Handler

PG_BIN = Path(os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin"))


def as_cluster_owner(args):
    """PostgreSQL refuses to run as root: run its programs as postgres when we are root."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A cluster of our own in a temporary directory, removed when stopped."""

    def __init__(self):
        root = os.environ.get("PG_JOBS_TEST_DIR", "/var/tmp/pg_jobs-tests")
        os.makedirs(root, exist_ok=True)
        self.base = Path(tempfile.mkdtemp(prefix="idempotency-recipe-", dir=root))
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        self.data = self.base / "data"
        self.port = free_port()
        subprocess.run(as_cluster_owner([str(PG_BIN / "initdb"), "-A", "trust", "-U", "postgres",
                                         "--no-sync", "-D", str(self.data)]),
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(as_cluster_owner([
            str(PG_BIN / "pg_ctl"), "start", "-w", "-D", str(self.data), "-l", str(self.base / "log"),
            "-o", f"-p {self.port} -k {self.base} -c listen_addresses='' -c fsync=off"]),
            check=True, stdout=subprocess.DEVNULL)

    def dsn(self, user):
        return f"host={self.base} port={self.port} user={user} dbname=postgres"

    def stop(self):
        subprocess.run(as_cluster_owner([str(PG_BIN / "pg_ctl"), "stop", "-m", "immediate", "-w",
                                         "-D", str(self.data)]), stdout=subprocess.DEVNULL)
        shutil.rmtree(self.base, ignore_errors=True)


class Payments(Handler):
    """POST /payments creates a payment: counts its runs, and can be held in flight or fail."""
    runs = 0
    lock = threading.Lock()
    started = threading.Event()
    release = threading.Event()
    release.set()
    fail_next = False

    def create(self, payload):
        with Payments.lock:
            Payments.runs += 1
            number = Payments.runs
            fail, Payments.fail_next = Payments.fail_next, False
        Payments.started.set()
        Payments.release.wait(30)
        if fail:
            raise RuntimeError("card network unreachable")
        return 201, {"payment": number, "amount": payload["amount"]}

    def log_message(self, *args):
        pass


class IdempotentEndpoint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        with psycopg.connect(cls.cluster.dsn("postgres"), autocommit=True) as db:
            db.execute("CREATE EXTENSION pg_jobs")
            db.execute("CREATE ROLE shop LOGIN")
            db.execute("GRANT jobs_client TO shop")
        Payments.dsn = cls.cluster.dsn("shop")
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), Payments)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.cluster.stop()

    def post(self, key, body):
        connection = http.client.HTTPConnection("127.0.0.1", self.server.server_port, timeout=60)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        connection.request("POST", "/payments", json.dumps(body), headers)
        response = connection.getresponse()
        answer = (response.status, json.loads(response.read()),
                  response.getheader("Idempotent-Replayed"))
        connection.close()
        return answer

    def test_first_runs_concurrent_duplicate_gets_409_later_duplicate_gets_the_response(self):
        runs = Payments.runs
        Payments.started.clear()
        Payments.release.clear()
        first = {}
        thread = threading.Thread(target=lambda: first.update(answer=self.post("pay-1", {"amount": 42})))
        thread.start()
        try:
            self.assertTrue(Payments.started.wait(30), "the first request did not start")
            status, body, _ = self.post("pay-1", {"amount": 42})
            self.assertEqual(status, 409, body)
        finally:
            Payments.release.set()  # also when the test fails, so later tests do not wait
            thread.join(60)
        status, body, replayed = first["answer"]
        self.assertEqual((status, replayed), (201, None))
        self.assertEqual(body["amount"], 42)
        self.assertEqual(self.post("pay-1", {"amount": 42}), (201, body, "true"))
        self.assertEqual(Payments.runs, runs + 1, "the payment ran more than once")

    def test_a_key_reused_for_a_different_request_gets_422(self):
        status, _, _ = self.post("pay-2", {"amount": 10})
        self.assertEqual(status, 201)
        runs = Payments.runs
        status, body, _ = self.post("pay-2", {"amount": 99})
        self.assertEqual(status, 422, body)
        self.assertEqual(Payments.runs, runs)

    def test_a_failed_request_gives_its_key_back_for_the_retry(self):
        Payments.fail_next = True
        status, body, _ = self.post("pay-3", {"amount": 7})
        self.assertEqual(status, 500, body)
        status, body, replayed = self.post("pay-3", {"amount": 7})
        self.assertEqual((status, replayed), (201, None), body)
        self.assertEqual(self.post("pay-3", {"amount": 7}), (201, body, "true"))

    def test_requests_without_a_key_simply_run(self):
        runs = Payments.runs
        self.assertEqual(self.post(None, {"amount": 1})[0], 201)
        self.assertEqual(self.post(None, {"amount": 1})[0], 201)
        self.assertEqual(Payments.runs, runs + 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
