-- Extends the lease of a job held under (id, lease) (Rule 4) in state $7, by $3 or the claim's lease
-- length, and stores progress when given. A job reclaimed but not claimed again (queued under
-- this lease) is still this holder's: it becomes running again rather than being run twice,
-- unless it is in a group. The group's slots and order are decided by claims under the group's
-- lock: the reclaim freed the slot and a claim may have filled it since, so running again could
-- run the group over its concurrency; the heartbeat answers `lost` and the job waits for a claim.
-- $1 id, $2 lease, $3 extend, $4 progress, $5 now, $6 tenants (the caller's scope), $7 state
UPDATE jobs.job j
   SET state        = 'running',
       lease_until  = $5 + coalesce($3, lease_duration),
       heartbeat_at = $5,
       progress     = coalesce($4, progress)
 WHERE j.id = $1 AND j.lease = $2 AND j.state = $7::jobs.state
   AND ($7::jobs.state = 'running' OR j.group_key IS NULL)
   AND ($6::text[] IS NULL OR (j.tenant IS NULL AND cardinality($6::text[]) = 0) OR j.tenant = ANY ($6::text[]))
RETURNING true AS renewed
