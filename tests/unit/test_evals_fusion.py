"""The pure-Python reciprocal-rank fusion of the evaluation harness's in-process references."""

import math

import pytest

from evals.fusion import rrf


def test_rrf_scores_are_sums_of_reciprocal_ranks():
    fused = dict(rrf({"vector": [1, 2, 3], "bm25": [3, 1]}, k=60))
    assert math.isclose(fused[1], 1 / 61 + 1 / 62)
    assert math.isclose(fused[3], 1 / 63 + 1 / 61)
    assert math.isclose(fused[2], 1 / 62)


def test_rrf_agreement_beats_single_top_hit():
    fused = rrf({"vector": [10, 20, 30], "bm25": [20, 40, 50], "graph": [20]})
    assert [i for i, _ in fused][:2] == [20, 10]
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)


def test_rrf_weights():
    lists = {"vector": [1, 2], "bm25": [2, 1]}
    assert rrf(lists)[0][1] == rrf(lists)[1][1]
    assert rrf(lists, weights={"vector": 2.0})[0][0] == 1
    assert rrf(lists, weights={"bm25": 2.0})[0][0] == 2
    assert rrf({"vector": [1], "bm25": [2]}, weights={"bm25": 0.0}) == [(1, 1 / 61), (2, 0.0)]


def test_rrf_depth_truncates_each_list_before_fusing():
    tail = list(range(100, 180))
    lists = {"vector": [1, *tail], "bm25": [2, *tail[::-1]], "graph": tail[40:]}
    deep = [i for i, _ in rrf(lists)]
    assert deep[0] not in (1, 2)  # the long shared tail outvotes both top hits
    shallow = rrf(lists, depth=1)
    assert sorted(i for i, _ in shallow) == [1, 2, tail[40]]
    assert all(i in {1, 2, tail[40]} for i, _ in rrf(lists, depth=1))


def test_rrf_ties_break_by_best_rank_then_id():
    fused = rrf({"a": [5, 7], "b": [8, 6]})
    assert [i for i, _ in fused] == [5, 8, 6, 7]


def test_rrf_duplicate_in_one_list_counts_once():
    assert math.isclose(dict(rrf({"a": [1, 1, 2]}))[1], 1 / 61)


def test_rrf_empty_and_invalid():
    assert rrf({}) == []
    assert rrf({"a": []}) == []
    with pytest.raises(ValueError):
        rrf({"a": [1]}, k=-1)
    with pytest.raises(ValueError):
        rrf({"a": [1]}, depth=0)
    with pytest.raises(ValueError):
        rrf({"a": [1]}, weights={"a": -1})
