"""Score fusion's per-query weights (issue #14): the vector source's near match takes weight from BM25,
in the final CTE (sql/final_candidates.sql), exactly as the fusion lab computes it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from memoria_pg.core.types import SourceHit
from memoria_pg.query.candidates import build_candidates, final_cte_params
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.registry import DEFAULT_SHIFT, NO_SHIFT, ConfidenceShift

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fusion_lab  # benchmarks/ is not a package: imported from its folder


def hit(memory_id: int, source: str, rank: int, score: float) -> SourceHit:
    return SourceHit(memory_id=memory_id, source=source, rank=rank, score=score, memory_type="general")


@pytest.fixture
def four(system):
    vecs = np.random.default_rng(3).normal(size=(4, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return system.store_many(
        [{"content": f"memory {i}", "tenant": "t", "embedding": v} for i, v in enumerate(vecs)]
    ).ids


def fused(system, hits, registry=DEFAULT_WORKERS, *, generic: bool = False) -> dict[int, float]:
    with system.db.transaction("t", generic_plans=generic) as conn:
        found = build_candidates(conn, hits, registry, cap=200, rrf_k=60, depth=20)
    return {c.memory_id: c.retrieval_score for c in found}


def lists(a: int, b: int, c: int, d: int, best_distance: float) -> dict[str, list[SourceHit]]:
    """Vector prefers a then b; BM25 prefers c then d: the two lists disagree entirely."""
    return {
        "vector": [hit(a, "vector", 1, best_distance), hit(b, "vector", 2, best_distance + 0.2)],
        "bm25": [hit(c, "bm25", 1, 8.0), hit(d, "bm25", 2, 4.0)],
    }


def test_defaults_are_the_leave_one_set_out_choice():
    assert (DEFAULT_SHIFT.to, DEFAULT_SHIFT.from_, DEFAULT_SHIFT.near, DEFAULT_SHIFT.slope) == (
        "vector",
        "bm25",
        0.25,
        6.0,
    )
    assert DEFAULT_WORKERS.shift == DEFAULT_SHIFT
    params = final_cte_params({"vector": [hit(1, "vector", 1, 0.1)]}, DEFAULT_WORKERS, cap=5, rrf_k=60, depth=20)
    assert params["shift_near"] == 0.25 and params["shift_slope"] == 6.0


def test_a_far_best_vector_hit_keeps_the_declared_weights(system, four):
    a, b, c, d = four
    hits = lists(a, b, c, d, best_distance=0.45)
    assert fused(system, hits) == pytest.approx(fused(system, hits, DEFAULT_WORKERS.with_shift(NO_SHIFT)))
    score = fused(system, hits)
    assert score[a] == pytest.approx(0.5) and score[c] == pytest.approx(0.5)


def test_a_near_vector_match_takes_weight_from_bm25(system, four):
    a, b, c, d = four
    score = fused(system, lists(a, b, c, d, best_distance=0.2))
    shift = 6.0 * (0.25 - 0.2)  # slope * (near - d1)
    assert score[a] == pytest.approx(0.5 + shift)
    assert score[c] == pytest.approx(0.5 - shift)
    assert score[b] == pytest.approx((0.5 + shift) * 0.5)  # the last of two is worth half
    # the vector list's second hit now outranks BM25's first; with the declared weights it did not
    assert sorted(score, key=lambda m: -score[m]) == [a, b, c, d]
    declared = fused(system, lists(a, b, c, d, best_distance=0.2), DEFAULT_WORKERS.with_shift(NO_SHIFT))
    assert declared[c] > declared[b]


def test_the_shift_never_takes_more_than_bm25s_weight(system, four):
    a, b, c, d = four
    score = fused(system, lists(a, b, c, d, best_distance=0.0))  # 6.0 * 0.25 = 1.5 > 0.5
    assert score[a] == pytest.approx(1.0)
    assert score[c] == pytest.approx(0.0, abs=1e-12)
    # BM25's hits stay candidates; with no weight they follow, by the fallback order
    assert set(score) == {a, b, c, d}


def test_rrf_ignores_the_shift_and_a_custom_shift_applies(system, four):
    a, b, c, d = four
    hits = lists(a, b, c, d, best_distance=0.1)
    with system.db.transaction("t") as conn:
        rrf = build_candidates(conn, hits, DEFAULT_WORKERS, cap=200, rrf_k=60, depth=20, method="rrf")
    assert {x.memory_id: x.retrieval_score for x in rrf}[a] == pytest.approx(1.0 / 61)
    gentle = DEFAULT_WORKERS.with_shift(ConfidenceShift(near=0.2, slope=1.0))
    assert fused(system, hits, gentle)[a] == pytest.approx(0.5 + 0.1)
    assert DEFAULT_WORKERS.replace().shift == DEFAULT_SHIFT  # replace keeps it


def test_the_generic_plan_gives_the_same_fusion(system, four):
    a, b, c, d = four
    for distance in (0.05, 0.25, 0.5, 0.05, 0.25, 0.5, 0.15):  # past psycopg's 5 executions: a prepared plan
        assert fused(system, lists(a, b, c, d, distance), generic=True) == pytest.approx(
            fused(system, lists(a, b, c, d, distance))
        )


def test_the_lab_computes_the_fusion_the_sql_does(system, four):
    """benchmarks/fusion_lab.py chose the parameters by replaying captured lists: its replay must be
    the statement's arithmetic, or the leave-one-set-out figures would describe another rule."""
    a, b, c, d = four
    for distance in (0.1, 0.28, 0.6):
        hits = lists(a, b, c, d, distance)
        wv, wb = fusion_lab.shift_rule({"near": DEFAULT_SHIFT.near, "slope": DEFAULT_SHIFT.slope})(
            fusion_lab.features(
                {s: [(h.memory_id, h.memory_type, h.rank, h.score, {}) for h in hs] for s, hs in hits.items()}
            )
        )
        lab = fusion_lab.weighted(
            {s: [(h.memory_id, h.memory_type, h.rank, h.score, {}) for h in hs] for s, hs in hits.items()},
            lambda source, scores: fusion_lab.minmax_norm(scores, source in fusion_lab.LOWER_BETTER),
            {"vector": wv, "bm25": wb},
        )
        assert fused(system, hits) == pytest.approx(lab)


def test_leave_one_set_out_needs_two_sets() -> None:
    """Holding the only set out leaves nothing to tune on: a clear refusal, not a division by zero."""
    with pytest.raises(ValueError, match="at least two sets"):
        fusion_lab.leave_one_out([], [])
    with pytest.raises(SystemExit):
        fusion_lab.main(["--data", "/nonexistent", "--sets", "locomo", "--loso", "/tmp/never-written.json"])
