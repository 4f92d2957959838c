-- Creates a queue with default settings unless it exists; returns a row when it created it.
-- $1 queue
INSERT INTO jobs.queue (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING true AS created
