-- Puts every unfinished job of queue $1 into the kinds index (kind_indexed), as its
-- claims_by_kind is turned on: from then on claims of some kinds read that index alone, and a
-- job left out would be invisible to them. Finished jobs may come back only through a retry,
-- which is a new enqueue for this purpose (engine::operate sets kind_indexed again). No index
-- leads to a queue's unfinished jobs of every state, so this reads the table once; it runs
-- once per change of the setting. $1 queue
UPDATE jobs.job j
   SET kind_indexed = true
 WHERE j.queue = $1 AND NOT j.kind_indexed
   AND j.state <> ALL ('{succeeded,failed,cancelled}'::jobs.state[])
