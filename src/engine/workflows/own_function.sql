-- The oid of jobs_wait in this database (the C function of this library's wait), so a waiting
-- call can recognise a statement that is nothing but a call of it.
SELECT p.oid AS function
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE l.lanname = 'c'
   AND p.prosrc = 'jobs_wait_wrapper'
 LIMIT 1
