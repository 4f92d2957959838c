-- The oid of jobs_claim in this database (the C function of this library's claim), so a
-- waiting claim can recognise a statement that is nothing but a call of it.
SELECT p.oid AS function
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE l.lanname = 'c'
   AND p.prosrc = 'jobs_claim_wrapper'
 LIMIT 1
