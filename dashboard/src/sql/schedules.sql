-- Every schedule with its next and last runs (jobs.schedules is readable by jobs_admin).
SELECT s.name, s.cron, s.timezone, s.queue, s.kind, s.enabled,
       to_char(s.next_slot, 'YYYY-MM-DD HH24:MI:SS TZ') AS next_slot,
       to_char(s.last_slot, 'YYYY-MM-DD HH24:MI:SS TZ') AS last_slot,
       s.last_job_id
  FROM jobs.schedules s
 ORDER BY s.name
