-- Creates a queue with default settings unless it exists. $1 queue
INSERT INTO jobs.queue (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
