-- Creates schedule $1, or replaces its definition. A replaced schedule keeps its progress
-- (its first unhandled slot) while its expression, time zone and enabled state stay the same,
-- so replacing a payload neither skips a due slot nor runs one twice; otherwise it starts from
-- $12, the first slot of the new definition after now (which is also its due_floor, the
-- lower bound the worker's runs find due schedules by). Takes the row's lock, so it waits for
-- a run that is enqueueing this schedule's slots.
-- $1 name, $2 cron, $3 timezone, $4 queue, $5 payload, $6 kind, $7 headers, $8 priority,
-- $9 max_attempts, $10 catch_up, $11 enabled, $12 next_slot
INSERT INTO jobs.schedule AS s
       (name, cron, timezone, queue, payload, kind, headers, priority, max_attempts, catch_up,
        enabled, next_slot, due_floor)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)
ON CONFLICT (name) DO UPDATE
   SET cron         = EXCLUDED.cron,
       timezone     = EXCLUDED.timezone,
       queue        = EXCLUDED.queue,
       payload      = EXCLUDED.payload,
       kind         = EXCLUDED.kind,
       headers      = EXCLUDED.headers,
       priority     = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts,
       catch_up     = EXCLUDED.catch_up,
       enabled      = EXCLUDED.enabled,
       next_slot    = CASE
                        WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                             AND s.enabled AND EXCLUDED.enabled
                        THEN s.next_slot
                        ELSE EXCLUDED.next_slot
                      END,
       due_floor    = CASE
                        WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                             AND s.enabled AND EXCLUDED.enabled
                        THEN s.due_floor
                        ELSE EXCLUDED.due_floor
                      END,
       updated_at   = now()
RETURNING s.name
