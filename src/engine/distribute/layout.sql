-- The shards of jobs.job in hash order, each with its colocated shard of jobs.rate_bucket;
-- the one shard of each reference table (every node has a copy); this node's group; and the
-- colocation group of jobs.job.
SELECT s.shardid AS job_shard,
       s.shardminvalue::int4 AS min_hash,
       s.shardmaxvalue::int4 AS max_hash,
       r.shardid AS rate_shard,
       (SELECT q.shardid FROM pg_dist_shard q WHERE q.logicalrelid = 'jobs.queue'::regclass) AS queue_shard,
       (SELECT g.shardid FROM pg_dist_shard g WHERE g.logicalrelid = 'jobs.tenant_grant'::regclass) AS grant_shard,
       (SELECT l.groupid FROM pg_dist_local_group l) AS local_group,
       (SELECT p.colocationid FROM pg_dist_partition p WHERE p.logicalrelid = 'jobs.job'::regclass) AS colocation
  FROM pg_dist_shard s
  JOIN pg_dist_shard r ON r.logicalrelid = 'jobs.rate_bucket'::regclass
                      AND r.shardminvalue = s.shardminvalue
 WHERE s.logicalrelid = 'jobs.job'::regclass
 ORDER BY s.shardminvalue::int4
