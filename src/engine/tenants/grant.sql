-- Lets role $1 act for tenant $2; answers whether the grant is new.
-- $1 role name, $2 tenant
INSERT INTO jobs.tenant_grant (role_name, tenant) VALUES ($1, $2)
ON CONFLICT (role_name, tenant) DO NOTHING
RETURNING true AS granted
