"""Co-occurrence within a window (migration 0013): a memory's entities pair with those at most three
places away in its text order, so the upkeep grows linearly with a long memory's entities; deleting
the memory subtracts exactly those pairs. Each pair is one row, from the smaller entity id (0017)."""

from __future__ import annotations

import psycopg

from memoria_pg import Config, HashEmbedder, MemorySystem

NAMES = ["Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Gina"]


def edges(dsn: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT s.name, d.name, ed.weight, ed.src_id < ed.dst_id FROM memoria.entity_edges ed "
            "JOIN memoria.entities s ON s.tenant = ed.tenant AND s.id = ed.src_id "
            "JOIN memoria.entities d ON d.tenant = ed.tenant AND d.id = ed.dst_id"
        ).fetchall()
    assert all(once for *_, once in rows)
    return {(a, b): w for a, b, w, _ in rows}


def test_entities_pair_only_within_the_window_and_a_delete_takes_the_pairs_back(config: Config):
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        long_id = system.store("Alice, Bob, Carol, Dan, Erin, Frank and Gina met at the lab.", tenant="t")
        # entity ids follow the names' order (one batch upserts them in name order): Alice's is the smallest
        expected = {(a, b): 1 for i, a in enumerate(NAMES) for j, b in enumerate(NAMES) if 0 < j - i <= 3}
        assert edges(config.dsn) == expected  # 15 pairs, not 21: Alice-Erin is four places apart
        short_id = system.store("Alice met Gina.", tenant="t")  # two entities: their pair, as before
        assert edges(config.dsn) == expected | {("Alice", "Gina"): 1}
        system.delete(long_id, tenant="t")
        assert edges(config.dsn) == {("Alice", "Gina"): 1}
        system.delete(short_id, tenant="t")
        assert edges(config.dsn) == {}
