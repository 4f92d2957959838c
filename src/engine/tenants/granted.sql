-- The tenants role $1 may act for: those granted to it or to any role whose privileges it has
-- (pg_has_role ... 'USAGE', as privileges are inherited). Grants to roles that no longer exist
-- are ignored.
-- $1 role
SELECT DISTINCT g.tenant
  FROM jobs.tenant_grant g
  JOIN pg_catalog.pg_roles r ON r.rolname = g.role_name
 WHERE pg_catalog.pg_has_role($1, r.oid, 'USAGE')
 ORDER BY g.tenant
