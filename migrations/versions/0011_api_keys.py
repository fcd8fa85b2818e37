"""API keys of the service (`memoria-pg serve`): stored hashed, bound to a tenant or admin.

    memoria.api_keys (key_id, tenant, admin, key_hash, description, created_at, revoked_at)

A key is the token `mpg_<key_id>_<secret>`: key_id is 12 random lower-case letters and digits (shown by
`memoria-pg keys list`, the handle to revoke it), secret 32 random bytes (256 bits, URL-safe base64).
Only sha256(token) is stored: the token is high-entropy random, so no salt or slow hash is needed (they
protect guessable passwords; nobody enumerates 2^256 secrets), and a hash lookup finds the key in one
index probe. A tenant key carries its tenant; an admin key has none (tenant NULL) and may act for any.

Tenant-keyed under the conventions of 0001: row-level security enabled and forced, the policy
tenant_isolation on current_setting('memoria.tenant'). memoria_app gets no privilege on the table: the
service authenticates through two SECURITY DEFINER functions, EXECUTE revoked from PUBLIC and granted to
memoria_app only:

    memoria.api_key_principal(key_hash bytea) -> (key_id text, tenant text, admin boolean)
        the live (not revoked) key with this hash, or no row
    memoria.api_keys_exist() -> boolean
        whether any live key exists (a server without keys acts for the default tenant on loopback only)

They run as memoria_key_admin, a NOLOGIN NOBYPASSRLS role created here and granted to the user that runs
the migrations (as 0003 does for memoria_graph_owner): it may read, insert and update the keys (the policy
key_admin lets it see every row, admin keys included) and nothing else. `memoria-pg keys create | list |
revoke` connect with the DSN and SET ROLE memoria_key_admin, so the service's pooled connections (running
as memoria_app) can check a key but never create, list or revoke one. Definer hygiene as in 0003:
search_path pinned to pg_catalog, pg_temp, every name schema-qualified, values are parameters.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

APP_ROLE = "memoria_app"
KEY_ADMIN = "memoria_key_admin"
FUNCTIONS = ("memoria.api_key_principal(bytea)", "memoria.api_keys_exist()")

TABLE = r"""
CREATE TABLE memoria.api_keys (
    key_id text PRIMARY KEY CHECK (key_id ~ '^[a-z0-9]{12}$'),
    tenant text,
    admin boolean NOT NULL DEFAULT false,
    key_hash bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CONSTRAINT api_keys_tenant_or_admin CHECK (admin = (tenant IS NULL))
);
COMMENT ON TABLE memoria.api_keys IS
    'API keys of memoria-pg serve: sha256 of the token mpg_<key_id>_<secret>; tenant NULL = admin key';
ALTER TABLE memoria.api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE memoria.api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memoria.api_keys
    USING (tenant = current_setting('memoria.tenant', true))
    WITH CHECK (tenant = current_setting('memoria.tenant', true));
"""

KEY_ADMIN_ROLE = r"""
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'memoria_key_admin') THEN
        CREATE ROLE memoria_key_admin NOLOGIN NOBYPASSRLS;
    END IF;
    -- The user that runs the migrations manages the keys (SET ROLE) and hands the functions over.
    IF NOT pg_catalog.pg_has_role(current_user, 'memoria_key_admin',
            CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END) THEN
        EXECUTE pg_catalog.format('GRANT memoria_key_admin TO %I', current_user);
    END IF;
END
$do$;
GRANT USAGE ON SCHEMA memoria TO memoria_key_admin;
GRANT SELECT, INSERT, UPDATE ON memoria.api_keys TO memoria_key_admin;
CREATE POLICY key_admin ON memoria.api_keys TO memoria_key_admin USING (true) WITH CHECK (true);
"""

PRINCIPAL = r"""
CREATE FUNCTION memoria.api_key_principal(key_hash bytea)
RETURNS TABLE (key_id text, tenant text, admin boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT k.key_id, k.tenant, k.admin FROM memoria.api_keys k
    WHERE k.key_hash OPERATOR(pg_catalog.=) $1 AND k.revoked_at IS NULL
$fn$;
"""

EXIST = r"""
CREATE FUNCTION memoria.api_keys_exist() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT EXISTS (SELECT 1 FROM memoria.api_keys k WHERE k.revoked_at IS NULL)
$fn$;
"""


def upgrade() -> None:
    op.execute(TABLE)
    op.execute(KEY_ADMIN_ROLE)
    op.execute(PRINCIPAL)
    op.execute(EXIST)
    # Grants first, owner last (ALTER ... OWNER hands the ACL over as it is); the new owner needs
    # CREATE on the schema for the change of owner only.
    op.execute(f"GRANT CREATE ON SCHEMA memoria TO {KEY_ADMIN}")
    for signature in FUNCTIONS:
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
        op.execute(f"ALTER FUNCTION {signature} OWNER TO {KEY_ADMIN}")
    op.execute(f"REVOKE CREATE ON SCHEMA memoria FROM {KEY_ADMIN}")


def downgrade() -> None:
    for signature in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    op.execute("DROP TABLE memoria.api_keys")
    # The role itself is kept, like memoria_app: other databases of the server may use it.
    op.execute(f"REVOKE ALL ON SCHEMA memoria FROM {KEY_ADMIN}")
