-- On a Citus shard: the dead-letter copies copy.sql would insert for the jobs of $1 that ended
-- failed, read from the shard, to be inserted one by one through Citus (insert_routed.sql),
-- which routes each to its dead-letter queue's shard, on whichever node.
-- $1 ids
SELECT d.name AS queue, f.kind, f.payload, f.headers, d.max_attempts, f.tenant,
       jsonb_build_object('queue', f.queue, 'id', f.id, 'errors', f.errors) AS origin
  FROM jobs.job f
  JOIN jobs.queue s ON s.name = f.queue
  JOIN jobs.queue d ON d.name = s.dead_letter
 WHERE f.id = ANY ($1) AND f.state = 'failed'
 ORDER BY f.id
