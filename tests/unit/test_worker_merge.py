"""Worker.merge: the hits of a search split into parts (scheduler.Parts) as one list (pure logic)."""

from __future__ import annotations

import math

from memoria_pg.core.types import SourceHit
from memoria_pg.query.workers.bm25 import BM25Worker
from memoria_pg.query.workers.vector import VectorWorker


def hit(memory_id: int, score: float, source: str = "vector") -> SourceHit:
    return SourceHit(memory_id=memory_id, source=source, rank=99, score=score, memory_type="general")


def test_the_nearest_of_all_parts_in_order_ranked_again():
    parts = [[hit(5, 0.1), hit(2, 0.4), hit(9, math.nan)], [hit(3, 0.2), hit(1, 0.4), hit(7, 0.9)]]
    merged = VectorWorker().merge(parts, limit=4)
    # distance, then id for a tie; a NaN distance last, as PostgreSQL orders it (and `limit` cuts)
    assert [(h.memory_id, h.rank) for h in merged] == [(5, 1), (3, 2), (1, 3), (2, 4)]
    assert [(h.memory_id, h.rank) for h in VectorWorker().merge(parts, limit=10)][-2:] == [(7, 5), (9, 6)]


def test_a_memory_in_two_parts_counts_once_with_its_best_score():
    assert [(h.memory_id, h.score) for h in VectorWorker().merge([[hit(1, 0.5)], [hit(1, 0.2)]], limit=5)] == [(1, 0.2)]
    # higher is better for a score that is not a distance
    bm25 = BM25Worker().merge([[hit(1, 2.0, "bm25"), hit(2, 1.0, "bm25")], [hit(1, 3.0, "bm25")]], limit=5)
    assert [(h.memory_id, h.score, h.rank) for h in bm25] == [(1, 3.0, 1), (2, 1.0, 2)]
