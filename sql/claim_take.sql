-- Claims the picked jobs that are still queued and due: each gets a fresh lease token and
-- spends an attempt. We hold their job locks, so no other claim touches them; one that
-- another claim took and committed before this statement's snapshot is simply not matched,
-- never locked. The rows come back in claim order, each with its claim position (for the
-- claim floor).
-- $1 ids, $2 worker, $3 lease (NULL: the queue's), $4 now, $5 queue
WITH claimed AS (
    UPDATE jobs.job j
       SET state          = 'running',
           attempt        = j.attempt + 1,
           lease          = gen_random_uuid(),
           lease_duration = s.lease,
           lease_until    = $4 + s.lease,
           worker         = $2,
           started_at     = $4,
           heartbeat_at   = NULL
      FROM (SELECT coalesce($3, q.lease) AS lease FROM jobs.queue q WHERE q.name = $5) AS s
     WHERE j.id = ANY ($1)
       AND j.state = 'queued'
       AND j.run_at <= $4
 RETURNING j.*
)
SELECT ROW(c.id, c.queue, c.kind, c.payload, c.headers, c.attempt, c.max_attempts, c.lease,
           c.lease_until, c.priority, c.tenant, c.group_key, c.created_at, c.run_at)::jobs.claimed,
       c.priority, c.run_at, c.id
  FROM claimed c
 ORDER BY c.priority, c.run_at, c.id
