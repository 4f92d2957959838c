-- Drops the minutes of the throughput history before $1 (24 hours ago).
-- $1 before
DELETE FROM jobs.throughput_minute WHERE minute < $1
