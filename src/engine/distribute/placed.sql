-- Whether shard $1 has its placement in group $2 (this node), read after its lock was taken.
-- $1 shard id, $2 group
SELECT EXISTS (SELECT FROM pg_dist_placement p WHERE p.shardid = $1 AND p.groupid = $2) AS here
