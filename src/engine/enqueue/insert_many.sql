-- Inserts one job per element of the arrays (all of one length), each into the queue it names,
-- and returns their ids in input order with each job's queue and position; no row for a job
-- whose queue does not exist. The caller holds each queue's shared lock.
-- $1 queues, $2 payloads, $3 kinds, $4 run_ats, $5 priorities, $6 max_attempts (NULL: the
-- queue's), $7 headers, $8 tenants
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant)
SELECT q.name, u.kind, u.payload, u.headers, u.priority, u.run_at,
       coalesce(u.max_attempts, q.max_attempts), u.tenant
  FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::timestamptz[], $5::int2[], $6::int4[],
              $7::jsonb[], $8::text[])
       WITH ORDINALITY AS u(queue, payload, kind, run_at, priority, max_attempts, headers, tenant, ord)
  JOIN jobs.queue q ON q.name = u.queue
 ORDER BY u.ord
RETURNING id, queue, priority, run_at
