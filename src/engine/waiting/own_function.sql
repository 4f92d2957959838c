-- The oid of this library's C function $1 (its symbol: jobs_claim_wrapper, jobs_wait_wrapper)
-- in this database, so a waiting call can recognise a statement that is nothing but a call of
-- it.
-- $1 symbol
SELECT p.oid AS function
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE l.lanname = 'c'
   AND p.prosrc = $1
 LIMIT 1
