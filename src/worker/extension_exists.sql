-- Whether pg_jobs is installed in the database the worker serves.
SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_jobs') AS installed
