"""The Apache AGE graph mirror (memoria_pg/graph_age.py) and the AGE graph worker
(sql/workers/graph_age.sql), on a server with AGE (scripts/age-server.sh; MEMORIA_TEST_DSN).

The plain tables are the source of truth: the mirror must hold exactly their rows, and the graph
worker must return exactly the rows of the SQL worker (sql/workers/graph.sql) for every query.
The library's role has no privilege on the graph (tests/test_security_graph.py): the tests read the
label tables and run Cypher through `admin`, a connection as the user that ran the migrations.
"""

from __future__ import annotations

import json
import random

import numpy as np
import psycopg
import pytest

from memoria_pg.core.text import normalize, normalize_entity
from memoria_pg.core.types import ProcessedQuery, Shard
from memoria_pg.db import graph_age
from memoria_pg.query.workers import WorkerContext
from memoria_pg.query.workers.graph import GraphWorker

TENANT_A = "tenant-a"
TENANT_B = "tenant 'b' {$$}"  # the tenant itself is only ever a bound parameter too

# Entity names that would break any Cypher or SQL built by string formatting.
TRICKY = [
    "O'Brien",
    'Say "Hi" Corp',
    "$$ Dollar $$",
    "Brace {Map} }{",
    "Back\\slash \\n",
    "Zoë Ünïcode",
    "東京 タワー",
    "Rocket 🚀",
    "MATCH",
    "RETURN (n) LIMIT 1",
    "DETACH DELETE n",
    "'); DROP TABLE memoria.memories; --",
    "$tenant",
    "%(entities)s",
    "a `backtick` name",
]
PLAIN = ["Alice", "Bob", "Carol", "Dave", "Paris", "Rome", "Acme", "Globex"]

# Chains, so that depth 2 and 3 reach further than depth 1.
CHAIN = [
    (["Alice", "O'Brien"], "episodic"),
    (["O'Brien", "$$ Dollar $$"], "semantic"),
    (["$$ Dollar $$", "Brace {Map} }{"], "general"),
    (["Brace {Map} }{", "Back\\slash \\n"], "episodic"),
    (["Back\\slash \\n", "Zoë Ünïcode"], "general"),
    (["Zoë Ünïcode", "東京 タワー", "MATCH"], "semantic"),
    (["MATCH", "RETURN (n) LIMIT 1"], "general"),
    (["Alice"], "general"),
    (["Alice", "Bob"], "episodic"),
]


def corpus(tenant: str, seed: int, n_random: int = 60) -> list[dict]:
    rng = random.Random(seed)
    records = [
        {
            "content": f"[{tenant}] chain {i}: {' / '.join(names)}",
            "entities": names,
            "memory_type": memory_type,
            "tenant": tenant,
        }
        for i, (names, memory_type) in enumerate(CHAIN)
    ]
    pool = TRICKY + PLAIN
    for i in range(n_random):
        names = rng.sample(pool, rng.randint(1, 4))
        records.append(
            {
                "content": f"[{tenant}] random {i}: {' / '.join(names)}",
                "entities": names,
                "memory_type": rng.choice(["general", "episodic", "semantic", "fact"]),
                "tenant": tenant,
            }
        )
    return records


QUERIES = [[name] for name in TRICKY + PLAIN] + [
    ["Alice", "MATCH"],
    ["$$ Dollar $$", "Back\\slash \\n", "東京 タワー"],
    ["nobody at all"],
    ["alice", "ALICE"],  # normalized to the same name
    ["Rocket 🚀", "%(entities)s", "$tenant"],
]


@pytest.fixture
def age_system(request, server_has_age):
    if not server_has_age:
        pytest.skip(
            "the test server has no Apache AGE extension: run `bash scripts/age-server.sh start` "
            "and set MEMORIA_TEST_DSN to its DSN (database postgres) to run the AGE graph tests"
        )
    system = request.getfixturevalue("system")
    assert system.graph_backend == "age", "the server has AGE but the migrated database has no graph"
    return system


@pytest.fixture
def admin(dsn):
    """The migrating (super)user: the label tables and Cypher are its, not memoria_app's."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LOAD 'age'")
        conn.execute("SET search_path = ag_catalog, public")
        yield conn


@pytest.fixture
def loaded(age_system):
    for tenant, seed in ((TENANT_A, 1), (TENANT_B, 2)):
        result = age_system.store_many(corpus(tenant, seed), batch_size=25)  # several batches
        assert result.inserted == len(CHAIN) + 60 and result.duplicates == 0
    return age_system


def worker_rows(
    system,
    tenant: str,
    entities: list[str],
    depth: int,
    backend: str,
    memory_type: str | None = None,
    limit: int = 50,
    **bounds: int,
) -> list[tuple]:
    """The raw rows of the graph worker's statement, through GraphWorker's own SQL and params;
    `bounds` overrides the walk's (graph_fanout, graph_entity_memories)."""
    ctx = WorkerContext(
        query=ProcessedQuery(text=" ".join(entities), normalized="", tokens=[], tenant=tenant, entities=list(entities)),
        embedding=np.zeros(384, dtype=np.float32),
        shards=(Shard(memory_type),),
        limit=10,
        graph_limit=limit,
        graph_depth=depth,
        config=system.config.replace(**bounds),
        graph_backend=backend,
    )
    worker = GraphWorker()
    rows = []
    with system.db.transaction(tenant) as conn:
        for statement, params in worker.statements(ctx):
            rows.extend(tuple(r) for r in conn.execute(statement, params).fetchall())
    return rows


def plain_tables(conn) -> dict[str, set]:
    """The graph's source of truth for the connection's tenant."""
    return {
        "Memory": set(conn.execute("SELECT id, memory_type FROM memoria.memories").fetchall()),
        "Entity": set(conn.execute("SELECT id, name, norm_name, kind FROM memoria.entities").fetchall()),
        "MENTIONS": set(conn.execute("SELECT memory_id, entity_id FROM memoria.memory_entities").fetchall()),
        "RELATED": set(conn.execute("SELECT src_id, dst_id, weight FROM memoria.entity_edges").fetchall()),
    }


def mirror(conn, tenant: str) -> dict[str, set]:
    """The graph's content for `tenant`, read with plain SQL over the label tables (an admin
    connection) and mapped back to plain-table ids; asserts that every vertex and edge carries the tenant and has no duplicate."""
    prop = "ag_catalog.agtype_object_field_text"
    out = {}
    vertices = {
        "Memory": f"SELECT id::text, {prop}(properties, 'memory_id')::bigint, "
        f"{prop}(properties, 'memory_type') FROM memoria_graph.\"Memory\" WHERE {prop}(properties, 'tenant') = %s",
        "Entity": f"SELECT id::text, {prop}(properties, 'entity_id')::bigint, {prop}(properties, 'name'), "
        f"{prop}(properties, 'norm_name'), {prop}(properties, 'kind') "
        f"FROM memoria_graph.\"Entity\" WHERE {prop}(properties, 'tenant') = %s",
    }
    ids = {}
    for label, query in vertices.items():
        rows = conn.execute(query, (tenant,)).fetchall()
        out[label] = {tuple(r[1:]) for r in rows}
        assert len(out[label]) == len(rows), f"duplicate {label} vertices"
        ids.update({r[0]: r[1] for r in rows})
    for label in ("MENTIONS", "RELATED"):
        rows = conn.execute(
            f'SELECT start_id::text, end_id::text, properties FROM memoria_graph."{label}" '
            f"WHERE {prop}(properties, 'tenant') = %s",
            (tenant,),
        ).fetchall()
        edges = set()
        for start, end, properties in rows:
            props = json.loads(properties)
            assert start in ids and end in ids, f"{label} edge to a vertex of another tenant or none"
            edges.add((ids[start], ids[end]) + ((props["weight"],) if label == "RELATED" else ()))
        assert len(edges) == len(rows), f"duplicate {label} edges"
        out[label] = edges
    return out


def all_graph_rows(conn) -> dict[str, list]:
    return {
        label: conn.execute(f'SELECT id::text, properties FROM memoria_graph."{label}" ORDER BY id').fetchall()
        for label in ("Memory", "Entity", "MENTIONS", "RELATED")
    }


def test_mirror_matches_the_plain_tables(loaded, admin):
    for tenant in (TENANT_A, TENANT_B):
        with loaded.db.transaction(tenant) as conn:
            truth = plain_tables(conn)
            assert graph_age.graph_counts(conn, tenant) == {k: len(v) for k, v in truth.items()}
        assert mirror(admin, tenant) == truth
        assert len(truth["RELATED"]) > 0 and any(w > 1 for _, _, w in truth["RELATED"])
    with loaded.db.connection() as conn:  # graph_counts sets the tenant for its call only
        assert graph_age.graph_counts(conn, TENANT_B)["Memory"] == len(CHAIN) + 60
        assert conn.execute("SELECT current_setting('memoria.tenant', true)").fetchone()[0] in (None, "")
    # nothing in the graph without a tenant, or with a tenant other than the two
    for label in ("Memory", "Entity", "MENTIONS", "RELATED"):
        tenants = {
            r[0]
            for r in admin.execute(
                f"SELECT ag_catalog.agtype_object_field_text(properties, 'tenant') FROM memoria_graph.\"{label}\""
            )
        }
        assert tenants == {TENANT_A, TENANT_B}, label


def test_names_survive_the_round_trip(loaded, admin):
    """Exotic names are stored verbatim and are found through Cypher with the parameter map."""
    params = graph_age.cypher_params([normalize_entity(n) for n in TRICKY], TENANT_A, 1)
    rows = admin.execute(
        "SELECT name::text, norm_name::text FROM ag_catalog.cypher('memoria_graph', $$ "
        "MATCH (e:Entity) WHERE e.tenant = $tenant AND e.norm_name IN $names "
        "RETURN e.name, e.norm_name $$, %s::ag_catalog.agtype) "
        "AS (name ag_catalog.agtype, norm_name ag_catalog.agtype)",
        (params,),
    ).fetchall()
    assert {name for name, _ in rows} == {normalize(n) for n in TRICKY}
    assert {norm for _, norm in rows} == {normalize_entity(n) for n in TRICKY}


def test_age_worker_returns_the_sql_workers_rows(loaded):
    non_empty = 0
    for tenant in (TENANT_A, TENANT_B):
        for entities in QUERIES:
            for depth in (1, 2, 3):
                for memory_type, limit in ((None, 50), ("episodic", 50), (None, 3), ("general", 2)):
                    sql_rows = worker_rows(loaded, tenant, entities, depth, "sql", memory_type, limit)
                    age_rows = worker_rows(loaded, tenant, entities, depth, "age", memory_type, limit)
                    assert age_rows == sql_rows, (tenant, entities, depth, memory_type, limit)
                    non_empty += bool(sql_rows)
    assert non_empty > 200  # the comparison is not vacuous


def test_depth_walks_further(age_system):
    """On the chain alone: Alice - O'Brien - $$ Dollar $$ - Brace {Map} }{ - ..., each depth reaches
    one more link; hops and entity hits are exact."""
    tenant = "chain"
    ids = age_system.store_many(corpus(tenant, 0, n_random=0)).ids
    expected = {
        1: {ids[0]: (1, 1), ids[7]: (1, 1), ids[8]: (1, 1)},
        # depth 2 reaches O'Brien and Bob (hop 1): chain 0 mentions Alice and O'Brien
        2: {ids[0]: (1, 2), ids[7]: (1, 1), ids[8]: (1, 2), ids[1]: (2, 1)},
        # depth 3 reaches $$ Dollar $$ (hop 2)
        3: {ids[0]: (1, 2), ids[7]: (1, 1), ids[8]: (1, 2), ids[1]: (2, 2), ids[2]: (3, 1)},
    }
    for depth, want in expected.items():
        rows = worker_rows(age_system, tenant, ["Alice"], depth, "age")
        assert rows == worker_rows(age_system, tenant, ["Alice"], depth, "sql")
        assert {r[0]: (r[2], r[3]) for r in rows} == want, depth
    assert [r[0] for r in worker_rows(age_system, tenant, ["Alice"], 3, "age")] == [
        ids[8],
        ids[0],
        ids[7],
        ids[1],
        ids[2],
    ]  # hops, then entity hits desc, then the most recent


def test_rows_become_hits_identically(loaded):
    for entities in (["Alice"], ["MATCH", "Rome"], ["Brace {Map} }{"]):
        for depth in (1, 2, 3):
            hits = {}
            for backend in ("sql", "age"):
                ctx = WorkerContext(
                    query=ProcessedQuery(text="", normalized="", tokens=[], tenant=TENANT_A, entities=entities),
                    embedding=np.zeros(384, dtype=np.float32),
                    shards=(Shard(None), Shard("episodic")),
                    limit=10,
                    graph_limit=20,
                    graph_depth=depth,
                    config=loaded.config,
                    graph_backend=backend,
                )
                with loaded.db.transaction(TENANT_A) as conn:
                    hits[backend] = [
                        (h.memory_id, h.rank, h.score, h.memory_type, h.detail) for h in GraphWorker().run(conn, ctx)
                    ]
            assert hits["age"] == hits["sql"] and hits["age"]


def test_cypher_reference_walk_agrees(loaded, admin):
    """graph_age.CYPHER_WALK (pure Cypher, parameter map only) reads the same graph the same way; it
    runs as the admin (memoria_app may not read the graph). It has no bounds: the worker's are lifted."""
    for entities in (["Alice"], ["$$ Dollar $$", "MATCH"], ["'); DROP TABLE memoria.memories; --"]):
        names = sorted({normalize_entity(e) for e in entities})
        for depth in range(1, graph_age.MAX_CYPHER_DEPTH + 1):
            params = {
                "entities": names,
                "depth": depth,
                "memory_type": None,
                "limit": 1000,
                "cypher_params": graph_age.cypher_params(names, TENANT_A, depth),
            }
            cypher_rows = [tuple(r) for r in admin.execute(graph_age.CYPHER_WALK, params).fetchall()]
            assert cypher_rows == worker_rows(
                loaded, TENANT_A, entities, depth, "sql", limit=1000, graph_fanout=1000, graph_entity_memories=1000
            )
            assert cypher_rows


def test_tenant_isolation(loaded):
    with loaded.db.transaction(TENANT_B) as conn:
        b_ids = {r[0] for r in conn.execute("SELECT id FROM memoria.memories")}
    with loaded.db.transaction(TENANT_A) as conn:
        a_ids = {r[0] for r in conn.execute("SELECT id FROM memoria.memories")}
    assert a_ids and b_ids and not a_ids & b_ids
    seen_a = set()
    for entities in QUERIES:
        for depth in (1, 2, 3):
            rows = worker_rows(loaded, TENANT_A, entities, depth, "age", limit=1000)
            seen_a |= {r[0] for r in rows}
    assert seen_a and seen_a <= a_ids
    # An entity only tenant B has is invisible to tenant A, whatever the backend.
    only_b = "Only In B"
    loaded.store_many([{"content": "b's secret", "entities": [only_b, "Alice"], "tenant": TENANT_B}])
    for depth in (1, 2, 3):
        assert worker_rows(loaded, TENANT_A, [only_b], depth, "age") == []
        assert worker_rows(loaded, TENANT_A, [only_b], depth, "sql") == []
        assert (
            worker_rows(loaded, TENANT_B, [only_b], depth, "age")
            == worker_rows(loaded, TENANT_B, [only_b], depth, "sql")
            != []
        )
    # A tenant that has nothing sees nothing.
    assert worker_rows(loaded, "nobody", ["Alice"], 3, "age") == []


def test_reingest_is_idempotent(loaded, admin):
    before = all_graph_rows(admin)
    for tenant, seed in ((TENANT_A, 1), (TENANT_B, 2)):
        result = loaded.store_many(corpus(tenant, seed), batch_size=40)
        assert result.inserted == 0 and result.duplicates == len(CHAIN) + 60
    assert all_graph_rows(admin) == before
    # A batch mixing duplicates and new memories: only the new ones reach the graph, and the
    # co-occurrence weights follow entity_edges.
    mixed = corpus(TENANT_A, 1)[:10] + [
        {"content": "new: Alice and O'Brien again", "entities": ["Alice", "O'Brien"], "tenant": TENANT_A},
        {"content": "new: Alice and a newcomer", "entities": ["Alice", "New {Comer} $$"], "tenant": TENANT_A},
    ]
    result = loaded.store_many(mixed)
    assert result.inserted == 2 and result.duplicates == 10
    for tenant in (TENANT_A, TENANT_B):
        with loaded.db.transaction(tenant) as conn:
            assert mirror(admin, tenant) == plain_tables(conn)


def test_sync_twice_in_one_transaction_adds_nothing(age_system, admin):
    """Running the graph writer again on the same batch (same transaction) changes nothing."""
    calls = []

    def graph_rows(conn):
        # The batch's rows are not committed yet: read them on the batch's own connection, as the
        # login user (trusted test code may RESET ROLE; memoria_app may not read the graph).
        conn.execute("RESET ROLE")
        try:
            return all_graph_rows(conn)
        finally:
            conn.execute("SET ROLE memoria_app")

    def twice(conn, tenant):
        graph_age.sync_batch(conn, tenant)
        first = graph_rows(conn)
        graph_age.sync_batch(conn, tenant)
        calls.append(first == graph_rows(conn) and len(first["Memory"]) == len(CHAIN) + 30)

    age_system.ingestor.graph_writer = twice
    age_system.store_many(corpus(TENANT_A, 5, n_random=30), batch_size=100)
    assert calls == [True]
    with age_system.db.transaction(TENANT_A) as conn:
        assert mirror(admin, TENANT_A) == plain_tables(conn)


def test_rebuild(loaded, admin):
    b_before = {label: [r for r in rows if TENANT_B in r[1]] for label, rows in all_graph_rows(admin).items()}
    # wipe part of tenant A's mirror behind the library's back
    admin.execute(
        "DELETE FROM memoria_graph.\"RELATED\" WHERE ag_catalog.agtype_object_field_text(properties, 'tenant') = %s",
        (TENANT_A,),
    )
    admin.execute(
        'DELETE FROM memoria_graph."MENTIONS" WHERE id IN (SELECT id FROM memoria_graph."MENTIONS" '
        "WHERE ag_catalog.agtype_object_field_text(properties, 'tenant') = %s LIMIT 5)",
        (TENANT_A,),
    )
    with loaded.db.connection() as conn:
        counts = graph_age.rebuild(conn, TENANT_A)
    with loaded.db.transaction(TENANT_A) as conn:
        truth = plain_tables(conn)
    assert mirror(admin, TENANT_A) == truth
    assert counts == {k: len(v) for k, v in truth.items()}
    b_after = {label: [r for r in rows if TENANT_B in r[1]] for label, rows in all_graph_rows(admin).items()}
    assert b_after == b_before
    for entities in (["Alice"], ["MATCH"]):
        for depth in (1, 2, 3):
            assert worker_rows(loaded, TENANT_A, entities, depth, "age") == worker_rows(
                loaded, TENANT_A, entities, depth, "sql"
            )


def test_cypher_params_is_an_agtype_map():
    text = graph_age.cypher_params(["b", "a", "b", '$$ {x} \\ "q"'], "t'{}", 2)
    assert json.loads(text) == {"names": ['$$ {x} \\ "q"', "a", "b"], "tenant": "t'{}", "depth": 2}


def test_a_schema_before_0003_asks_for_the_upgrade(admin_dsn, server_has_age):
    """This library reaches the graph through 0003's functions only: on an older schema with the graph,
    a batch fails with SchemaError (and writes nothing), the graph worker fails and the query answers."""
    if not server_has_age:
        pytest.skip("the server has no Apache AGE")
    from memoria_pg.config import Config
    from memoria_pg.core.embedding import HashEmbedder
    from memoria_pg.db import migrate
    from memoria_pg.errors import SchemaError
    from memoria_pg.system import MemorySystem

    from .conftest import create_database, drop_database

    name, dsn = create_database(admin_dsn)
    try:
        migrate.upgrade(dsn, "0002")
        with MemorySystem(Config(dsn=dsn, pool_min_size=1, pool_max_size=4), embedder=HashEmbedder()) as system:
            assert system.graph_backend == "age"
            with pytest.raises(SchemaError, match="db upgrade"):
                system.store("Alice met Bob in Paris.", tenant="A")
            with system.db.transaction("A") as conn:
                assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 0
            response = system.query("Alice Bob", tenant="A", workers=["graph"], ranking=False)
            assert "graph_walk" in response.diagnostics.worker_errors["graph"]
        migrate.upgrade(dsn)
        with MemorySystem(Config(dsn=dsn, pool_min_size=1, pool_max_size=4), embedder=HashEmbedder()) as system:
            stored = system.store("Alice met Bob in Paris.", tenant="A", entities=["Alice", "Bob"])
            response = system.query("Alice Bob", tenant="A", workers=["graph"], ranking=False)
            assert [c.memory_id for c in response.candidates] == [stored]
    finally:
        drop_database(admin_dsn, name)
