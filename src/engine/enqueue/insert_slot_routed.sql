-- On a Citus cluster (docs/src/internals/citus.md): one slot's job, as insert_slots.sql makes
-- it, inserted into the distributed table so that Citus routes it to its queue's shard (Citus
-- cannot run insert_slots.sql, an INSERT ... SELECT with parameters, as a kept plan).
-- $1 queue, $2 kind, $3 payload, $4 the schedule's headers, $5 priority, $6 slot,
-- $7 max_attempts, $8 schedule name, $9 the slot in RFC 3339, UTC
-- Into the kinds index whatever the queue's claims_by_kind: on Citus the queue row is not read
-- here, and a job in the index that its queue does not ask for costs only its entry.
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, kind_indexed)
VALUES ($1, $2, $3,
        CASE WHEN $4::jsonb IS NULL
             THEN jsonb_build_object('pg_jobs.schedule', $8::text, 'pg_jobs.slot', $9::text)
             ELSE $4::jsonb || jsonb_build_object('pg_jobs.schedule', $8::text, 'pg_jobs.slot', $9::text)
        END,
        $5, $6, $7, true)
RETURNING id, queue, priority, run_at
