-- The client workers (jobs.workers): by worker name, what they run and wait for, their
-- backends, last claim and heartbeat, and the leases about to run out.
SELECT w.worker, w.queues, w.pids, w.waiting, w.running, w.running_jobs, w.leases_expiring,
       extract(epoch FROM now() - w.waiting_since)::float8 AS waiting_for,
       extract(epoch FROM now() - w.last_claim)::float8 AS last_claim_age,
       extract(epoch FROM now() - w.last_heartbeat)::float8 AS last_heartbeat_age,
       extract(epoch FROM w.next_lease_end - now())::float8 AS next_lease_in,
       extract(epoch FROM now() - w.last_seen)::float8 AS last_seen_age
  FROM jobs.workers w
 ORDER BY w.worker
