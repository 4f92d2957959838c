-- Spends $2 tokens of queue $1's bucket (whose row this transaction already locked).
-- $1 queue, $2 tokens
UPDATE jobs.rate_bucket SET tokens = tokens - $2 WHERE queue = $1
