-- The shards of jobs.job placed in group $1 (this node).
-- $1 group
SELECT p.shardid AS job_shard
  FROM pg_dist_placement p
  JOIN pg_dist_shard s ON s.shardid = p.shardid
 WHERE s.logicalrelid = 'jobs.job'::regclass AND p.groupid = $1
 ORDER BY p.shardid
