-- Who the dashboard is in the database: its role, whether it has jobs_admin's privileges (the
-- action controls show only then; the database refuses a forged action anyway), its tenants,
-- and the database.
SELECT current_user::text AS role,
       pg_catalog.pg_has_role(current_user, 'jobs_admin', 'USAGE') AS admin,
       nullif(current_setting('pg_jobs.tenant', true), '') AS tenant,
       current_database()::text AS database
