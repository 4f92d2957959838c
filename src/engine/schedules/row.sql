-- Schedule $1 as jobs.schedules shows it.
SELECT v AS schedule_row FROM jobs.schedules v WHERE v.name = $1
