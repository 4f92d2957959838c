-- Job $1 waits for signal $3 of tenant $2 ('' for none) until $4 + $5.
-- $1 id, $2 tenant, $3 signal, $4 now, $5 timeout
INSERT INTO jobs.job_await (job, tenant, signal, deadline)
VALUES ($1, $2, $3, $4 + $5)
