-- Deletes schedule $1 (after a run enqueueing its slots commits); answers whether it existed.
DELETE FROM jobs.schedule WHERE name = $1 RETURNING name
