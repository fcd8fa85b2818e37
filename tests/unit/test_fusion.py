import math

from memoria_pg.fusion import min_max_normalize, score_fusion


def test_min_max_normalize():
    assert min_max_normalize({1: 2.0, 2: 4.0, 3: 3.0}) == {1: 0.0, 2: 1.0, 3: 0.5}
    assert min_max_normalize({1: 0.1, 2: 0.3}, lower_is_better=True) == {1: 1.0, 2: 0.0}
    assert min_max_normalize({1: 7.0, 2: 7.0}) == {1: 1.0, 2: 1.0}
    assert min_max_normalize({}) == {}


def test_score_fusion_normalizes_incomparable_scales():
    fused = score_fusion({"bm25": {1: 30.0, 2: 10.0}, "vector": {1: 0.9, 2: 0.1}},
                         lower_is_better=["vector"])
    # bm25 prefers 1, vector distance prefers 2; equal weights tie, and the raw BM25 scale must not win
    assert math.isclose(dict(fused)[1], dict(fused)[2])
    weighted = score_fusion({"bm25": {1: 30.0, 2: 10.0}, "vector": {1: 0.9, 2: 0.1}},
                            weights={"vector": 2.0}, lower_is_better=["vector"])
    assert weighted[0][0] == 2
