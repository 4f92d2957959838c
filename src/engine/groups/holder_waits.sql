-- Whether the transaction that holds a group's lock (the extension's advisory lock: $1 classid,
-- $2 objid, $3 objsubid, in this database) waits for this one: a claim taking a job whose row
-- this transaction holds (a late settle of the reclaimed job). Waiting for that group's lock
-- would then be a deadlock. pg_locks and pg_blocking_pids read the lock manager, not tables.
-- $1 classid, $2 objid, $3 objsubid
SELECT EXISTS (
    SELECT FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
       AND l.classid = pg_catalog.oid($1::bigint) AND l.objid = pg_catalog.oid($2::bigint)
       AND l.objsubid = $3::smallint
       AND pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) ANY (pg_catalog.pg_blocking_pids(l.pid))
) AS waits
