-- The rate limit without shared memory: brings queue $1's token bucket up to $4 (gaining $2
-- tokens a second, holding at most $3) and returns the tokens it holds. The row stays locked
-- until the claim's transaction ends, so claims of the queue take tokens one after another.
-- $1 queue, $2 rate, $3 burst, $4 now
INSERT INTO jobs.rate_bucket AS b (queue, tokens, at)
VALUES ($1, $3, $4)
ON CONFLICT (queue) DO UPDATE
   SET tokens = least($3, b.tokens + $2 * extract(epoch FROM $4 - b.at)),
       at     = $4
RETURNING b.tokens
