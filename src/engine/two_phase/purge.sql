-- Deletes the records of prepared transactions that ended without COMMIT PREPARED taking them:
-- only a crash between a commit and its taking leaves one. A record of a transaction still
-- prepared stays; one younger than a minute too, as its COMMIT PREPARED may be taking it now.
-- $1 now
DELETE FROM jobs.prepared_effects p
 WHERE p.prepared_at OPERATOR(pg_catalog.<) ($1 OPERATOR(pg_catalog.-) '1 minute'::pg_catalog.interval)
   AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_prepared_xacts x
         WHERE x.gid OPERATOR(pg_catalog.=) p.gid
           AND x.database OPERATOR(pg_catalog.=) pg_catalog.current_database())
