"""API keys: `memoria-pg keys create | list | revoke`, what the database stores (a hash, never the token),
what the app role may do with the keys (check one, nothing else), and migration 0011 both ways."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from memoria_pg import ServerError
from memoria_pg.cli import cli
from memoria_pg.db import migrate
from memoria_pg.service import keys

MIGRATION = Path(__file__).resolve().parents[1] / "migrations" / "versions" / "0011_api_keys.py"


def invoke(dsn: str, *args: str):
    return CliRunner().invoke(cli, ["--dsn", dsn, *args], env={"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None})


def test_create_prints_the_token_once_and_stores_its_hash(dsn):
    result = invoke(dsn, "keys", "create", "--tenant", "alice", "--description", "alice's agent")
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert keys.well_formed(token) and "\n" not in token
    key_id = token.split("_")[1]
    assert f"key {key_id} for tenant 'alice'" in result.stderr
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT tenant, admin, key_hash, description, revoked_at FROM memoria.api_keys WHERE key_id = %s", (key_id,)
        ).fetchone()
        dump = conn.execute("SELECT string_agg(t::text, ' ') FROM memoria.api_keys t").fetchone()[0]
    assert row == ("alice", False, hashlib.sha256(token.encode()).digest(), "alice's agent", None)
    assert token.split("_", 2)[2] not in dump  # the secret is nowhere in the table


def test_list_shows_ids_and_tenants_never_tokens(dsn):
    tenant_token = invoke(dsn, "keys", "create", "--tenant", "bob").stdout.strip()
    admin_token = invoke(dsn, "keys", "create", "--admin").stdout.strip()
    listed = invoke(dsn, "keys", "list")
    assert listed.exit_code == 0, listed.output
    for token in (tenant_token, admin_token):
        assert token.split("_")[1] in listed.output
        assert token.split("_", 2)[2] not in listed.output
    assert "bob" in listed.output and "*admin*" in listed.output
    as_json = invoke(dsn, "keys", "list", "--json")
    assert '"tenant": "bob"' in as_json.output


def test_revoke_then_the_key_no_longer_authenticates(system, dsn):
    token = invoke(dsn, "keys", "create", "--tenant", "carol").stdout.strip()
    key_id = token.split("_")[1]
    assert keys.lookup(system, keys.digest(token)) == keys.Principal(key_id=key_id, tenant="carol", admin=False)
    revoked = invoke(dsn, "keys", "revoke", key_id)
    assert revoked.exit_code == 0 and f"revoked {key_id}" in revoked.output
    assert keys.lookup(system, keys.digest(token)) is None
    assert key_id not in invoke(dsn, "keys", "list").output
    assert key_id in invoke(dsn, "keys", "list", "--all").output
    again = invoke(dsn, "keys", "revoke", key_id)
    assert again.exit_code != 0 and "no live key" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("keys", "create"), "either bound to a tenant"),
        (("keys", "create", "--tenant", "t", "--admin"), "either bound to a tenant"),
        (("keys", "create", "--tenant", ""), "tenant"),
        (("keys", "revoke", "NOT-AN-ID"), "not a key id"),
    ],
)
def test_key_commands_explain_their_errors(dsn, args, message):
    result = invoke(dsn, *args)
    assert result.exit_code != 0 and message in result.output


def test_the_app_role_can_check_a_key_and_nothing_more(system, dsn):
    token = keys.create_key(dsn, tenant="dave")[1]
    admin_token = keys.create_key(dsn, tenant=None, admin=True)[1]
    assert keys.lookup(system, keys.digest(admin_token)).admin is True
    assert keys.keys_exist(system) is True and keys.any_key(dsn) is True
    with system.db.connection() as conn:  # a pooled connection: memoria_app
        for statement in (
            "SELECT * FROM memoria.api_keys",
            "INSERT INTO memoria.api_keys (key_id, tenant, key_hash) VALUES ('aaaaaaaaaaaa', 'x', '\\x00')",
            "UPDATE memoria.api_keys SET revoked_at = NULL",
            "DELETE FROM memoria.api_keys",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        with conn.transaction():  # the tenant set changes nothing: still no access to the table
            conn.execute("SELECT set_config('memoria.tenant', 'dave', true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT key_hash FROM memoria.api_keys")
    assert keys.lookup(system, keys.digest(token)).tenant == "dave"
    assert keys.lookup(system, hashlib.sha256(b"anything else").digest()) is None


def test_no_keys_means_none_exist(system, dsn):
    assert keys.keys_exist(system) is False and keys.any_key(dsn) is False
    assert keys.list_keys(dsn) == []


def _down_revision() -> str:
    spec = importlib.util.spec_from_file_location("migration_0011", MIGRATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.down_revision


def test_migration_0011_down_and_up(dsn):
    keys.create_key(dsn, tenant="erin")
    migrate.downgrade(dsn, _down_revision())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('memoria.api_keys')").fetchone()[0] is None
        assert conn.execute("SELECT to_regproc('memoria.api_keys_exist')").fetchone()[0] is None
    migrate.upgrade(dsn)
    assert keys.list_keys(dsn) == []
    assert keys.create_key(dsn, tenant="erin")[0].tenant == "erin"


def test_a_connection_lost_between_the_pool_check_and_the_key_check_is_a_server_error(system, dsn, monkeypatch):
    """pg_terminate_backend returns before the backend's FATAL reaches the client, so a pooled
    connection can pass the pool's check and die on its first statement: the key check then raises
    ServerError (the service's 503), not the driver's AdminShutdown (a 500). The race is made certain
    here by skipping the pool's check."""
    token = invoke(dsn, "keys", "create", "--tenant", "dora").stdout.strip()
    assert keys.lookup(system, keys.digest(token)) is not None
    monkeypatch.setattr(system.db.pool, "_check", None)
    for check in (lambda: keys.lookup(system, keys.digest(token)), lambda: keys.keys_exist(system)):
        system.db.pool.wait()  # the pool's connections, refilled after the previous round
        with psycopg.connect(dsn, autocommit=True) as admin:
            pids = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            ).fetchall()
            assert pids  # the pool's
            for (pid,) in pids:  # with a timeout, pg_terminate_backend returns once the backend has exited
                assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)
        with pytest.raises(ServerError, match="the API key check failed in PostgreSQL .AdminShutdown"):
            check()
