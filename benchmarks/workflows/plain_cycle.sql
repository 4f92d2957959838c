-- One job of a queue that uses no workflow feature, as pgbench runs it (each statement its own
-- transaction): enqueued, claimed, completed. plain_cost.sh counts the WAL it writes.
SELECT jobs_enqueue('plain', '{"n": 1}');
SELECT jobs_complete(id, lease) FROM jobs_claim('plain');
