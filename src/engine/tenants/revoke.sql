-- Takes tenant $2 from role $1; answers whether there was such a grant.
-- $1 role name, $2 tenant
DELETE FROM jobs.tenant_grant WHERE role_name = $1 AND tenant = $2
RETURNING true AS revoked
