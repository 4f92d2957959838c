-- Inserts the jobs of schedules' slots, one per (schedule row, slot) pair in input order: each
-- takes its schedule's queue, kind, payload, priority and attempts, and its schedule's headers
-- plus the schedule's name and the slot ($3: the slot in RFC 3339, UTC). Returns their ids in
-- input order with each job's queue and position. The caller holds the schedule rows (FOR
-- UPDATE), so their ctids stay put, and each queue's shared lock; the schedules' foreign key
-- keeps their queues.
-- $1 schedule row ctids, $2 slots, $3 the slots as text
-- kind_indexed: the queue's claims_by_kind, read after the caller took the queue's lock, or
-- true when this transaction's snapshot may be older than the setting
-- (engine::queues::create_or_update).
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, kind_indexed)
SELECT q.name, s.kind, s.payload,
       CASE WHEN s.headers IS NULL
            THEN jsonb_build_object('pg_jobs.schedule', s.name, 'pg_jobs.slot', f.slot_text)
            ELSE s.headers || jsonb_build_object('pg_jobs.schedule', s.name, 'pg_jobs.slot', f.slot_text)
       END,
       s.priority, f.slot, coalesce(s.max_attempts, q.max_attempts),
       q.claims_by_kind OR current_setting('transaction_isolation') <> 'read committed'
  FROM unnest($1::text[]::tid[], $2::timestamptz[], $3::text[]) WITH ORDINALITY AS f(tid, slot, slot_text, ord)
  JOIN jobs.schedule s ON s.ctid = f.tid
  JOIN jobs.queue q ON q.name = s.queue
 ORDER BY f.ord
RETURNING id, queue, priority, run_at
