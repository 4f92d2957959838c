-- Adds what each key counted since the worker's last write to minute $1 of the throughput
-- history (a minute written before, by the flush at a clean stop, gets the sum).
-- $1 minute, $2 queues, $3 tenant hashes (0: jobs without a tenant), $4 enqueued,
-- $5 completed, $6 failed, $7 retried (one element per key)
INSERT INTO jobs.throughput_minute AS t
       (minute, queue, tenant_hash, enqueued, completed, failed, retried)
SELECT $1, u.queue, u.tenant_hash, u.enqueued, u.completed, u.failed, u.retried
  FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
       AS u(queue, tenant_hash, enqueued, completed, failed, retried)
    ON CONFLICT (minute, queue, tenant_hash) DO UPDATE
   SET enqueued = t.enqueued + excluded.enqueued,
       completed = t.completed + excluded.completed,
       failed = t.failed + excluded.failed,
       retried = t.retried + excluded.retried
