"""Per-tenant HNSW indexes (memoria_pg/db/vector_indexes.py, migration 0015): which tenants get one,
that the vector worker's HNSW statement searches it (and finds what the exact search finds), that the
tenant's name goes into the index predicate safely, drops, rebuilds, the lock, the CLI, 0015 and 0016
(no shared HNSW index) both ways under data, and the sync after an upgrade across 0016."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner

from memoria_pg.cli import cli
from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.text import tokenize
from memoria_pg.core.types import ProcessedQuery, Shard
from memoria_pg.db import migrate, vector_indexes
from memoria_pg.errors import ServerError
from memoria_pg.query.shards import ALL
from memoria_pg.query.workers import WorkerContext
from memoria_pg.query.workers.vector import VectorWorker
from memoria_pg.system import MemorySystem

HEAD = migrate.history("")[-1][0]  # the latest revision
BOUND = 20  # vector_exact_max_rows of these tests: a tenant above it in a type gets an index there
ODD = 'o\'brien \\ "x"; DROP TABLE memoria.memories; --'  # a tenant name that must stay a value


def unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def big(config: Config):
    """Tenant `big`: 30 general and 5 fact memories; ODD: 25 general; `small`: 8 general."""
    with MemorySystem(config.replace(vector_exact_max_rows=BOUND), embedder=HashEmbedder()) as system:
        rows = [("big", "general", 30, 1), ("big", "fact", 5, 2), (ODD, "general", 25, 3), ("small", "general", 8, 4)]
        for tenant, memory_type, n, seed in rows:
            system.store_many(
                [
                    {
                        "content": f"{memory_type} point {i}",
                        "tenant": tenant,
                        "memory_type": memory_type,
                        "embedding": v,
                    }
                    for i, v in enumerate(unit(n, seed))
                ]
            )
        yield system


def recorded(dsn: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(dsn) as conn:
        return {
            (t, mt): name
            for t, mt, name in conn.execute("SELECT tenant, memory_type, index_name FROM memoria.vector_indexes")
        }


def index_of(dsn: str, name: str) -> tuple[str, str, bool] | None:
    """(table, predicate, valid) of memoria.<name>, or None."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT i.indrelid::regclass::text, pg_get_expr(i.indpred, i.indrelid), i.indisvalid FROM pg_index i "
            "WHERE i.indexrelid = to_regclass('memoria.' || quote_ident(%s))",
            (name,),
        ).fetchone()


def test_the_tenants_above_the_bound_get_an_index_of_their_own(big, dsn):
    dry = big.sync_vector_indexes(dry_run=True)
    assert [(a.tenant, a.memory_type, a.rows, a.action) for a in dry] == sorted(
        [("big", "general", 30, "build"), (ODD, "general", 25, "build")]
    )
    assert recorded(dsn) == {}  # a dry run changes nothing
    done = big.sync_vector_indexes()
    assert all(a.seconds is not None for a in done)
    names = recorded(dsn)
    assert set(names) == {("big", "general"), (ODD, "general")}
    for (tenant, memory_type), name in names.items():
        assert name == vector_indexes.index_name(tenant, memory_type)
        table, predicate, valid = index_of(dsn, name)
        assert table == "memoria.memories_general" and valid
        with psycopg.connect(dsn) as conn:  # the predicate holds the tenant's name exactly, as a value
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE {predicate}").fetchone()[0] == (
                30 if tenant == "big" else 25
            )
    assert [a.action for a in big.sync_vector_indexes()] == ["keep", "keep"]  # a second run builds nothing


def hnsw_plan_and_hits(system: MemorySystem, tenant: str, query: np.ndarray, shard: Shard = ALL):
    ctx = WorkerContext(
        query=ProcessedQuery(text="point", normalized="point", tokens=tokenize("point"), tenant=tenant),
        embedding=query,
        shards=(shard,),
        limit=10,
        graph_limit=10,
        graph_depth=1,
        config=system.config.replace(vector_exact_max_rows=0),  # the HNSW form, whatever the size
    )
    worker = VectorWorker()
    with system.db.transaction(tenant) as conn:
        # At a few dozen memories the planner rightly sorts them all; without sorts it shows which HNSW
        # index it can take (the tenant's own: its predicate proven). The choice by cost, at 2,000
        # memories: test_the_sync_analyzes_what_it_built_on_so_a_fresh_load_takes_its_index.
        conn.execute("SET LOCAL enable_sort = off")
        ((text, params),) = worker.statements_for(conn, ctx)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + text, params))
        hits = worker.run(conn, ctx)
        exact = worker.run(conn, dataclasses.replace(ctx, config=system.config.replace(vector_exact_max_rows=10**6)))
    return plan, hits, exact


@pytest.mark.parametrize("tenant", ["big", ODD])
def test_the_hnsw_statement_searches_the_tenants_own_index(big, dsn, tenant):
    query = unit(1, 9)[0]
    before, hits, exact = hnsw_plan_and_hits(big, tenant, query, Shard("general"))
    own = vector_indexes.index_name(tenant, "general")
    # no index of its own yet, and no shared one (0016): the HNSW statement is an exact search
    assert own not in before and "hnsw" not in before.lower()
    assert [(h.memory_id, round(h.score, 5)) for h in hits] == [(h.memory_id, round(h.score, 5)) for h in exact]
    big.sync_vector_indexes()
    plan, hits, exact = hnsw_plan_and_hits(big, tenant, query, Shard("general"))
    assert f"Index Scan using {own} on memories_general" in plan, plan
    # a graph of 25-30 vectors searched with ef_search 100 is the exact search; so is the whole table's
    # (with vector_exact_max_rows 0 one statement over every type: test_a_large_tenants_whole_table...
    # shows the split the worker makes above a bound)
    assert [(h.memory_id, round(h.score, 5)) for h in hits] == [(h.memory_id, round(h.score, 5)) for h in exact]
    _, hits, exact = hnsw_plan_and_hits(big, tenant, query, ALL)
    assert [(h.memory_id, round(h.score, 5)) for h in hits] == [(h.memory_id, round(h.score, 5)) for h in exact]
    # another tenant's statement never takes it (its predicate is not that tenant's)
    plan, hits, exact = hnsw_plan_and_hits(big, "small", query, Shard("general"))
    assert own not in plan and vector_indexes.PREFIX not in plan
    assert {h.memory_id for h in hits} == {h.memory_id for h in exact}


def test_a_large_tenants_whole_table_is_searched_type_by_type(big, dsn):
    """Above its exact budget, the whole table is one search per type the tenant has: HNSW on the
    tenant's own index where the type is large, exact where it is small; merged, the nearest limit."""
    big.sync_vector_indexes()
    query = unit(1, 11)[0]
    ctx = WorkerContext(
        query=ProcessedQuery(text="point", normalized="point", tokens=tokenize("point"), tenant="big"),
        embedding=query,
        shards=(ALL,),
        limit=10,
        graph_limit=10,
        graph_depth=1,
        config=big.config.replace(vector_exact_max_rows=15),  # general 30 > 15, fact 5; 35 > 2 x 15
    )
    worker = VectorWorker()
    with big.db.transaction("big") as conn:
        ((text, params),) = worker.statements_for(conn, ctx)  # one statement, the types in order
        fact, general = text.split("\nUNION ALL\n")
        assert (params["memory_type_0"], params["memory_type_1"]) == ("fact", "general")
        assert "cosine_distance" in fact and "<=>" in general  # fact exact, general HNSW
        conn.execute("SET LOCAL enable_sort = off")  # as in hnsw_plan_and_hits: 30 memories sort cheaper
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + text, params))
        conn.execute("RESET enable_sort")
        assert f"Index Scan using {vector_indexes.index_name('big', 'general')}" in plan, plan
        assert "memories_fact" in plan and "memories_episodic" not in plan  # each branch its partition
        hits = worker.run(conn, ctx)
        exact = worker.run(conn, dataclasses.replace(ctx, config=big.config.replace(vector_exact_max_rows=10**6)))
    assert len(hits) == 10 and [h.memory_id for h in hits] == [h.memory_id for h in exact]
    assert [round(h.score, 5) for h in hits] == [round(h.score, 5) for h in exact]


def test_an_index_whose_tenant_shrank_is_dropped_and_an_unusable_one_rebuilt(big, dsn):
    big.sync_vector_indexes()
    name = vector_indexes.index_name("big", "general")
    with psycopg.connect(dsn, autocommit=True) as conn:  # as a failed CREATE INDEX CONCURRENTLY leaves it
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('memoria.' || %s)", (name,))
    assert {a.tenant: a.action for a in big.sync_vector_indexes(dry_run=True)} == {"big": "build", ODD: "keep"}
    big.sync_vector_indexes()
    assert index_of(dsn, name)[2]
    # 30 -> 12 memories: between half the bound and the bound, the index stays (no rebuilding back and forth)
    ids = [m.id for m in big.list_memories(tenant="big", memory_type="general", limit=100)]
    for memory_id in ids[:18]:
        big.delete(memory_id, tenant="big")
    assert {a.tenant: a.action for a in big.sync_vector_indexes()}["big"] == "keep"
    for memory_id in ids[18:21]:  # 9: below half the bound
        big.delete(memory_id, tenant="big")
    assert {a.tenant: (a.action, a.rows) for a in big.sync_vector_indexes()}["big"] == ("drop", 9)
    assert index_of(dsn, name) is None and ("big", "general") not in recorded(dsn)
    assert ("big", "general") not in {(a.tenant, a.memory_type) for a in big.sync_vector_indexes()}


def test_sync_limited_to_tenants_and_refused_while_another_runs(big, dsn):
    assert [a.tenant for a in big.sync_vector_indexes(["big", "small"])] == ["big"]
    assert set(recorded(dsn)) == {("big", "general")}
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended('memoria.vector_indexes', 0))")
        with pytest.raises(ServerError, match="another `memoria-pg db vector-indexes` is running"):
            big.sync_vector_indexes()
        assert big.sync_vector_indexes(dry_run=True)  # reading what would be done needs no lock
    # vector_exact_max_rows 0 (never exact): every (tenant, type) with a memory gets its own
    assert {(a.tenant, a.memory_type) for a in vector_indexes.sync(dsn, 0, dry_run=True) if a.action == "build"} == {
        ("big", "fact"),
        (ODD, "general"),
        ("small", "general"),
    }


def test_the_cli_builds_lists_as_json_and_dry_runs(big, dsn):
    def invoke(*args: str):
        env = {"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None, "MEMORIA_VECTOR_EXACT_MAX_ROWS": str(BOUND)}
        return CliRunner().invoke(cli, ["--dsn", dsn, "db", "vector-indexes", *args], env=env)

    dry = invoke("--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "build (dry run)" in dry.stdout and recorded(dsn) == {}
    built = invoke("--tenant", "big", "--json")
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout) == [
        {"tenant": "big", "memory_type": "general", "memories": 30, "action": "build",
         "index": vector_indexes.index_name("big", "general")}
    ]  # fmt: skip
    assert "build memories_vec_" in built.stderr
    bad = invoke("--tenant", "")
    assert bad.exit_code != 0 and "tenant must be a non-empty string" in bad.output


def test_0015_both_ways_under_data(big, dsn):
    big.sync_vector_indexes()
    names = recorded(dsn)
    big.close()
    migrate.downgrade(dsn, "0014")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('memoria.vector_indexes')").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 68  # the memories stay
    assert all(index_of(dsn, name) is None for name in names.values())  # its indexes went with it
    migrate.upgrade(dsn)
    assert recorded(dsn) == {}
    assert [a.action for a in vector_indexes.sync(dsn, BOUND)] == ["build", "build"]


def test_memoria_pg_ingest_gives_the_grown_tenant_its_index(dsn, tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [{"content": f"note {i} on the harbour", "tenant": "port"} for i in range(BOUND + 3)]
    rows += [{"content": f"note {i} on the hill", "tenant": "hill"} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None, "MEMORIA_VECTOR_EXACT_MAX_ROWS": str(BOUND)}
    done = CliRunner().invoke(cli, ["--dsn", dsn, "ingest", str(path)], env=env)
    assert done.exit_code == 0, done.output
    assert f"build the vector index of tenant 'port', general ({BOUND + 3} memories)" in done.stderr
    assert set(recorded(dsn)) == {("port", "general")}
    skipped = CliRunner().invoke(cli, ["--dsn", dsn, "ingest", "--no-vector-indexes", str(path)], env=env)
    assert skipped.exit_code == 0 and "vector index" not in skipped.stderr


def test_the_async_api_syncs_too(big, dsn):
    import asyncio

    from memoria_pg import AsyncMemorySystem

    async def main():
        memory = AsyncMemorySystem(big, owns_system=False)
        dry = await memory.sync_vector_indexes(["big"], dry_run=True)
        done = await memory.sync_vector_indexes(["big"])
        return dry, done

    dry, done = asyncio.run(main())
    assert [(a.tenant, a.action, a.seconds) for a in dry] == [("big", "build", None)]
    assert [(a.tenant, a.action) for a in done] == [("big", "build")] and set(recorded(dsn)) == {("big", "general")}


def test_the_server_keeps_them_by_itself(big, dsn):
    """`memoria-pg serve` syncs at start-up and every MEMORIA_SERVE_VECTOR_INDEX_SYNC_SECONDS."""
    import time

    from tests.service_live import live_server

    env = {"MEMORIA_VECTOR_EXACT_MAX_ROWS": str(BOUND), "MEMORIA_SERVE_VECTOR_INDEX_SYNC_SECONDS": "0.5"}

    def wait_for(keys: set[tuple[str, str]]) -> None:
        deadline = time.monotonic() + 60
        while set(recorded(dsn)) != keys and time.monotonic() < deadline:
            time.sleep(0.2)
        assert set(recorded(dsn)) == keys

    with live_server(dsn, env=env):
        wait_for({("big", "general"), (ODD, "general")})  # at start-up
        big.store_many(
            [{"content": f"late {i}", "tenant": "late", "embedding": v} for i, v in enumerate(unit(BOUND + 1, 5))]
        )
        wait_for({("big", "general"), (ODD, "general"), ("late", "general")})  # a later round


def shared_hnsw(dsn: str) -> list[str]:
    """The partitions that have the shards' shared HNSW index (0001, dropped by 0016)."""
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid "
                "JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid "
                "JOIN pg_am a ON a.oid = i.relam "
                "WHERE h.inhparent = 'memoria.memories'::regclass AND a.amname = 'hnsw' AND x.indpred IS NULL "
                "ORDER BY 1"
            )
        ]


def test_0016_drops_the_shared_index_both_ways_under_data(big, dsn):
    big.sync_vector_indexes()
    names = recorded(dsn)
    query = unit(1, 9)[0]
    _, before, _ = hnsw_plan_and_hits(big, "big", query, Shard("general"))
    big.close()
    assert shared_hnsw(dsn) == []
    migrate.downgrade(dsn, "0015")
    partitions = shared_hnsw(dsn)
    assert "memories_general" in partitions and "memories_default" in partitions  # every shard's again
    assert all(index_of(dsn, name) is not None for name in names.values())  # the tenants' own stay
    migrate.upgrade(dsn)
    assert shared_hnsw(dsn) == [] and recorded(dsn) == names
    with MemorySystem(big.config, embedder=HashEmbedder(), auto_migrate=False) as system:
        plan, after, _ = hnsw_plan_and_hits(system, "big", query, Shard("general"))
    assert names[("big", "general")] in plan
    assert [h.memory_id for h in after] == [h.memory_id for h in before]


def test_db_upgrade_and_auto_migrate_give_large_tenants_their_index(big, dsn):
    """Across 0016 no index serves a large tenant's HNSW search but its own: `memoria-pg db upgrade`
    and MemorySystem's auto_migrate build them right after migrating."""
    big.close()
    migrate.downgrade(dsn, "0015")
    env = {"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None, "MEMORIA_VECTOR_EXACT_MAX_ROWS": str(BOUND)}
    skipped = CliRunner().invoke(cli, ["--dsn", dsn, "db", "upgrade", "--no-vector-indexes"], env=env)
    assert skipped.exit_code == 0, skipped.output
    assert recorded(dsn) == {} and "vector index" not in skipped.stderr
    migrate.downgrade(dsn, "0015")
    with psycopg.connect(dsn, autocommit=True) as other:  # another sync holds the lock: the upgrade stands
        other.execute("SELECT pg_advisory_lock(hashtextextended('memoria.vector_indexes', 0))")
        busy = CliRunner().invoke(cli, ["--dsn", dsn, "db", "upgrade"], env=env)
        assert busy.exit_code == 0, busy.output
        assert f"schema at {HEAD}" in busy.stdout and "vector indexes not synced: another" in busy.stderr
        migrate.downgrade(dsn, "0015")
        MemorySystem(big.config, embedder=HashEmbedder(), auto_migrate=True).close()  # migrates, warns
        assert migrate.current(dsn) == HEAD and recorded(dsn) == {}
    migrate.downgrade(dsn, "0015")
    done = CliRunner().invoke(cli, ["--dsn", dsn, "db", "upgrade"], env=env)
    assert done.exit_code == 0, done.output
    assert f"schema at {HEAD}" in done.stdout
    assert "build the vector index of tenant 'big', general (30 memories)" in done.stderr
    assert set(recorded(dsn)) == {("big", "general"), (ODD, "general")}

    names = recorded(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE memoria.vector_indexes")
        for name in names.values():
            conn.execute(f"DROP INDEX memoria.{name}")  # hash names: no quoting needed
    migrate.downgrade(dsn, "0015")
    MemorySystem(big.config, embedder=HashEmbedder(), auto_migrate=True).close()
    assert recorded(dsn) == names and all(index_of(dsn, name)[2] for name in names.values())


def test_v3_searches_a_large_tenant_with_the_vector_worker_and_explain_shows_it(big, dsn):
    """V3's one statement searches exactly within the bound; above it the vector worker searches (its
    own index where it has one, which at these sizes the planner rightly skips for a sort), and `explain`
    shows that search's statements after the empty one."""
    big.sync_vector_indexes()
    query = unit(1, 9)[0]
    # ODD: 25 general memories, above the bound (20 per type); big: 35 over two types, within 2 x 20
    response = big.query("point", tenant=ODD, embedding=query, v4=False, ranking=False, top_k=5)
    exact = big.query("point", tenant=ODD, embedding=query, workers=["vector"], ranking=False, top_k=5)
    assert [m.memory_id for m in response.memories] == [m.memory_id for m in exact.memories]
    assert response.diagnostics.worker_hits == {"vector": 25}
    text = big.explain(response)
    assert "the tenant is above vector_exact_max_rows" in text
    assert "ORDER BY m.embedding <=>" in text  # the worker's HNSW form (at 25 memories planned as a sort)
    within = big.query("point", tenant="big", embedding=query, v4=False, ranking=False, top_k=5)
    assert "the tenant is above" not in big.explain(within) and within.diagnostics.worker_hits == {"vector": 35}


def test_0016s_downgrade_keeps_a_shared_index_an_administrator_created_again(big, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:  # as docs/measurements.md's "No shared HNSW index" shows
        conn.execute(
            "CREATE INDEX memories_embedding_hnsw ON memoria.memories USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 8)"
        )
    big.close()
    migrate.downgrade(dsn, "0015")  # does not trip over it
    assert "memories_general" in shared_hnsw(dsn)
    migrate.upgrade(dsn)
    assert shared_hnsw(dsn) == []


def test_the_sync_analyzes_what_it_built_on_so_a_fresh_load_takes_its_index(config: Config, dsn):
    """Right after a bulk load the statistics do not know the tenant (estimated at a row or so), and the
    planner would keep the exact search beside the new index until autovacuum's ANALYZE: the sync
    analyzes the partitions it built on. (2,000 memories: enough for the index to win by cost.)"""
    vectors = unit(2000, 21)
    with psycopg.connect(dsn, autocommit=True) as conn:  # nor will autovacuum, during the test
        conn.execute("ALTER TABLE memoria.memories_general SET (autovacuum_enabled = false)")
    with MemorySystem(config.replace(vector_exact_max_rows=100), embedder=HashEmbedder()) as system:
        system.store_many([{"content": f"note {i}", "tenant": "bulk", "embedding": v} for i, v in enumerate(vectors)])
        with psycopg.connect(dsn) as conn:  # nothing has analyzed the load yet
            assert (
                conn.execute(
                    "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'memories_general'"
                ).fetchone()[0]
                is None
            )
        assert [a.action for a in system.sync_vector_indexes()] == ["build"]
        plan, hits, exact = hnsw_plan_and_hits(system, "bulk", vectors[0], Shard("general"))
    assert f"Index Scan using {vector_indexes.index_name('bulk', 'general')}" in plan, plan
    assert hits[0].memory_id == exact[0].memory_id  # the vector itself, first


def grow(system: MemorySystem, tenant: str, memory_type: str, n: int, seed: int) -> None:
    system.store_many(
        [
            {"content": f"{memory_type} grown {seed} {i}", "tenant": tenant, "memory_type": memory_type, "embedding": v}
            for i, v in enumerate(unit(n, seed))
        ]
    )


def test_the_cap_gives_the_largest_tenants_of_a_type_the_indexes(big, dsn):
    """vector_index_max_per_type: every partial index on a partition costs each insert and HNSW plan
    there (benchmarks/partial_indexes.py), so a type holds at most that many, the largest tenants'. A
    tenant left out is searched exactly ("skip"); one with more than twice the rows of the smallest
    indexed tenant takes its place; tenants of about one size do not trade places."""
    capped = vector_indexes.sync(dsn, BOUND, max_per_type=1)
    by = {(a.tenant, a.memory_type): a.action for a in capped}
    assert by == {("big", "general"): "build", (ODD, "general"): "skip"}  # 30 before 25
    assert set(recorded(dsn)) == {("big", "general")}
    grow(big, ODD, "general", 30, 31)  # 55: not twice big's 30, no trade
    assert {a.tenant: a.action for a in vector_indexes.sync(dsn, BOUND, max_per_type=1)} == {"big": "keep", ODD: "skip"}
    grow(big, ODD, "general", 10, 32)  # 65: more than twice, big gives its place
    swapped = vector_indexes.sync(dsn, BOUND, max_per_type=1)
    assert {a.tenant: (a.action, a.rows) for a in swapped} == {"big": ("drop", 30), ODD: ("build", 65)}
    assert set(recorded(dsn)) == {(ODD, "general")}
    assert index_of(dsn, vector_indexes.index_name("big", "general")) is None
    # a sync limited to one tenant counts the others' indexes, and frees a smaller one's place for it
    grow(big, "big", "general", 120, 33)  # 150 > 2 x 65
    limited = vector_indexes.sync(dsn, BOUND, tenants=["big"], max_per_type=1)
    assert [(a.tenant, a.action) for a in limited] == [("big", "build"), (ODD, "drop")]
    assert set(recorded(dsn)) == {("big", "general")}
    # a higher cap builds the one left out; a lower one drops the smallest down to it
    assert {a.tenant: a.action for a in vector_indexes.sync(dsn, BOUND, max_per_type=2)} == {
        "big": "keep",
        ODD: "build",
    }
    assert {a.tenant: a.action for a in vector_indexes.sync(dsn, BOUND, max_per_type=1)} == {"big": "keep", ODD: "drop"}
    # no cap (0): every tenant above the bound
    assert {a.tenant: a.action for a in vector_indexes.sync(dsn, BOUND, dry_run=True)} == {"big": "keep", ODD: "build"}


def test_a_tenant_the_cap_leaves_out_is_searched_exactly_and_the_keeper_does_not_build_it(config: Config, dsn):
    with MemorySystem(
        config.replace(vector_exact_max_rows=BOUND, vector_index_max_per_type=1, vector_index_auto=True),
        embedder=HashEmbedder(),
    ) as system:
        assert system.index_keeper is not None
        grow(system, "first", "general", 40, 41)
        assert system.index_keeper.wait(30)
        grow(system, "second", "general", 30, 42)
        assert system.index_keeper.wait(30)
        assert set(recorded(dsn)) == {("first", "general")}
        assert [(a.tenant, a.action) for a in system.index_keeper.built] == [("first", "build"), ("second", "skip")]
        # the one left out: the same nearest memories as the exact search, through the covering index
        query = unit(30, 42)[3]
        plan, hits, exact = hnsw_plan_and_hits(system, "second", query, Shard("general"))
        assert "memories_vec_" not in plan
        assert [h.memory_id for h in hits] == [h.memory_id for h in exact]
    cli_env = {"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None, "MEMORIA_VECTOR_EXACT_MAX_ROWS": str(BOUND)}
    listed = CliRunner().invoke(
        cli, ["--dsn", dsn, "db", "vector-indexes", "--json"], env={**cli_env, "MEMORIA_VECTOR_INDEX_MAX_PER_TYPE": "1"}
    )
    assert listed.exit_code == 0, listed.output
    assert {(r["tenant"], r["action"]) for r in json.loads(listed.stdout)} == {("first", "keep"), ("second", "skip")}
    assert "no vector index for tenant 'second', general (30 memories)" in listed.stderr
