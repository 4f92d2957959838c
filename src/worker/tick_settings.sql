-- A tick must not queue behind DDL (and make every claim queue behind it): it gives up and
-- retries at the next tick instead. Set for the tick's transaction only.
SELECT pg_catalog.set_config('lock_timeout', '1s', true) AS lock_timeout,
       pg_catalog.set_config('statement_timeout', '60s', true) AS statement_timeout
