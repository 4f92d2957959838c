-- Applies the settings given (NULL keeps the current one) and returns the queue.
-- rate_limit 0 and rate_burst 0 and dead_letter '' clear those settings (clearing the rate
-- limit clears its burst too). Returns no row when the merged backoff_max would be below
-- backoff_base.
-- $1 queue, $2 lease, $3 max_attempts, $4 backoff_base, $5 backoff_max, $6 jitter,
-- $7 retention, $8 rate_limit, $9 group_concurrency, $10 dead_letter, $11 rate_burst,
-- $12 claims_by_kind
UPDATE jobs.queue AS q
   SET lease             = coalesce($2, q.lease),
       max_attempts      = coalesce($3, q.max_attempts),
       backoff_base      = coalesce($4, q.backoff_base),
       backoff_max       = coalesce($5, q.backoff_max),
       jitter            = coalesce($6, q.jitter),
       retention         = coalesce($7, q.retention),
       rate_limit        = CASE WHEN $8 = 0 THEN NULL ELSE coalesce($8, q.rate_limit) END,
       group_concurrency = coalesce($9, q.group_concurrency),
       dead_letter       = CASE WHEN $10 = '' THEN NULL ELSE coalesce($10, q.dead_letter) END,
       rate_burst        = CASE WHEN $11 = 0 OR $8 = 0 THEN NULL ELSE coalesce($11, q.rate_burst) END,
       claims_by_kind    = coalesce($12, q.claims_by_kind),
       updated_at        = now()
 WHERE q.name = $1
   AND coalesce($5, q.backoff_max) >= coalesce($4, q.backoff_base)
RETURNING q AS queue_row
