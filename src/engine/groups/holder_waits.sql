-- Whether the transaction that holds a group's lock (the extension's advisory lock: $1 classid,
-- $2 objid, $3 objsubid, in this database) waits for this one, directly or behind others that
-- do: a claim taking a job whose row this transaction holds (a late settle of the reclaimed
-- job). Waiting for that group's lock would then be a deadlock. pg_locks and pg_blocking_pids
-- read the lock manager, not tables; UNION ends the walk on a cycle.
-- $1 classid, $2 objid, $3 objsubid
WITH RECURSIVE holders AS (
    SELECT l.pid
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
       AND l.classid = pg_catalog.oid($1::bigint) AND l.objid = pg_catalog.oid($2::bigint)
       AND l.objsubid = $3::smallint
       AND l.pid IS NOT NULL
), blockers(pid) AS (
    SELECT b.pid FROM holders h, pg_catalog.unnest(pg_catalog.pg_blocking_pids(h.pid)) AS b(pid)
    UNION
    SELECT b.pid FROM blockers k, pg_catalog.unnest(pg_catalog.pg_blocking_pids(k.pid)) AS b(pid)
)
SELECT EXISTS (
    SELECT FROM blockers WHERE blockers.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
) AS waits
