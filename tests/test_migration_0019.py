"""Migration 0019 under data: memory_entities' primary key gains memory_type as an included column, so an
untyped graph walk reads an entity's most recent memories in one index range. The walks (the plain
tables' statement, and memoria.graph_walk on a server with AGE) answer the same rows at 0018, at 0019
and back at 0018, typed and untyped; the ingest's ON CONFLICT on the key holds at both."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.db import migrate
from memoria_pg.db.resources import load_sql

KEY = "SELECT pg_get_indexdef('memoria.memory_entities_pkey'::regclass)"
PEOPLE = ("Alice Novak", "Bruno Silva", "Chen Wei", "Dara Okafor")
TYPES = ("fact", "general", "episodic")
SEEDS = (["alice novak"], ["bruno silva", "chen wei"])


def records(tag: str) -> list[dict]:
    pairs = [(a, b) for a in PEOPLE for b in PEOPLE if a < b]
    return [
        {"content": f"{a} met {b} about plan {tag}-{i}", "tenant": "acme", "memory_type": TYPES[i % 3]}
        for i, (a, b) in enumerate(pairs * 3)
    ]


def walks(dsn: str) -> list[list[tuple]]:
    """Every seed's walk, untyped and per type, at depths 1 and 2: the plain tables' statement, then
    memoria.graph_walk where the server has the AGE graph (the same rows are asserted)."""
    params = [
        {"entities": s, "depth": d, "memory_type": t, "limit": 50, "fanout": 10, "entity_memories": 4}
        for s in SEEDS
        for d in (1, 2)
        for t in (None, *TYPES)
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('memoria.tenant', 'acme', false)")
        found = [conn.execute(load_sql("workers/graph"), p).fetchall() for p in params]
        if conn.execute("SELECT to_regproc('memoria.graph_walk') IS NOT NULL").fetchone()[0]:
            walked = [
                conn.execute(
                    "SELECT * FROM memoria.graph_walk(%(entities)s::text[], %(depth)s, %(memory_type)s, %(limit)s, "
                    "%(fanout)s, %(entity_memories)s)",
                    p,
                ).fetchall()
                for p in params
            ]
            assert walked == found
    return found


def store(dsn: str, tag: str) -> None:
    with MemorySystem(Config(dsn=dsn, pool_min_size=1, vector_index_auto=False), embedder=HashEmbedder()) as system:
        system.store_many(records(tag))


@pytest.fixture
def stored(config: Config) -> str:
    store(config.dsn, "a")
    return config.dsn


def scalar(dsn: str, query: str):
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchone()[0]


def test_the_key_gains_the_type_and_the_walks_answer_the_same(stored: str):
    dsn = stored
    assert scalar(dsn, KEY).endswith("(tenant, entity_id, memory_id) INCLUDE (memory_type)")
    at_head = walks(dsn)
    assert all(at_head[:4]) and len({tuple(w) for w in at_head}) > 8  # untyped rows; the walks differ
    # Each entity offers its 4 most recent memories: an untyped depth-1 walk from one seed returns 4.
    assert len(at_head[0]) == 4

    migrate.downgrade(dsn, "0018")
    assert scalar(dsn, KEY).endswith("(tenant, entity_id, memory_id)")
    assert walks(dsn) == at_head

    migrate.upgrade(dsn)
    assert scalar(dsn, KEY).endswith("INCLUDE (memory_type)")
    assert walks(dsn) == at_head
    before = scalar(dsn, "SELECT count(*) FROM memoria.memory_entities")
    store(dsn, "b")  # the ingest's ON CONFLICT (tenant, entity_id, memory_id) names the rebuilt key
    assert scalar(dsn, "SELECT count(*) FROM memoria.memory_entities") == 2 * before
    assert walks(dsn) != at_head  # the newer memories are the most recent now
