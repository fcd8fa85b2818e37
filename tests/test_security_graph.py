"""The AGE graph is closed to the library's role: memoria_app has no privilege on memoria_graph (nor on
ag_catalog) and reaches the graph only through the SECURITY DEFINER functions of migration 0003, which
act for the transaction's tenant and nothing else (SECURITY.md, "The AGE graph")."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg.db import APP_ROLE, graph_age
from memoria_pg.system import MemorySystem

OWNER = "memoria_graph_owner"
FUNCTIONS = {
    "graph_walk": "SELECT * FROM memoria.graph_walk(%s::text[], 3, NULL, 100, 10, 100)",
    "graph_sync": "SELECT memoria.graph_sync(%s::bigint[])",
    "graph_rebuild": "SELECT * FROM memoria.graph_rebuild()",
    "graph_counts": "SELECT * FROM memoria.graph_counts()",
    "graph_forget": "SELECT memoria.graph_forget(%s::bigint[], %s::bigint[])",
    "graph_erase": "SELECT memoria.graph_erase()",
}
ARGS = {"graph_walk": (["alice"],), "graph_sync": ([1, 2],), "graph_rebuild": (), "graph_counts": (),
        "graph_forget": ([1, 2], [1]), "graph_erase": ()}  # fmt: skip
NOT_SET = "memoria.tenant is not set"


@pytest.fixture
def graph_system(system: MemorySystem, server_has_age: bool) -> MemorySystem:
    if not server_has_age:
        pytest.skip("the server has no Apache AGE")
    assert system.graph_backend == "age"
    return system


@pytest.fixture
def two_tenants(graph_system: MemorySystem) -> MemorySystem:
    graph_system.store_many(
        [
            {"content": "Alice met Bob in Paris.", "tenant": "A", "entities": ["Alice", "Bob", "Paris"]},
            {"content": "Bob and Carol run Acme.", "tenant": "A", "entities": ["Bob", "Carol", "Acme"]},
            {"content": "Alice met Bob in Rome.", "tenant": "B", "entities": ["Alice", "Bob", "Rome"]},
            {"content": "Zed runs Globex with Bob.", "tenant": "B", "entities": ["Zed", "Globex", "Bob"]},
        ]
    )
    return graph_system


def admin(system: MemorySystem) -> psycopg.Connection:
    return psycopg.connect(system.dsn, autocommit=True)


def ids_of(system: MemorySystem, tenant: str) -> set[int]:
    with admin(system) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM memoria.memories WHERE tenant = %s", (tenant,))}


def mirrored(system: MemorySystem, memory_ids) -> dict[int, str]:
    """memory_id -> tenant of the Memory vertices of `memory_ids`, read as the admin."""
    with admin(system) as conn:
        return dict(
            conn.execute(
                "SELECT ag_catalog.agtype_object_field_text(properties, 'memory_id')::bigint, "
                "ag_catalog.agtype_object_field_text(properties, 'tenant') FROM memoria_graph.\"Memory\" "
                "WHERE ag_catalog.agtype_object_field_text(properties, 'memory_id')::bigint = ANY(%s)",
                (list(memory_ids),),
            ).fetchall()
        )


def truth(system: MemorySystem, tenant: str) -> dict[str, int]:
    """What the tenant's part of the graph mirrors: its rows of the plain tables, counted per label."""
    with system.db.transaction(tenant) as conn:
        return {
            label: conn.execute(f"SELECT count(*) FROM memoria.{table}").fetchone()[0]
            for label, table in (
                ("Memory", "memories"),
                ("Entity", "entities"),
                ("MENTIONS", "memory_entities"),
                ("RELATED", "entity_edges"),
            )
        }


def graph_relations(system: MemorySystem) -> list[tuple[str, str]]:
    """(name, relkind) of every table and sequence of the graph's schema, the AGE parents included."""
    with admin(system) as conn:
        return conn.execute(
            "SELECT format('%I.%I', 'memoria_graph', relname), relkind::text FROM pg_class "
            "WHERE relnamespace = 'memoria_graph'::regnamespace AND relkind IN ('r', 'S') "
            "ORDER BY 1"
        ).fetchall()


# -- no privilege on the graph -----------------------------------------------------------------------


def test_the_app_role_holds_no_privilege_on_the_graph_or_ag_catalog(two_tenants: MemorySystem):
    relations = graph_relations(two_tenants)
    assert {'memoria_graph."Entity"', 'memoria_graph."RELATED"', "memoria_graph._ag_label_vertex"} <= {
        name for name, _ in relations
    }
    with admin(two_tenants) as conn:
        for schema in ("memoria_graph", "ag_catalog"):
            assert not conn.execute(
                "SELECT has_schema_privilege(%s, %s, 'USAGE, CREATE')", (APP_ROLE, schema)
            ).fetchone()[0], schema
        for name, kind in relations:
            check = (
                "has_table_privilege(%s, %s, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')"
                if kind == "r"
                else "has_sequence_privilege(%s, %s, 'USAGE, SELECT, UPDATE')"
            )
            assert not conn.execute(f"SELECT {check}", (APP_ROLE, name)).fetchone()[0], name


def test_raw_sql_on_every_graph_table_is_refused(two_tenants: MemorySystem):
    relations = graph_relations(two_tenants)
    statements = [f"SELECT * FROM {name}" if kind == "r" else f"SELECT nextval('{name}')" for name, kind in relations]
    statements += [
        'INSERT INTO memoria_graph."Entity" (properties) SELECT properties FROM memoria_graph."Entity"',
        'DELETE FROM memoria_graph."RELATED"',
        "SELECT * FROM ag_catalog.cypher('memoria_graph', $$ MATCH (v) RETURN v $$) AS (v ag_catalog.agtype)",
        (
            "SELECT * FROM ag_catalog.cypher('memoria_graph', $$ MATCH (e:Entity) WHERE e.tenant = 'B' "
            "RETURN e.name $$) AS (name ag_catalog.agtype)"
        ),
        "SELECT ag_catalog.create_vlabel('memoria_graph', 'Stolen')",
    ]
    for statement in statements:
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for schema"),
            two_tenants.db.transaction("A") as conn,
        ):
            assert conn.execute("SELECT current_user").fetchone()[0] == APP_ROLE
            conn.execute(statement)


def test_a_label_added_later_is_closed_too(two_tenants: MemorySystem):
    """The schema itself is closed: a label an admin adds after the migration is no more readable."""
    with admin(two_tenants) as conn:
        conn.execute("SELECT ag_catalog.create_vlabel('memoria_graph', 'Later')")
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for schema"),
        two_tenants.db.transaction("A") as conn,
    ):
        conn.execute('SELECT * FROM memoria_graph."Later"')


# -- the functions act for the transaction's tenant only ----------------------------------------------


def test_the_walk_returns_nothing_of_another_tenant(two_tenants: MemorySystem):
    a_ids, b_ids = ids_of(two_tenants, "A"), ids_of(two_tenants, "B")
    everything = ["alice", "bob", "carol", "acme", "paris", "rome", "zed", "globex"]
    with two_tenants.db.transaction("A") as conn:
        rows = conn.execute(FUNCTIONS["graph_walk"], (everything,)).fetchall()
        assert {r[0] for r in rows} == a_ids
        for b_only in (["rome"], ["zed"], ["globex", "rome"]):
            assert conn.execute(FUNCTIONS["graph_walk"], (b_only,)).fetchall() == []
    with two_tenants.db.transaction("B") as conn:
        assert {r[0] for r in conn.execute(FUNCTIONS["graph_walk"], (everything,))} == b_ids
    with two_tenants.db.transaction("C") as conn:  # a tenant with nothing sees nothing
        assert conn.execute(FUNCTIONS["graph_walk"], (everything,)).fetchall() == []
    with two_tenants.db.transaction("A") as conn:
        assert graph_age.graph_counts(conn, "A") == truth(two_tenants, "A")


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("tenant", [None, ""])
def test_every_function_refuses_to_run_without_a_tenant(two_tenants: MemorySystem, name: str, tenant):
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_SET),
        two_tenants.db.connection() as conn,
        conn.transaction(),
    ):
        if tenant is not None:
            conn.execute("SELECT set_config('memoria.tenant', %s, true)", (tenant,))
        conn.execute(FUNCTIONS[name], ARGS[name])


def test_sync_ignores_the_ids_of_another_tenant(two_tenants: MemorySystem):
    writer = two_tenants.ingestor.graph_writer
    two_tenants.ingestor.graph_writer = None  # stored but not mirrored yet
    new_a = two_tenants.store_many(
        [{"content": "Alice visits Oslo.", "tenant": "A", "entities": ["Alice", "Oslo"]}]
    ).ids
    new_b = two_tenants.store_many(
        [
            {"content": "Bob hides in Lima.", "tenant": "B", "entities": ["Bob", "Lima"]},
            {"content": "Zed hides in Lima.", "tenant": "B"},
        ]
    ).ids
    two_tenants.ingestor.graph_writer = writer
    assert mirrored(two_tenants, new_a + new_b) == {}
    with admin(two_tenants) as conn:
        before = {
            label: conn.execute(f'SELECT count(*) FROM memoria_graph."{label}"').fetchone()[0]
            for label in graph_age.LABELS
        }

    with two_tenants.db.transaction("A") as conn:  # B's ids, and ids that do not exist
        assert conn.execute(FUNCTIONS["graph_sync"], (new_b + [10**12],)).fetchone()[0] == 0
    with admin(two_tenants) as conn:
        assert {
            label: conn.execute(f'SELECT count(*) FROM memoria_graph."{label}"').fetchone()[0]
            for label in graph_age.LABELS
        } == before
    with two_tenants.db.transaction("A") as conn:  # a mix: only A's own is mirrored
        assert conn.execute(FUNCTIONS["graph_sync"], (new_b + new_a,)).fetchone()[0] == 1
    assert mirrored(two_tenants, new_a + new_b) == {new_a[0]: "A"}
    with two_tenants.db.transaction("B") as conn:
        assert conn.execute(FUNCTIONS["graph_sync"], (new_b,)).fetchone()[0] == 2
    assert mirrored(two_tenants, new_a + new_b) == {new_a[0]: "A", new_b[0]: "B", new_b[1]: "B"}
    with two_tenants.db.transaction("A") as conn:
        found = {r[0] for r in conn.execute(FUNCTIONS["graph_walk"], (["lima", "oslo"],))}
    assert new_a[0] in found and found <= ids_of(two_tenants, "A")


def test_rebuild_touches_only_the_transaction_tenant(two_tenants: MemorySystem):
    with admin(two_tenants) as conn:
        b_rows = conn.execute(
            'SELECT id::text, properties FROM memoria_graph."Entity" WHERE '
            "ag_catalog.agtype_object_field_text(properties, 'tenant') = 'B' ORDER BY id"
        ).fetchall()
    with two_tenants.db.transaction("A") as conn:
        counts = dict(conn.execute(FUNCTIONS["graph_rebuild"]).fetchall())
    assert counts == truth(two_tenants, "A") and counts["RELATED"] > 0
    with admin(two_tenants) as conn:
        assert (
            conn.execute(
                'SELECT id::text, properties FROM memoria_graph."Entity" WHERE '
                "ag_catalog.agtype_object_field_text(properties, 'tenant') = 'B' ORDER BY id"
            ).fetchall()
            == b_rows
        )


# -- definer hygiene -----------------------------------------------------------------------------------


def test_the_functions_are_pinned_owned_by_a_small_role_and_executable_by_the_app_only(two_tenants: MemorySystem):
    with admin(two_tenants) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig, p.proowner::regrole::text, p.prosrc, "
            "ARRAY(SELECT a.grantee::regrole::text FROM aclexplode(p.proacl) a "
            "      WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0 ORDER BY 1), "
            "EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0) "
            "FROM pg_proc p WHERE p.pronamespace = 'memoria'::regnamespace AND p.proname LIKE 'graph%' "
            "ORDER BY 1"
        ).fetchall()
        owner = conn.execute(
            "SELECT rolsuper, rolbypassrls, rolcanlogin, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = %s",
            (OWNER,),
        ).fetchone()
        owned_tables = conn.execute("SELECT count(*) FROM pg_class WHERE relowner = %s::regrole", (OWNER,)).fetchone()[
            0
        ]
        may_create = conn.execute(
            "SELECT has_schema_privilege(%s, 'memoria', 'CREATE') "
            "OR has_schema_privilege(%s, 'memoria_graph', 'CREATE')",
            (OWNER, OWNER),
        ).fetchone()[0]
    assert [r[0] for r in rows] == sorted(FUNCTIONS)
    for name, definer, config, fn_owner, source, executors, public in rows:
        assert definer and fn_owner == OWNER, name
        plans = "force_generic_plan" if name == "graph_walk" else "force_custom_plan"  # see migration 0003
        assert config == ["search_path=pg_catalog, pg_temp", f"plan_cache_mode={plans}"], name
        assert executors == [APP_ROLE, OWNER] and not public, name
        upper = source.upper()
        assert "TEMP" not in upper and "EXECUTE" not in upper and "FORMAT(" not in upper, name
    assert owner == (False, False, False, False, False)
    assert owned_tables == 0 and not may_create


def test_caller_made_temp_objects_do_not_run_as_the_definer(two_tenants: MemorySystem):
    """memoria_app can create objects in its temporary schema only. Tables there named after every table
    the functions (or the sync before them) used, with a trigger, and functions and an operator shadowing
    the ones the functions call: none is ever used, because the functions pin search_path to
    pg_catalog, pg_temp (functions and operators are never looked up in pg_temp), qualify every name and
    create no table."""
    writer = two_tenants.ingestor.graph_writer
    two_tenants.ingestor.graph_writer = None
    new_a = two_tenants.store_many(
        [{"content": "Alice visits Oslo.", "tenant": "A", "entities": ["Alice", "Oslo"]}]
    ).ids
    two_tenants.ingestor.graph_writer = writer
    tables = [
        "memories",
        "entities",
        "memory_entities",
        "entity_edges",
        '"Entity"',
        '"Memory"',
        '"MENTIONS"',
        '"RELATED"',
        "graph_batch",
        "graph_mentions",
        "graph_links",
        "graph_entity_ids",
        "walk",
        "found",
        "memory_types",
        "reached",
        "offered",
    ]
    with two_tenants.db.transaction("A") as conn, conn.transaction():
        conn.execute("CREATE TEMP TABLE trap_log (who text, what text)")
        conn.execute(
            "CREATE FUNCTION pg_temp.trap() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO pg_temp.trap_log VALUES (current_user, TG_TABLE_NAME); RETURN NULL; END $$"
        )
        for table in tables:
            conn.execute(
                f"CREATE TEMP TABLE {table} (id bigint, memory_id bigint, entity_id bigint, "
                "memory_type text, tenant text, properties text)"
            )
            conn.execute(
                f"CREATE TRIGGER trap AFTER INSERT OR UPDATE OR DELETE ON pg_temp.{table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.trap()"
            )
        conn.execute(
            "CREATE FUNCTION pg_temp.current_setting(text, boolean) RETURNS text LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO pg_temp.trap_log VALUES (current_user, 'current_setting'); RETURN 'B'; END $$"
        )
        conn.execute(
            "CREATE FUNCTION pg_temp.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO pg_temp.trap_log VALUES (current_user, 'cardinality'); RETURN 0; END $$"
        )
        conn.execute(
            "CREATE FUNCTION pg_temp.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO pg_temp.trap_log VALUES (current_user, '='); RETURN true; END $$"
        )
        conn.execute("CREATE OPERATOR pg_temp.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_temp.text_eq)")
        conn.execute("SET LOCAL search_path = pg_temp, memoria, public")  # the caller's own path, traps first

        assert conn.execute(FUNCTIONS["graph_sync"], (new_a,)).fetchone()[0] == 1
        walked = {r[0] for r in conn.execute(FUNCTIONS["graph_walk"], (["alice", "rome", "zed"],))}
        counts = dict(conn.execute(FUNCTIONS["graph_counts"]).fetchall())
        rebuilt = dict(conn.execute(FUNCTIONS["graph_rebuild"]).fetchall())
        assert conn.execute("SELECT count(*) FROM pg_temp.trap_log").fetchone()[0] == 0
        raise psycopg.Rollback()  # the traps go with the savepoint
    assert walked == ids_of(two_tenants, "A") and new_a[0] in walked
    assert counts == rebuilt == truth(two_tenants, "A")
