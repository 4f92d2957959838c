-- What jobs_distribute() checks once Citus is installed: this node's group (0: the
-- coordinator), whether jobs.job is distributed already, and whether any job exists.
SELECT (SELECT l.groupid FROM pg_dist_local_group l) AS local_group,
       EXISTS (SELECT FROM pg_dist_partition p WHERE p.logicalrelid = 'jobs.job'::regclass) AS distributed,
       EXISTS (SELECT FROM jobs.job) AS has_jobs
