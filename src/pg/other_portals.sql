-- Portals of this session other than the running statement's: cursors and named protocol
-- portals, any of which may hold a snapshot older than a waiting claim's (pg::snapshot).
SELECT pg_catalog.count(*)
  FROM pg_catalog.pg_cursor() AS c
 WHERE c.name OPERATOR(pg_catalog.<>) $1
