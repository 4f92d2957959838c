-- Takes Citus's shared lock on the placement metadata of shard $1 (and its colocated shards),
-- for the transaction: the lock every write through Citus takes, and that a shard move takes
-- exclusively before it switches the shard over to its new node.
-- $1 shard id
SELECT true AS locked FROM lock_shard_metadata(5, ARRAY[$1::int8])
