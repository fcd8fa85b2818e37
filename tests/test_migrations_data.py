"""Migrations under data: a populated database goes down to 0001 and back up to head with every row
and every query answer unchanged, while one MemorySystem keeps serving it (on a server with AGE, its
graph worker needs 0003's functions: below 0003 that one worker fails and the rest answers unchanged)."""

from __future__ import annotations

import random

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from memoria_pg.cli import cli
from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db import load_sql, migrate
from memoria_pg.errors import SchemaError
from memoria_pg.system import MemorySystem

HEAD = migrate.history("")[-1][0]  # the latest revision
NEW_INDEXES = ("memories_metadata_gin", "memory_terms_memory", "entity_edges_dst", "memories_tenant_embedding")
TENANTS = ("acme", "globex", "initech")
PEOPLE = ("Alice Novak", "Bruno Silva", "Chen Wei", "Dara Okafor", "Emil Larsen", "Farah Haddad")
PLACES = ("Lisbon", "Osaka", "Nairobi", "Toronto", "Krakow")
COLOURS = ("teal", "amber", "violet", "crimson")
QUERIES = [  # (text, tenant, memory_type, workers): lexical, entity, phrase, attribute and typed questions
    ("What is Alice Novak's favourite colour?", "acme", None, None),
    ("Bruno Silva Lisbon", "globex", None, None),
    ('notes about the "budget review"', "initech", None, None),
    ("Where does Chen Wei live?", "acme", None, None),
    ("when did Dara Okafor travel", "globex", "episodic", None),
    ("journal entry about Osaka", "initech", "journal", None),
    ("Emil Larsen Farah Haddad", "acme", None, ["graph"]),
    ("crimson", "globex", None, ["bm25"]),
]


def memories(rng: random.Random) -> list[dict]:
    out = []
    for i in range(360):
        tenant, person, other = rng.choice(TENANTS), rng.choice(PEOPLE), rng.choice(PEOPLE)
        place, colour = rng.choice(PLACES), rng.choice(COLOURS)
        memory_type, content = rng.choice(
            [
                ("preference", f"{person}'s favourite colour is {colour}."),
                ("fact", f"{person} lives in {place}."),
                ("episodic", f"{person} met {other} in {place} to discuss the budget review ({i})."),
                ("semantic", f"The {colour} protocol means every review in {place} has two readers ({i})."),
                ("general", f"Notes {i}: {person} and {other} shared {colour} slides about the budget review."),
                ("journal", f"Journal {i}: a quiet day in {place}, {person} called."),
                ("procedural", f"How to file the {colour} expense form {i}: ask {person}, then scan it."),
            ]
        )
        record = {
            "content": content,
            "tenant": tenant,
            "memory_type": memory_type,
            "metadata": {"source": rng.choice(["chat", "email"]), "seq": i},
            "importance": round(rng.random(), 2),
        }
        if i % 7 == 0:  # supplied entities and attributes, besides the extracted ones
            record["entities"] = [person, other, place]
            record["attributes"] = [[person, "team", rng.choice(["red", "blue"])]]
        out.append(record)
    return out


def memoria_tables(conn: psycopg.Connection) -> list[str]:
    """Every table of the memoria schema (parents and partitions) and of the AGE graph, if any; not the
    server's API keys (0011: credentials, not memories; a downgrade below 0011 drops them) nor the
    memories' history (0010: a downgrade below it drops the log; the memories themselves are kept)."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('memoria', 'memoria_graph') AND c.relkind IN ('r', 'p') ORDER BY 1"
        )
        if r[0] not in ("memoria.api_keys", "memoria.memory_history")
    ]


def snapshot(system: MemorySystem, dsn: str, *, answers: bool = True) -> dict:
    with psycopg.connect(dsn) as conn:  # the superuser: all tenants
        counts = {
            t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t))).fetchone()[0]
            for t in memoria_tables(conn)
        }
        content = conn.execute(
            "SELECT md5(string_agg(id || ':' || content || metadata::text || importance, ',' "
            "ORDER BY id)) FROM memoria.memories"
        ).fetchone()[0]
    found = {}
    for text, tenant, memory_type, workers in QUERIES if answers else ():
        r = system.query(text, tenant=tenant, memory_type=memory_type, workers=workers, ranking=False, trace=False)
        found[(text, tenant)] = (
            [c.memory_id for c in r.memories],
            sorted(r.diagnostics.completed_sources),
            [round(c.retrieval_score, 9) for c in r.memories],
        )
    return {"counts": counts, "content": content, "answers": found}


def settled(answers: dict) -> dict:
    """Each answer's memories and scores rounded to 1e-6, ties in id order, and its sources."""
    out = {}
    for key, (ids, sources, scores) in answers.items():
        pairs = sorted(zip(ids, scores, strict=True), key=lambda p: (-round(p[1], 6), p[0]))
        out[key] = ([(i, round(score, 6)) for i, score in pairs], sources)
    return out


def index_partitions(dsn: str, name: str) -> set[str]:
    """The tables that carry the valid index `name` (a partitioned parent: its own and its partitions')."""
    with psycopg.connect(dsn) as conn:
        return {
            r[0]
            for r in conn.execute(
                "SELECT x.indrelid::regclass::text FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE x.indisvalid AND (i.relname = %(n)s OR x.indexrelid IN (SELECT inhrelid FROM pg_inherits "
                "WHERE inhparent = to_regclass('memoria.' || %(n)s)))",
                {"n": name},
            )
        }


def partition_tree(dsn: str, parent: str) -> set[str]:
    """A partitioned table and all its partitions."""
    with psycopg.connect(dsn) as conn:
        return {
            r[0] for r in conn.execute("SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass)", (parent,))
        }


@pytest.fixture
def populated(dsn: str):
    migrate.add_memory_type(dsn, "journal")  # a shard created after the first migration
    with MemorySystem(Config(dsn=dsn, pool_min_size=1, pool_max_size=8), embedder=HashEmbedder()) as system:
        result = system.store_many(memories(random.Random(11)), batch_size=100)
        assert result.inserted > 300
        system.query("Alice Novak colour", tenant="acme", trace=True)  # traces are data too
        yield system


def test_down_to_0001_and_up_to_head_keeps_rows_and_answers(populated: MemorySystem, dsn: str):
    before = snapshot(populated, dsn)
    assert snapshot(populated, dsn) == before  # the answers are deterministic to begin with
    assert all(ids for ids, _, _ in before["answers"].values())
    # memoria.vector_indexes (0015) records per-tenant HNSW indexes, which only large tenants get
    # (tests/test_vector_indexes.py takes 0015 both ways with them).
    empty = [t for t, n in before["counts"].items() if n == 0 and not t.endswith("_default")]
    assert empty == ["memoria.vector_indexes"]
    assert migrate.current(dsn) == HEAD
    assert index_partitions(dsn, "memories_metadata_gin") == partition_tree(dsn, "memoria.memories")

    migrate.downgrade(dsn, "0001")
    assert migrate.current(dsn) == "0001"
    assert all(not index_partitions(dsn, name) for name in NEW_INDEXES)
    # The rows are untouched (memory_access, created by 0008, and vector_indexes, by 0015, are gone).
    mid = snapshot(populated, dsn, answers=False)
    assert mid["content"] == before["content"]
    later = ("memoria.memory_access", "memoria.vector_indexes")
    expected = {t: n for t, n in before["counts"].items() if t not in later}
    # Before 0017 each co-occurring pair was two rows (and two RELATED edges), one per direction.
    related = 'memoria_graph."RELATED"'
    expected["memoria.entity_edges"] *= 2
    if related in expected:
        expected["memoria_graph._ag_label_edge"] += expected[related]
        expected[related] *= 2
    assert mid["counts"] == expected
    # The same system, mid-migration: this library needs 0008's memory_access, and says so.
    with pytest.raises(SchemaError, match="memoria-pg db upgrade"):
        populated.query("Emil Larsen", tenant="acme", ranking=False)

    migrate.upgrade(dsn)
    assert migrate.current(dsn) == HEAD
    # 0021 writes the BM25 postings again (the same rows, impact included: tests/test_migration_0021.py)
    # and analyzes them: a plan that sums a score's terms in another order can move it by 1e-9, and
    # with it the order of candidates whose scores tie.
    after = snapshot(populated, dsn)
    assert after["counts"] == before["counts"] and after["content"] == before["content"]
    assert settled(after["answers"]) == settled(before["answers"])
    assert index_partitions(dsn, "memories_metadata_gin") == partition_tree(dsn, "memoria.memories")
    assert index_partitions(dsn, "memory_terms_memory") == partition_tree(dsn, "memoria.memory_terms")
    assert index_partitions(dsn, "entity_edges_dst") == {"memoria.entity_edges"}
    assert index_partitions(dsn, "memories_tenant_embedding") == partition_tree(dsn, "memoria.memories")

    # Still writable, and a shard added after the upgrade inherits the new indexes.
    assert populated.store("Alice Novak moved to Osaka.", tenant="acme", memory_type="fact") is not None
    assert populated.add_memory_type("recipe")
    assert "memoria.memories_recipe" in index_partitions(dsn, "memories_metadata_gin")
    assert "memoria.memory_terms_recipe" in index_partitions(dsn, "memory_terms_memory")
    assert "memoria.memories_recipe" in index_partitions(dsn, "memories_tenant_embedding")


def plan(dsn: str, query: str, params: tuple) -> str:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off")  # a few hundred rows: force the choice an index allows
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN {query}", params))


def test_the_new_indexes_serve_metadata_filters_and_deletes(populated: MemorySystem, dsn: str):
    contained = plan(dsn, "SELECT id FROM memoria.memories WHERE metadata @> %s::jsonb", ('{"source": "email"}',))
    assert "Bitmap Index Scan on memories_general_metadata_idx" in contained, contained
    # A memory's postings are deleted by tenant and id (migration 0010's delete_memories; the index is
    # (tenant, memory_id) since 0022).
    postings = plan(dsn, "DELETE FROM memoria.memory_terms WHERE tenant = %s AND memory_id = %s", ("acme", 1))
    assert "Index Scan using memory_terms_general_tenant_memory_id_idx" in postings, postings
    edges = plan(dsn, "SELECT 1 FROM memoria.entity_edges WHERE dst_id = %s", (1,))
    assert "entity_edges_dst" in edges, edges


def test_the_exact_vector_search_reads_the_covering_index_only(populated: MemorySystem, dsn: str):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memoria.memories")  # index-only scans need the visibility map
    with populated.db.transaction("acme") as conn:
        conn.execute("SET LOCAL enable_seqscan = off")  # a few hundred rows: force the choice an index allows
        rows = conn.execute(
            "EXPLAIN " + load_sql("workers/vector_exact"),
            {"embedding": HashEmbedder().embed(["teal"])[0], "memory_type": "fact", "limit": 5},
        )
        text = "\n".join(r[0] for r in rows)
    assert "Index Only Scan using memories_fact_tenant_memory_type_id_embedding_idx" in text, text


def test_ranked_queries_keep_the_exact_search_index_only(populated: MemorySystem, dsn: str):
    # Ranked queries count accesses in memory_access: the memories' pages stay all-visible, so the
    # index-only scan fetches no heap tuple (an UPDATE of the memories would have cleared their pages'
    # visibility bits until the next VACUUM, and every fetch would go to the heap).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memoria.memories")
    for text in ("teal", "Lisbon", "Alice Novak", "Osaka", "budget"):
        assert populated.query(text, tenant="acme", memory_type="fact", top_k=20).memories
    assert populated.settle(5)  # the access writes end after their queries
    with populated.db.transaction("acme") as conn:
        assert conn.execute("SELECT sum(access_count) FROM memoria.memory_access").fetchone()[0] > 0
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF) " + load_sql("workers/vector_exact"),
            {"embedding": HashEmbedder().embed(["teal"])[0], "memory_type": "fact", "limit": 5},
        )
        plan = "\n".join(r[0] for r in rows)
    assert "Index Only Scan" in plan and "Heap Fetches: 0" in plan, plan


def test_db_history_lists_every_revision():
    result = CliRunner().invoke(cli, ["db", "history"], env={"MEMORIA_DSN": None})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split("  ")[0] for line in lines][:3] == ["base -> 0001", "0001 -> 0002", "0002 -> 0003"]
    assert lines[1] == "0001 -> 0002  Indexes for metadata filters, deletes and the attribute worker."
    assert lines[2].startswith("0002 -> 0003  The AGE graph only through SECURITY DEFINER functions")
    assert (
        lines[3]
        == "0003 -> 0004  A covering b-tree of each shard's vectors by tenant, for exact vector search of small tenants."
    )


def test_every_step_up_and_down_works_on_an_empty_schema(empty_dsn: str):
    up, down = migrate.upgrade, migrate.downgrade
    for move, step, expected in (
        (up, "0001", "0001"),
        (up, "head", HEAD),
        (down, "base", None),
        (up, "0002", "0002"),
        (up, "0003", "0003"),
        (down, "0002", "0002"),
        (down, "0001", "0001"),
        (up, "head", HEAD),
    ):
        move(empty_dsn, step)
        assert migrate.current(empty_dsn) == expected
