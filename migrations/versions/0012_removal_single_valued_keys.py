"""Removal re-supersedes only single-valued facts, and the lifecycle functions keep their plans.

Migration 0010's memoria.remove_derived re-ran memoria.supersede for every (subject, attribute) key of
the facts it removed, single-valued or not: deleting one of three "Alice's hobby is ..." memories ended
the older of the two that remain (valid_to, superseded_by), which neither ingestion nor a fresh
database does (hobbies are not single-valued). This revision adds

    memoria.remove_derived(memory_ids bigint[], forget_usage boolean, single_exact text[],
                           single_prefixes text[]) -> bigint[]
        0010's function, re-superseding only the keys whose attribute is one of `single_exact` or
        matches one of the LIKE patterns `single_prefixes` (the library's
        Config.single_valued_attributes, as sql/ingest/supersede.sql receives them), and not calling
        memoria.supersede at all when there is none

and turns 0010's two-argument function into a call of it with the library's default list as of 0010
(what its backfill used), so an older library in a rolling deploy is fixed too.

Both, and memoria.supersede, run their statements on generic plans (plan_cache_mode): they are called
once per delete or update, each statement looks rows up by tenant and id arrays, and re-planning some
twenty statements over the type partitions on every call cost ~4 ms of a 5 ms removal (measured on a
100k database; results/lifecycle/). The generic plans probe each partition's index with the array,
which is what the custom plans did.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

APP_ROLE = "memoria_app"
OLD_SIGNATURE = "CREATE FUNCTION memoria.remove_derived(memory_ids bigint[], forget_usage boolean) RETURNS bigint[]"
NEW_SIGNATURE = (
    "CREATE FUNCTION memoria.remove_derived(memory_ids bigint[], forget_usage boolean, single_exact text[],\n"
    "                                       single_prefixes text[]) RETURNS bigint[]"
)
OLD_KEYS = "WHERE a.tenant = v_tenant AND a.memory_id = ANY (ids)) a;"
NEW_KEYS = (
    "WHERE a.tenant = v_tenant AND a.memory_id = ANY (ids)\n"
    "            AND (a.attribute = ANY (single_exact) OR a.attribute LIKE ANY (single_prefixes))) a;"
)
OLD_SUPERSEDE = "    PERFORM memoria.supersede(key_subjects, key_attributes);"
NEW_SUPERSEDE = (
    "    IF pg_catalog.cardinality(key_subjects) > 0 THEN\n"
    "        PERFORM memoria.supersede(key_subjects, key_attributes);\n"
    "    END IF;"
)
# 0010's default single-valued attributes (its backfill's list), written out: a migration stays what it was.
DEFAULT_EXACT = (
    "location", "employer", "occupation", "age", "spouse", "partner", "boss", "manager", "address",
    "phone number", "email",
)  # fmt: skip
DEFAULT_PREFIXES = ("favourite %",)
TWO_ARGUMENTS = """
CREATE OR REPLACE FUNCTION memoria.remove_derived(memory_ids bigint[], forget_usage boolean) RETURNS bigint[]
LANGUAGE sql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
RETURN memoria.remove_derived(memory_ids, forget_usage, ARRAY[{exact}]::text[], ARRAY[{prefixes}]::text[])
"""
SIGNATURES = (
    "memoria.remove_derived(bigint[], boolean, text[], text[])",
    "memoria.remove_derived(bigint[], boolean)",
    "memoria.supersede(text[], text[])",
)


def _migration_0010() -> ModuleType:
    path = Path(__file__).with_name("0010_memory_lifecycle.py")
    spec = importlib.util.spec_from_file_location("memoria_migration_0010", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _four_arguments() -> str:
    """0010's remove_derived with the key filter: each replaced fragment must be there exactly once."""
    text = _migration_0010().REMOVE_DERIVED
    for old, new in ((OLD_SIGNATURE, NEW_SIGNATURE), (OLD_KEYS, NEW_KEYS), (OLD_SUPERSEDE, NEW_SUPERSEDE)):
        assert text.count(old) == 1, f"0010's remove_derived changed: {old!r}"
        text = text.replace(old, new)
    return text


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def upgrade() -> None:
    op.execute(_four_arguments())
    op.execute(TWO_ARGUMENTS.format(exact=_quoted(DEFAULT_EXACT), prefixes=_quoted(DEFAULT_PREFIXES)))
    for signature in SIGNATURES:
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
    for signature in (SIGNATURES[0], SIGNATURES[2]):
        op.execute(f"ALTER FUNCTION {signature} SET plan_cache_mode = force_generic_plan")


def downgrade() -> None:
    op.execute("ALTER FUNCTION memoria.supersede(text[], text[]) RESET plan_cache_mode")
    op.execute("DROP FUNCTION memoria.remove_derived(bigint[], boolean)")
    op.execute(_migration_0010().REMOVE_DERIVED)
    op.execute("REVOKE ALL ON FUNCTION memoria.remove_derived(bigint[], boolean) FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION memoria.remove_derived(bigint[], boolean) TO {APP_ROLE}")
    op.execute("DROP FUNCTION memoria.remove_derived(bigint[], boolean, text[], text[])")
