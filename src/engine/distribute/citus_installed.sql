-- Whether Citus is installed in this database.
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS installed
