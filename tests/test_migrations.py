"""Schema migrations, shards (partitions), row-level security and extension detection on a real server."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from memoria_pg.config import DEFAULT_MEMORY_TYPES
from memoria_pg.db import Capabilities, Database, detect_capabilities, migrate, require_vector
from memoria_pg.errors import ConfigError, ExtensionMissing, SchemaError, ServerError
from tests.tenant_tables import tenant_tables

HEAD = migrate.history("")[-1][0]  # the latest revision


def scalar(dsn: str, query: str, params=()) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchone()[0]


def partitions(dsn: str, parent: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            (parent,),
        ).fetchall()
    return {r[0] for r in rows}


def index_methods(dsn: str, table: str) -> dict[str, str]:
    """index name -> access method, for the indexes of one table (a partition)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT i.relname, a.amname FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am a ON a.oid = i.relam "
            "WHERE x.indrelid = %s::regclass",
            (table,),
        ).fetchall()
    return dict(rows)


def unit_vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=384).astype(np.float32)
    return v / np.linalg.norm(v)


# -- upgrade / downgrade -----------------------------------------------------------------------------


def test_upgrade_downgrade_upgrade(empty_dsn):
    assert migrate.current(empty_dsn) is None

    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == HEAD
    assert scalar(empty_dsn, "SELECT to_regclass('memoria.memories') IS NOT NULL")

    migrate.downgrade(empty_dsn, "base")
    assert migrate.current(empty_dsn) is None
    assert scalar(empty_dsn, "SELECT to_regnamespace('memoria') IS NULL")

    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == HEAD
    assert partitions(empty_dsn, "memoria.memories") == {f"memories_{t}" for t in DEFAULT_MEMORY_TYPES} | {
        "memories_default"
    }


def test_the_schema_revision_has_its_own_table_beside_the_applications_alembic(empty_dsn):
    """An application that already runs Alembic in the same database keeps its public.alembic_version:
    memoria-pg records its revision in public.memoria_alembic_version, and neither reads the other's."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('3f2a1b9c8d7e')")
    assert migrate.current(empty_dsn) is None
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == HEAD
    assert scalar(empty_dsn, "SELECT array_agg(version_num) FROM public.alembic_version") == ["3f2a1b9c8d7e"]
    assert scalar(empty_dsn, "SELECT array_agg(version_num) FROM public.memoria_alembic_version") == [HEAD]
    migrate.downgrade(empty_dsn, "base")
    assert migrate.current(empty_dsn) is None
    assert scalar(empty_dsn, "SELECT array_agg(version_num) FROM public.alembic_version") == ["3f2a1b9c8d7e"]


@pytest.mark.parametrize("app_revision", [None, "3f2a1b9c8d7e"])
def test_a_revision_recorded_in_alembics_default_table_is_adopted(empty_dsn, app_revision):
    """Releases up to 0019 recorded memoria-pg's revision in public.alembic_version (with the
    application's, when it shared the table): current() reads it there, and the next upgrade moves it
    to memoria-pg's own table, leaving the application's row, or dropping a table left empty."""
    migrate.upgrade(empty_dsn, "0018")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # as an older release left it
        conn.execute("ALTER TABLE public.memoria_alembic_version RENAME TO alembic_version")
        conn.execute("ALTER TABLE public.alembic_version RENAME CONSTRAINT memoria_alembic_version_pkc "
                     "TO alembic_version_pkc")  # fmt: skip
        if app_revision:
            conn.execute("INSERT INTO public.alembic_version VALUES (%s)", (app_revision,))
    assert migrate.current(empty_dsn) == "0018"
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == HEAD
    assert scalar(empty_dsn, "SELECT array_agg(version_num) FROM public.memoria_alembic_version") == [HEAD]
    legacy = scalar(empty_dsn, "SELECT to_regclass('public.alembic_version') IS NOT NULL")
    if app_revision:
        assert legacy and scalar(empty_dsn, "SELECT array_agg(version_num) FROM public.alembic_version") == [
            app_revision
        ]
    else:
        assert not legacy


def acls(dsn: str) -> dict[str, object]:
    """Every privilege in the database that migrations grant: the schemas', the relations' and the
    functions' access lists (memoria, memoria_graph, ag_catalog)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT 'schema ' || nspname, nspacl::text FROM pg_namespace "
            "WHERE nspname IN ('memoria', 'memoria_graph', 'ag_catalog') "
            "UNION ALL SELECT 'relation ' || oid::regclass::text, relacl::text FROM pg_class "
            "WHERE relnamespace IN ('memoria'::regnamespace, to_regnamespace('memoria_graph')) AND relkind <> 'i' "
            "AND relkind <> 'I' "
            "UNION ALL SELECT 'function ' || oid::regprocedure::text, proacl::text FROM pg_proc "
            "WHERE pronamespace = 'memoria'::regnamespace"
        ).fetchall()
    return dict(rows)


def test_0003_closes_the_graph_and_its_downgrade_restores_0001s_grants(empty_dsn, server_has_age):
    migrate.upgrade(empty_dsn, "0001")
    at_0001 = acls(empty_dsn)
    migrate.upgrade(empty_dsn, "0002")
    assert acls(empty_dsn) == at_0001  # 0002 adds indexes only
    migrate.upgrade(empty_dsn, "0008")  # later revisions add graph functions of their own (0010)
    at_head = acls(empty_dsn)
    app_on_graph = (
        "SELECT has_schema_privilege('memoria_app', 'memoria_graph', 'USAGE') "
        "OR has_schema_privilege('memoria_app', 'ag_catalog', 'USAGE') "
        "OR EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = 'memoria_graph'::regnamespace "
        "AND has_table_privilege('memoria_app', oid, 'SELECT'))"
    )
    functions = "SELECT count(*) FROM pg_proc WHERE pronamespace = 'memoria'::regnamespace AND proname LIKE 'graph%%'"
    if server_has_age:
        assert at_head != at_0001
        assert scalar(empty_dsn, app_on_graph) is False
        assert scalar(empty_dsn, functions) == 4
    else:  # no graph: 0003 does nothing (0004-0008 add tables of their own, memory_access among them)
        assert {k: v for k, v in at_head.items() if k in at_0001} == at_0001
        assert scalar(empty_dsn, functions) == 0
    migrate.downgrade(empty_dsn, "0002")
    assert acls(empty_dsn) == at_0001
    assert scalar(empty_dsn, functions) == 0
    if server_has_age:
        assert scalar(empty_dsn, app_on_graph) is True
    migrate.upgrade(empty_dsn, "0008")  # later revisions change grants of their own (0009 onwards)
    assert acls(empty_dsn) == at_head
    migrate.downgrade(empty_dsn, "0001")
    assert acls(empty_dsn) == at_0001


def graph_functions(dsn: str) -> dict[str, tuple]:
    """memoria's graph functions: signature -> (definition, owner, settings, access list)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT oid::regprocedure::text, pg_get_functiondef(oid), proowner::regrole::text, "
            "proconfig::text, proacl::text FROM pg_proc "
            "WHERE pronamespace = 'memoria'::regnamespace AND proname LIKE 'graph%'"
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def test_0007_bounds_the_walk_and_its_downgrade_restores_0003s(empty_dsn, server_has_age):
    """0007 adds memory_entities (entity_id, memory_type, memory_id) INCLUDE (tenant) and, with the
    graph, replaces graph_walk by the bounded one (two more arguments, same owner, settings and
    grants); its downgrade gives back 0006's function (0003's text) and privileges exactly."""
    migrate.upgrade(empty_dsn, "0006")
    functions_0006, acls_0006 = graph_functions(empty_dsn), acls(empty_dsn)
    index = "SELECT to_regclass('memoria.memory_entities_entity_type') IS NOT NULL"
    attribute_indexes = (
        "SELECT array_agg(indexname::text || ' ' || indexdef ORDER BY indexname) FROM pg_indexes "
        "WHERE schemaname = 'memoria' AND tablename = 'memory_attributes'"
    )
    column = (
        "SELECT count(*) FROM pg_attribute WHERE attrelid = 'memoria.memory_attributes'::regclass "
        "AND attname = 'subject_lower' AND NOT attisdropped"
    )
    indexes_0006 = scalar(empty_dsn, attribute_indexes)
    assert scalar(empty_dsn, index) is False and scalar(empty_dsn, column) == 0
    migrate.upgrade(empty_dsn, "0007")
    assert scalar(empty_dsn, index) is True and scalar(empty_dsn, column) == 1
    indexes_0007 = scalar(empty_dsn, attribute_indexes)
    assert [i for i in indexes_0007 if i not in indexes_0006] == [
        "memory_attributes_tenant_subject_lower CREATE INDEX memory_attributes_tenant_subject_lower "
        "ON memoria.memory_attributes USING btree (tenant, subject_lower)"
    ]
    assert [i.split()[0] for i in indexes_0006 if i not in indexes_0007] == ["memory_attributes_tenant_subject"]
    assert scalar(empty_dsn, "SELECT pg_get_indexdef('memoria.memory_entities_entity_type'::regclass)").endswith(
        "USING btree (entity_id, memory_type, memory_id) INCLUDE (tenant)"
    )
    functions_0007 = graph_functions(empty_dsn)
    old, new = (
        "memoria.graph_walk(text[],integer,text,integer)",
        "memoria.graph_walk(text[],integer,text,integer,integer,integer)",
    )
    if server_has_age:
        assert old in functions_0006 and old not in functions_0007 and new in functions_0007
        assert functions_0007[new][1:] == functions_0006[old][1:]  # owner, settings, grants
        assert set(functions_0007) - {new} == set(functions_0006) - {old}
        assert scalar(empty_dsn, "SELECT has_table_privilege('memoria_graph_owner', 'memoria.memory_types', 'SELECT')")
    else:
        assert functions_0006 == functions_0007 == {}
    migrate.downgrade(empty_dsn, "0006")
    assert scalar(empty_dsn, index) is False and scalar(empty_dsn, column) == 0
    assert scalar(empty_dsn, attribute_indexes) == indexes_0006
    assert graph_functions(empty_dsn) == functions_0006
    assert acls(empty_dsn) == acls_0006
    migrate.upgrade(empty_dsn, "0007")
    assert graph_functions(empty_dsn) == functions_0007


def test_0008_moves_access_counts_to_their_table_and_back(empty_dsn):
    """0008 copies the access statistics into memory_access (the library counts there from then on)
    and fixes add_memory_type's column list; the downgrade copies the counts back and restores both."""
    migrate.upgrade(empty_dsn, "0007")
    vector = str(unit_vector(2).tolist())
    function_0007 = scalar(empty_dsn, "SELECT pg_get_functiondef('memoria.add_memory_type'::regproc)")
    with psycopg.connect(empty_dsn) as conn:
        ids = [
            conn.execute(
                "INSERT INTO memoria.memories (tenant, memory_type, dedup_key, content, embedding, doc_len, "
                "access_count, last_accessed_at) VALUES ('t', 'general', %s, 'x', %s::vector, 1, %s, "
                "CASE WHEN %s > 0 THEN timestamptz '2026-01-02' END) RETURNING id",
                (f"k{n}", vector, n, n),
            ).fetchone()[0]
            for n in (0, 3)
        ]
    migrate.upgrade(empty_dsn, "0008")
    with psycopg.connect(empty_dsn) as conn:
        rows = conn.execute(
            "SELECT memory_id, tenant, access_count, last_accessed_at::date::text FROM memoria.memory_access"
        ).fetchall()
        assert rows == [(ids[1], "t", 3, "2026-01-02")]  # the never-accessed memory has no row
        # Counted after the upgrade (by this library), in memory_access only; the downgrade copies it back.
        conn.execute("UPDATE memoria.memory_access SET access_count = 5")
        conn.execute(
            "INSERT INTO memoria.memory_access (memory_id, tenant, access_count, last_accessed_at) "
            "VALUES (%s, 't', 1, now())",
            (ids[0],),
        )
    assert "context" in scalar(empty_dsn, "SELECT pg_get_functiondef('memoria.add_memory_type'::regproc)")
    migrate.downgrade(empty_dsn, "0007")
    assert scalar(empty_dsn, "SELECT to_regclass('memoria.memory_access')") is None
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute(
            "SELECT id, access_count, last_accessed_at IS NOT NULL FROM memoria.memories ORDER BY id"
        ).fetchall() == [(ids[0], 1, True), (ids[1], 5, True)]
    assert scalar(empty_dsn, "SELECT pg_get_functiondef('memoria.add_memory_type'::regproc)") == function_0007


def test_history_lists_the_initial_revision(dsn):
    history = migrate.history(dsn)
    assert history[0][:2] == ("0001", None)
    assert history[0][2]


def test_upgrade_creates_the_configured_memory_types(empty_dsn):
    migrate.upgrade(empty_dsn, memory_types=("general", "notes"))
    assert partitions(empty_dsn, "memoria.memories") == {"memories_general", "memories_notes", "memories_default"}
    assert partitions(empty_dsn, "memoria.memory_terms") == {
        "memory_terms_general",
        "memory_terms_notes",
        "memory_terms_default",
    }
    with psycopg.connect(empty_dsn) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM memoria.memory_types ORDER BY name")]
    assert names == ["general", "notes"]


# -- shards ------------------------------------------------------------------------------------------


def test_memories_is_list_partitioned_with_a_default_partition(dsn):
    with psycopg.connect(dsn) as conn:
        strategy, default = conn.execute(
            "SELECT partstrat, partdefid::regclass::text FROM pg_partitioned_table "
            "WHERE partrelid = 'memoria.memories'::regclass"
        ).fetchone()
    assert strategy == "l"
    assert default == "memoria.memories_default"
    expected = {f"memories_{t}" for t in DEFAULT_MEMORY_TYPES} | {"memories_default"}
    assert partitions(dsn, "memoria.memories") == expected


def test_every_partition_has_the_covering_and_fulltext_indexes_and_no_shared_hnsw(dsn):
    # 0016 dropped the shards' shared HNSW index: only per-tenant ones (db/vector_indexes.py) remain
    for partition in partitions(dsn, "memoria.memories"):
        methods = index_methods(dsn, f"memoria.{partition}")
        assert "hnsw" not in methods.values(), partition
        assert "gin" in methods.values(), partition
    with psycopg.connect(dsn) as conn:
        definitions = [
            r[0]
            for r in conn.execute(
                "SELECT pg_get_indexdef(x.indexrelid) FROM pg_index x "
                "WHERE x.indrelid = 'memoria.memories_general'::regclass"
            )
        ]
    # the exact search's covering index (0004): the tenant's vectors by an index-only scan
    assert any("(tenant)" in d and "INCLUDE" in d and "embedding" in d for d in definitions), definitions


def test_add_memory_type_creates_shard_and_moves_default_rows(dsn):
    with psycopg.connect(dsn) as conn:
        # A row of a type without a shard yet lands in the default partitions.
        memory_id = conn.execute(
            "INSERT INTO memoria.memories (tenant, memory_type, dedup_key, content, context, embedding, doc_len) "
            "VALUES ('t', 'recipe', 'k1', 'bake bread', 'the oven is hot', %s::vector, 2) RETURNING id",
            (str(unit_vector(1).tolist()),),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO memoria.memory_terms (tenant, memory_type, term, memory_id, tf, doc_len, impact) "
            "VALUES ('t', 'recipe', 'bread', %s, 1, 2, 1.0)",
            (memory_id,),
        )
    assert scalar(dsn, "SELECT count(*) FROM memoria.memories_default WHERE memory_type = 'recipe'") == 1

    assert migrate.add_memory_type(dsn, "recipe") is True

    assert "memories_recipe" in partitions(dsn, "memoria.memories")
    assert "memory_terms_recipe" in partitions(dsn, "memoria.memory_terms")
    methods = set(index_methods(dsn, "memoria.memories_recipe").values())
    assert "gin" in methods and "hnsw" not in methods
    assert index_methods(dsn, "memoria.memory_terms_recipe")
    assert scalar(dsn, "SELECT count(*) FROM memoria.memories_default") == 0
    assert scalar(dsn, "SELECT count(*) FROM memoria.memory_terms_default") == 0
    assert scalar(dsn, "SELECT content FROM memoria.memories_recipe WHERE id = %s", (memory_id,)) == "bake bread"
    assert scalar(dsn, "SELECT context FROM memoria.memories_recipe WHERE id = %s", (memory_id,)) == "the oven is hot"
    assert scalar(dsn, "SELECT term FROM memoria.memory_terms_recipe WHERE memory_id = %s", (memory_id,)) == "bread"
    assert scalar(dsn, "SELECT count(*) FROM memoria.memory_types WHERE name = 'recipe'") == 1

    assert migrate.add_memory_type(dsn, "recipe") is False


def test_new_memory_type_is_usable_through_the_library(system):
    assert system.add_memory_type("journal") is True
    assert "journal" in system.memory_types
    stored = system.store("Dear diary, the tulips opened.", memory_type="journal", tenant="t")
    response = system.query("tulips opened", tenant="t", memory_type="journal", ranking=False)
    assert [m.memory_id for m in response.memories] == [stored]
    assert response.memories[0].memory_type == "journal"


@pytest.mark.parametrize("name", ["Bad-Name", "x; drop table memoria.memories", "", "1abc", "a" * 42, "naïve"])
def test_add_memory_type_rejects_invalid_names(dsn, name):
    with pytest.raises(ConfigError, match="invalid memory type"):
        migrate.add_memory_type(dsn, name)
    assert scalar(dsn, "SELECT to_regclass('memoria.memories') IS NOT NULL")
    assert scalar(dsn, "SELECT count(*) FROM memoria.memory_types") == len(DEFAULT_MEMORY_TYPES)


def test_sql_function_rejects_invalid_names_itself(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid memory type"):
            conn.execute("SELECT memoria.add_memory_type(%s)", ("x'); DROP TABLE memoria.memories; --",))
    assert scalar(dsn, "SELECT to_regclass('memoria.memories') IS NOT NULL")


# -- row-level security ------------------------------------------------------------------------------


def test_rls_enabled_and_forced_on_tenant_tables(dsn):
    """Every table with a tenant column, found in the catalog (so a table a later migration adds is
    checked too), has row-level security enabled and forced."""
    with psycopg.connect(dsn) as conn:
        tables = tenant_tables(conn)
        rows = dict(
            (name, (enabled, forced))
            for name, enabled, forced in conn.execute(
                "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c "
                "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relname = ANY(%s)",
                (tables,),
            )
        )
    assert set(rows) == set(tables)
    assert {t: v for t, v in rows.items() if v != (True, True)} == {}


def test_database_enforces_tenant_isolation(system):
    system.store("alpha secret", tenant="a")
    system.store("beta secret", tenant="b")
    with system.db.transaction("a") as conn:
        assert [r[0] for r in conn.execute("SELECT content FROM memoria.memories")] == ["alpha secret"]
        assert conn.execute("SELECT count(*) FROM memoria.memory_terms WHERE tenant = 'b'").fetchone()[0] == 0
    with system.db.connection() as conn:  # no tenant set: nothing is visible
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        with system.db.transaction("a") as conn:
            conn.execute(
                "INSERT INTO memoria.bm25_docs (tenant, memory_type, n_docs, sum_len) VALUES ('b', 'general', 1, 1)"
            )


# -- extension detection -----------------------------------------------------------------------------


def test_detect_capabilities_reports_pgvector(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        caps = detect_capabilities(conn)
    assert caps.vector_available and caps.vector
    assert tuple(int(p) for p in caps.vector.split(".")[:2]) >= (0, 8)
    assert caps.pg_trgm
    assert caps.schema_ready
    assert caps.server_version.split(".")[0] in ("17", "18")


def test_detect_capabilities_on_an_empty_database(empty_dsn):
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        caps = detect_capabilities(conn)
    assert caps.vector_available and caps.vector is None  # available on the server, not created here
    assert not caps.schema_ready
    assert caps.graph_backend == "sql"


def test_database_on_an_empty_database_raises_schema_error(empty_dsn):
    with pytest.raises(SchemaError, match="db upgrade"):
        Database(empty_dsn)


def test_database_on_an_unreachable_server_raises_server_error():
    with pytest.raises(ServerError, match="cannot connect"):
        Database("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2")


def test_require_vector_explains_a_missing_extension():
    caps = Capabilities(
        server_version="17.0",
        vector=None,
        vector_available=False,
        pg_trgm=True,
        age=None,
        age_available=False,
        schema_ready=False,
    )
    with pytest.raises(ExtensionMissing, match="pgvector"):
        require_vector(caps)


def test_0003_does_nothing_without_the_graph(empty_dsn):
    migrate.upgrade(empty_dsn, use_age=False)
    assert migrate.current(empty_dsn) == HEAD
    assert (
        scalar(
            empty_dsn,
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'memoria'::regnamespace AND proname LIKE 'graph%%'",
        )
        == 0
    )
    assert scalar(empty_dsn, "SELECT to_regnamespace('memoria_graph') IS NULL")
    migrate.downgrade(empty_dsn, "base")
    assert migrate.current(empty_dsn) is None
