-- Claims up to $3 due jobs of queue $1 for worker $2: priority, then run_at, then id; rows
-- other claimers hold are skipped, never waited on. Each claim mints a fresh lease token and
-- spends an attempt. Returns nothing for a paused or unknown queue. The update finds the picked
-- rows through an id array so even a generic plan probes the primary key instead of joining.
-- $1 queue, $2 worker, $3 n, $4 lease (NULL: the queue's), $5 kinds (NULL: any), $6 now
WITH settings AS (
    SELECT coalesce($4, q.lease) AS lease
      FROM jobs.queue q
     WHERE q.name = $1 AND NOT q.paused
), picked AS MATERIALIZED (
    SELECT due.id
      FROM jobs.queued_priorities($1) AS p(priority)
     CROSS JOIN LATERAL (
            SELECT j.id
              FROM jobs.job j
             WHERE j.queue = $1
               AND j.state = 'queued'
               AND j.priority = p.priority
               AND j.run_at <= $6
               AND ($5::text[] IS NULL OR j.kind = ANY ($5::text[]))
             ORDER BY j.run_at, j.id
             LIMIT $3
               FOR UPDATE SKIP LOCKED
           ) AS due
     WHERE EXISTS (SELECT FROM settings)
     LIMIT $3
), claimed AS (
    UPDATE jobs.job j
       SET state          = 'running',
           attempt        = j.attempt + 1,
           lease          = gen_random_uuid(),
           lease_duration = s.lease,
           lease_until    = $6 + s.lease,
           worker         = $2,
           started_at     = $6,
           heartbeat_at   = NULL
      FROM settings s
     WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
 RETURNING j.*
)
SELECT ROW(c.id, c.queue, c.kind, c.payload, c.headers, c.attempt, c.max_attempts, c.lease,
           c.lease_until, c.priority, c.tenant, c.group_key, c.created_at, c.run_at)::jobs.claimed
  FROM claimed c
 ORDER BY c.priority, c.run_at, c.id
