-- Records signal $2 of tenant $1 ('' for none) with payload $3 from $4 until $4 + $5, over an
-- earlier record of it.
-- $1 tenant, $2 signal, $3 payload, $4 now, $5 keep
INSERT INTO jobs.signal AS s (tenant, name, payload, sent_at, expires_at)
VALUES ($1, $2, $3, $4, $4 + $5)
ON CONFLICT (tenant, name) DO UPDATE
   SET payload = EXCLUDED.payload, sent_at = EXCLUDED.sent_at, expires_at = EXCLUDED.expires_at
