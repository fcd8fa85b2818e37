"""The evaluation's side of issue #14, without a server: BEIR qrels with or without a header and
with graded judgments (MS MARCO), graded nDCG, and the fusion checks the report prints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evals import beir
from evals.data import Dataset, Query
from evals.metrics import score
from evals.results import ConfigurationResult, DatasetResult, EvalReport
from evals.targets import fusion_checks


def test_qrels_are_read_with_or_without_a_header(tmp_path: Path) -> None:
    with_header = tmp_path / "a.tsv"
    with_header.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n", encoding="utf-8")
    without = tmp_path / "b.tsv"
    without.write_text("19335\t1720389\t1\n19335\t1729\t3\n47923\tx\t0\n", encoding="utf-8")
    assert beir.read_qrels(with_header) == {"q1": {"d1": 1}}
    assert beir.read_qrels(without) == {"19335": {"1720389": 1, "1729": 3}}  # the first row is data
    assert beir.QRELS["msmarco"] == "qrels/test.tsv"


def test_ndcg_uses_the_grades_as_gains() -> None:
    q = Query("q", "t", "text", frozenset({"a", "b"}), grades={"a": 1, "b": 3})
    ds = Dataset("msmarco", "beir", [], [q])
    got = score(ds, {"q": ["a", "b"]})["all"]["ndcg@10"]
    ideal = 3 + 1 / math.log2(3)
    assert got == pytest.approx((1 + 3 / math.log2(3)) / ideal)  # binary gains would give 1.0
    assert score(ds, {"q": ["b", "a"]})["all"]["ndcg@10"] == pytest.approx(1.0)


def _report(values: dict[str, float], name: str = "msmarco") -> EvalReport:
    results = [ConfigurationResult(n, n, metrics={"all": {"ndcg@10": v}}) for n, v in values.items()]
    ds = DatasetResult(name, "beir", 1, 1, 1, 10, [], {}, {}, results)
    return EvalReport(started="now", datasets=[ds], settings={})


def test_fusion_checks_fail_when_v4_loses_to_its_best_source() -> None:
    checks = {c.label: c.passed for c in fusion_checks(_report({"v4": 0.789, "vector": 0.798, "bm25": 0.715}))}
    assert checks == {"msmarco ndcg@10: v4 >= max_single - 0.005": False, "msmarco ndcg@10: v4 >= vector": False}
    checks = {c.label: c.passed for c in fusion_checks(_report({"v4": 0.804, "vector": 0.798, "bm25": 0.715}))}
    assert set(checks.values()) == {True}
    other = fusion_checks(_report({"v4": 0.794, "vector": 0.798, "bm25": 0.7, "ref_rrf": 0.77}, "scifact"))
    assert [(c.label, c.passed) for c in other] == [
        ("scifact ndcg@10: v4 >= max_single - 0.005", True),
        ("scifact ndcg@10: v4 >= ref_rrf", True),
    ]
