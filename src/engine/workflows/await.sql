-- Hands a job held under (id, lease) back to wait for signal $3 (jobs_await) without spending
-- its attempt: waiting, under no lease, its signal named (the wake-up adds payload and
-- timed_out).
-- Returns its queue, position, group and tenant; no row: the caller classifies the miss.
-- $1 id, $2 lease, $3 signal, $4 tenants (the caller's scope), $5 state (running, or queued
-- after a reclaim)
UPDATE jobs.job j
   SET state            = 'waiting',
       attempt          = greatest(j.attempt - 1, 0),
       lease            = NULL,
       lease_until      = NULL,
       signal           = jsonb_build_object('name', $3::text)
 WHERE j.id = $1 AND j.lease = $2 AND j.state = $5::jobs.state
   AND ($4::text[] IS NULL OR (j.tenant IS NULL AND cardinality($4::text[]) = 0) OR j.tenant = ANY ($4::text[]))
RETURNING j.queue, j.priority, j.run_at, j.id, j.group_key, j.tenant
