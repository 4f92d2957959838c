-- The version of pg_jobs installed in the database the worker serves (no row: not installed).
SELECT extversion AS installed FROM pg_catalog.pg_extension WHERE extname = 'pg_jobs'
