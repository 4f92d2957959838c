-- The background workers' health, one row per database they serve.
SELECT w.database, w.pid, w.serving, w.ticks, w.reclaimed, w.purged, w.scheduled, w.last_error,
       to_char(w.started_at, 'YYYY-MM-DD HH24:MI:SS') AS started_at,
       extract(epoch FROM clock_timestamp() - w.last_tick)::float8 AS last_tick_age,
       to_char(w.last_error_at, 'YYYY-MM-DD HH24:MI:SS') AS last_error_at
  FROM jobs_worker_status() w
 ORDER BY w.database
