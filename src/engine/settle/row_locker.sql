-- The transaction that last locked or changed job $1's row (its xmax), to tell whether this
-- transaction holds the row's lock.
-- $1 id
SELECT j.xmax::text AS xmax FROM jobs.job j WHERE j.id = $1
