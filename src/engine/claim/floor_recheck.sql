-- Whether job $5 of queue $1 is still a due queued job before position ($2, $3, $4) in claim
-- order, asked under the job's lock with the latest snapshot: the claim that held the lock
-- when the floor check's snapshot was taken may have taken the job since.
-- $1 queue, $2 floor priority, $3 floor run_at, $4 floor id, $5 job id, $6 now
SELECT EXISTS (
    SELECT FROM jobs.job j
     WHERE j.id = $5
       AND j.queue = $1
       AND j.state = 'queued' AND NOT j.group_wait
       AND (j.priority, j.run_at, j.id) < ($2, $3, $4)
       AND j.run_at <= $6
) AS below
