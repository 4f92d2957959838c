-- The payload of signal $2 of tenant $1 ('' for none) when it is recorded and has not expired
-- by $3 (one row, its payload maybe NULL), else no row. Run under the latest snapshot, after
-- the signal's lock (engine::workflows::signals).
-- $1 tenant, $2 signal, $3 now
SELECT s.payload
  FROM jobs.signal s
 WHERE s.tenant = $1 AND s.name = $2 AND s.expires_at > $3
