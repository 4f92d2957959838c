-- Copies each job of $1 that ended failed into its queue's dead-letter queue, if it has one:
-- same kind, payload, headers and tenant, with its origin (queue, id) and error history. Returns the
-- dead-letter queue, claim position and tenant of each copy.
-- $1 ids
INSERT INTO jobs.job (queue, kind, payload, headers, max_attempts, tenant, origin)
SELECT d.name, f.kind, f.payload, f.headers, d.max_attempts, f.tenant,
       jsonb_build_object('queue', f.queue, 'id', f.id, 'errors', f.errors)
  FROM jobs.job f
  JOIN jobs.queue s ON s.name = f.queue
  JOIN jobs.queue d ON d.name = s.dead_letter
 WHERE f.id = ANY ($1) AND f.state = 'failed'
RETURNING queue, id, priority, run_at, tenant
