-- Claims the picked jobs that are still queued and due, each under the fresh lease token the
-- claim minted for it (Rule 4), spending an attempt (Rule 3). We hold their job locks, so no other claim touches
-- them; one that another claim took and committed before this statement's snapshot is simply
-- not matched, never locked. Each row comes back with its claim position (for the order of
-- the result and the claim floor).
-- $1 ids, $2 leases (one per id), $3 worker, $4 lease length, $5 now
UPDATE jobs.job j
   SET state          = 'running',
       attempt        = j.attempt + 1,
       lease          = p.lease,
       lease_duration = $4,
       lease_until    = $5 + $4,
       worker         = $3,
       started_at     = $5,
       heartbeat_at   = NULL,
       -- A freed head a settle handed over is still marked waiting: taking it clears the mark.
       group_wait     = false
  FROM unnest($1::bigint[], $2::uuid[]) AS p(id, lease)
 WHERE j.id = p.id
   AND j.state = 'queued'
   AND j.run_at <= $5
   -- Rule 3: never past its attempts (what no path leaves queued; jobs.job has no CHECK).
   AND j.attempt < j.max_attempts
RETURNING ROW(j.id, j.queue, j.kind, j.payload, j.headers, j.attempt, j.max_attempts, j.lease,
              j.lease_until, j.priority, j.tenant, j.group_key, j.created_at, j.run_at,
              -- What woke it after an await (engine::workflows::signals); NULL for other jobs.
              j.signal)::jobs.claimed AS claimed,
          j.priority, j.run_at, j.id
