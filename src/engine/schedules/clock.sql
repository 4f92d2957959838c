-- When a background worker last ran the schedules of this database, and whether it stopped
-- cleanly then.
SELECT c.seen_at, c.stopped FROM jobs.schedule_clock c
