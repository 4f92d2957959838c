-- The dead-letter chain that would start at queue $2 if queue $1 sent its failed jobs there:
-- $2, the queue $2 dead-letters to, and so on, until the chain ends or comes back to $1 (a
-- cycle: every failure would be copied round it forever). Returns the chain in order and
-- whether it reaches $1. The caller holds the dead-letter lock, so no concurrent change makes
-- a cycle this statement cannot see.
-- $1 queue, $2 dead_letter
WITH RECURSIVE chain (name, depth) AS (
    SELECT $2::text COLLATE pg_catalog."C", 1
    UNION ALL
    SELECT q.dead_letter, c.depth + 1
      FROM chain c
      JOIN jobs.queue q ON q.name = c.name
     WHERE q.dead_letter IS NOT NULL
       AND c.name <> $1
       AND c.depth < 100000
)
SELECT string_agg(name, ' -> ' ORDER BY depth) AS chain,
       coalesce(bool_or(name = $1), false) AS cycle
  FROM chain
