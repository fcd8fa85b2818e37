"""Migration 0017 under data: each co-occurring pair is one entity_edges row (and one RELATED edge), from
the smaller entity id. Going down writes the reverse rows back; coming up folds them again; the graph
walks answer the same from either layout (on a server with AGE, memoria.graph_walk is 0016's directed
walk below and 0017's two-ended walk above)."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.db import migrate

TEXTS = [
    "Alice Novak, Bruno Silva, Chen Wei and Dara Okafor met in Lisbon with Globex and Initech.",
    "Alice Novak and Emil Larsen flew to Osaka; Bruno Silva stayed in Lisbon.",
    "Chen Wei wrote to Dara Okafor about Initech, Umbrella and Globex in Nairobi and Toronto.",
    "Emil Larsen met Farah Haddad and Alice Novak in Krakow.",
    "Farah Haddad moved to Toronto; Chen Wei visited her there with Bruno Silva.",
]
SEEDS = (["alice novak"], ["lisbon"], ["chen wei", "toronto"], ["farah haddad"])


def edges(dsn: str) -> dict[tuple[str, str, str], int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT ed.tenant, s.norm_name, d.norm_name, ed.weight FROM memoria.entity_edges ed "
            "JOIN memoria.entities s ON s.tenant = ed.tenant AND s.id = ed.src_id "
            "JOIN memoria.entities d ON d.tenant = ed.tenant AND d.id = ed.dst_id"
        ).fetchall()
    return {(t, a, b): w for t, a, b, w in rows}


def related(dsn: str) -> set[tuple[int, int, int]] | None:
    """The RELATED edges as (start entity_id, end entity_id, weight), or None without the graph."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('memoria_graph.\"RELATED\"') IS NULL").fetchone()[0]:
            return None
        text = "ag_catalog.agtype_object_field_text({}, '{}')"
        rows = conn.execute(
            f"SELECT {text.format('s.properties', 'entity_id')}::bigint, {text.format('d.properties', 'entity_id')}"
            f'::bigint, {text.format("r.properties", "weight")}::integer FROM memoria_graph."RELATED" r '
            'JOIN memoria_graph."Entity" s ON s.id OPERATOR(ag_catalog.=) r.start_id '
            'JOIN memoria_graph."Entity" d ON d.id OPERATOR(ag_catalog.=) r.end_id'
        ).fetchall()
    return set(rows)


def walks(dsn: str) -> list[list[tuple]] | None:
    """memoria.graph_walk (the AGE worker's function) for every seed at depths 2 and 3, or None."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regproc('memoria.graph_walk') IS NULL").fetchone()[0]:
            return None
        conn.execute("SELECT set_config('memoria.tenant', 'acme', false)")
        return [
            conn.execute(
                "SELECT * FROM memoria.graph_walk(%s::text[], %s, NULL, 50, %s, 20)", (seeds, depth, fanout)
            ).fetchall()
            for seeds in SEEDS
            for depth in (2, 3)
            for fanout in (2, 24)
        ]


@pytest.fixture
def stored(config: Config) -> str:
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store_many([{"content": t, "tenant": "acme"} for t in TEXTS])
        system.store_many([{"content": t, "tenant": "globex"} for t in TEXTS[:2]])
    return config.dsn


def test_pairs_fold_into_one_row_and_back(stored: str):
    dsn = stored
    once, graph, walked = edges(dsn), related(dsn), walks(dsn)
    assert len(once) > 40 and all(w >= 1 for w in once.values())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT bool_and(src_id < dst_id) FROM memoria.entity_edges").fetchone()[0]
    if graph is not None:
        assert all(s < d for s, d, _ in graph) and len(graph) == len(once)
        assert walked and all(walked) and len({tuple(w) for w in walked}) > 4  # the walks differ by seed

    migrate.downgrade(dsn, "0016")
    twice = edges(dsn)
    assert twice == once | {(t, b, a): w for (t, a, b), w in once.items()}  # both directions, same weights
    if graph is not None:
        assert related(dsn) == graph | {(d, s, w) for s, d, w in graph}
        assert walks(dsn) == walked  # 0016's directed walk over both directions: the same rows

    migrate.upgrade(dsn)
    assert edges(dsn) == once
    assert related(dsn) == graph
    assert walks(dsn) == walked


def test_a_pair_stored_only_the_reverse_way_is_turned_around(stored: str):
    """At 0016 a pair could be one row from the larger id (written by hand): 0017 keeps its weight."""
    dsn = stored
    migrate.downgrade(dsn, "0016")
    with psycopg.connect(dsn) as conn:
        conn.execute("ALTER TABLE memoria.entity_edges NO FORCE ROW LEVEL SECURITY")
        low, high = conn.execute(
            "SELECT src_id, dst_id FROM memoria.entity_edges WHERE src_id < dst_id ORDER BY 1, 2 LIMIT 1"
        ).fetchone()
        conn.execute("DELETE FROM memoria.entity_edges WHERE src_id = %s AND dst_id = %s", (low, high))
        conn.execute("UPDATE memoria.entity_edges SET weight = 7 WHERE src_id = %s AND dst_id = %s", (high, low))
        conn.execute("ALTER TABLE memoria.entity_edges FORCE ROW LEVEL SECURITY")
    migrate.upgrade(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("ALTER TABLE memoria.entity_edges NO FORCE ROW LEVEL SECURITY")
        rows = conn.execute(
            "SELECT src_id, dst_id, weight FROM memoria.entity_edges WHERE %s IN (src_id, dst_id) AND %s IN "
            "(src_id, dst_id)",
            (low, high),
        ).fetchall()
        conn.rollback()
    assert rows == [(low, high, 7)]
