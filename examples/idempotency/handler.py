"""An idempotent HTTP endpoint on pg_jobs idempotency records (README "Idempotency records").

A request that carries an Idempotency-Key header runs once: the first one runs and stores its
response, a duplicate that arrives while it runs gets 409, a later duplicate gets the stored
response, and the same key reused for a different request gets 422.
"""
import hashlib
import json
from http.server import BaseHTTPRequestHandler

import psycopg
from psycopg.types.json import Jsonb

# ANCHOR: idempotent (docs/src/guides/idempotency.md includes the code down to ANCHOR_END)
CONFLICT = "55P03"  # a request with this key is still in flight
MISMATCH = "23000"  # the key was used for a different request


def idempotent(dsn, key, fingerprint, run):
    """Runs run() -> (status, body) at most once per key; returns (status, body, replayed)."""
    with psycopg.connect(dsn, autocommit=True) as db:
        record = db.execute("SELECT status, response, fingerprint FROM jobs_idempotency_get(%s)",
                            (key,)).fetchone()
        if record and record[0] == "completed":
            if record[2] != fingerprint:
                return 422, {"error": "Idempotency-Key reused for a different request"}, False
            return record[1]["status"], record[1]["body"], True
        try:  # takes the key, or a record whose request died (no update for 30 s)
            (token,) = db.execute(
                "SELECT token FROM jobs_idempotency_save(%s, fingerprint => %s,"
                " ttl => '24 hours', pending_for => '30 seconds')", (key, fingerprint)).fetchone()
        except psycopg.Error as error:
            if error.sqlstate == CONFLICT:
                return 409, {"error": "a request with this Idempotency-Key is in progress"}, False
            if error.sqlstate == MISMATCH:
                return 422, {"error": "Idempotency-Key reused for a different request"}, False
            raise
        try:
            status, body = run()
        except Exception:
            # Give the key back so the client's retry runs (unless another request took it over).
            db.execute("SELECT jobs_idempotency_delete(%s, token => %s)", (key, token))
            raise
        # 'lost' means we ran past pending_for and a retry took the key over: our answer stands.
        db.execute("SELECT jobs_idempotency_update(%s, 'completed', %s, token => %s)",
                   (key, Jsonb({"status": status, "body": body}), token))
        return status, body, False
# ANCHOR_END: idempotent


class Handler(BaseHTTPRequestHandler):
    """POST handler; subclasses set dsn and implement create(payload) -> (status, body)."""
    dsn = None

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        key = self.headers.get("Idempotency-Key")
        run = lambda: self.create(json.loads(raw or b"{}"))
        if key is None:
            status, body, replayed = *run(), False
        else:
            fingerprint = hashlib.sha256(b"POST " + self.path.encode() + b"\n" + raw).hexdigest()
            try:
                status, body, replayed = idempotent(self.dsn, key, fingerprint, run)
            except Exception as error:
                status, body, replayed = 500, {"error": str(error)}, False
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(payload)

    def create(self, payload):
        raise NotImplementedError
