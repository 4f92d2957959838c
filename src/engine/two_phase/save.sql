-- Records the effects of the transaction being prepared under its gid (runtime::effects).
-- $1 gid, $2 the record (JSON)
INSERT INTO jobs.prepared_effects (gid, effects) VALUES ($1, $2::pg_catalog.jsonb)
