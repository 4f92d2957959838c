-- Takes the effects recorded by the prepared transaction $1, which COMMIT PREPARED has just
-- made visible (runtime::effects). A gid is unique among prepared transactions; a row of an
-- earlier transaction of the same gid is left only by a crash between its commit and this
-- statement, and is taken with it.
-- $1 gid
DELETE FROM jobs.prepared_effects
 WHERE gid OPERATOR(pg_catalog.=) $1
RETURNING effects::pg_catalog.text AS effects
