-- Deletes up to $2 recorded signals that expired by $1, oldest first; returns how many.
-- $1 now, $2 batch size
WITH expired AS (
    SELECT s.tenant, s.name
      FROM jobs.signal s
     WHERE s.expires_at <= $1
     ORDER BY s.expires_at
     LIMIT $2
), gone AS (
    DELETE FROM jobs.signal s
     USING expired e
     WHERE s.tenant = e.tenant AND s.name = e.name AND s.expires_at <= $1
    RETURNING 1
)
SELECT count(*) AS purged FROM gone
