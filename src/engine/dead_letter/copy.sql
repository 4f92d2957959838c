-- Copies each job of $1 that ended failed into its queue's dead-letter queue, if it has one:
-- same kind, payload, headers and tenant, with its origin (queue, id) and error history. Returns the
-- dead-letter queue, claim position and tenant of each copy.
-- $1 ids
-- The copies go into the kinds index whatever the dead-letter queue's claims_by_kind: this
-- statement does not hold that queue's lock, so the setting may turn on as it runs.
INSERT INTO jobs.job (queue, kind, payload, headers, max_attempts, tenant, origin, kind_indexed)
SELECT d.name, f.kind, f.payload, f.headers, d.max_attempts, f.tenant,
       jsonb_build_object('queue', f.queue, 'id', f.id, 'errors', f.errors), true
  FROM jobs.job f
  JOIN jobs.queue s ON s.name = f.queue
  JOIN jobs.queue d ON d.name = s.dead_letter
 WHERE f.id = ANY ($1) AND f.state = 'failed'
RETURNING queue, id, priority, run_at, tenant
