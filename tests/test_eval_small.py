"""A small, fast quality evaluation with the real model (the full one is `python -m evals`).

One LoCoMo conversation, 50 SciFact queries (their relevant abstracts plus 1,000 others) and the
MS MARCO subset's first 25 judged queries. Fails when V4 retrieval-only falls below V3 or below the
best of its own vector and BM25 workers alone (the fusion must never lose to its best source: issue
#14), or when the BM25 worker's nDCG@10 drifts from rank_bm25 on the same subset. The data is read from MEMORIA_EVAL_DATA (without it these tests are skipped, or fail
when MEMORIA_REQUIRE_EVAL_DATA=1: the `eval_data` fixture in conftest.py); embeddings are cached
under ~/.cache/memoria-pg/eval (MEMORIA_EVAL_CACHE overrides).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evals import run_eval

pytestmark = pytest.mark.model

CONFIGURATIONS = ("v3", "vector", "bm25", "v4", "ref_bm25")
BM25_DRIFT = 0.02


@pytest.fixture(scope="session")  # session-scoped and first: the data is checked before a server starts
def data_root(eval_data) -> Path:
    return eval_data("locomo", "scifact")


def _evaluate(admin_dsn: str, root: Path, out: Path, dataset: str, **limits):
    report = run_eval(root, [dataset], configurations=CONFIGURATIONS, dsn=admin_dsn, out=out, log=print, **limits)
    print(report.markdown)
    result = report.dataset(dataset)
    for r in result.configurations:
        assert r.status == "ok", f"{dataset} {r.name}: {r.status} ({r.error})"
    return result


def _value(result, name: str, group: str, metric: str) -> float:
    return result.result(name).metrics[group][metric]


def _not_below_best_source(result, group: str, metric: str) -> None:
    v4 = _value(result, "v4", group, metric)
    best = max(("vector", "bm25"), key=lambda n: _value(result, n, group, metric))
    assert v4 >= _value(result, best, group, metric), (
        f"{result.name} {metric}: V4 retrieval-only {v4:.4f} < its {best} worker alone {_value(result, best, group, metric):.4f}"
    )


def test_locomo_v4_not_below_v3(data_root: Path, admin_dsn: str, tmp_path: Path) -> None:
    result = _evaluate(admin_dsn, data_root, tmp_path, "locomo", max_tenants=1)
    v4, v3 = (_value(result, n, "overall", "recall@10") for n in ("v4", "v3"))
    assert v4 >= v3, f"LoCoMo evidence recall@10: V4 retrieval-only {v4:.4f} < V3 {v3:.4f}"
    _not_below_best_source(result, "overall", "recall@10")


def test_msmarco_v4_not_below_its_vector_worker(eval_data, admin_dsn: str, tmp_path: Path) -> None:
    """The collection where the vector signal is the stronger one: graded nDCG@10, qrels without a header."""
    result = _evaluate(admin_dsn, eval_data("msmarco"), tmp_path, "msmarco", limit_queries=25)
    assert result.queries == 25
    _not_below_best_source(result, "all", "ndcg@10")


def test_scifact_v4_not_below_v3_and_bm25_matches_rank_bm25(data_root: Path, admin_dsn: str, tmp_path: Path) -> None:
    result = _evaluate(admin_dsn, data_root, tmp_path, "scifact", limit_queries=50, corpus_limit=1000)
    v4, v3 = (_value(result, n, "all", "ndcg@10") for n in ("v4", "v3"))
    assert v4 >= v3, f"SciFact nDCG@10: V4 retrieval-only {v4:.4f} < V3 {v3:.4f}"
    _not_below_best_source(result, "all", "ndcg@10")
    worker, reference = (_value(result, n, "all", "ndcg@10") for n in ("bm25", "ref_bm25"))
    assert abs(worker - reference) <= BM25_DRIFT, (
        f"SciFact nDCG@10: BM25 worker {worker:.4f} vs rank_bm25 {reference:.4f} (allowed drift {BM25_DRIFT})"
    )


def test_conversation_loaders_store_turns_with_their_neighbours(eval_data):
    from evals import locomo, longmemeval

    data_root = eval_data("locomo", "longmemeval")
    docs = locomo.load(data_root).documents
    session = [d for d in docs if d.tenant == docs[0].tenant and d.metadata["session"] == 1]
    assert session[3].context == "\n".join(d.content for d in session[1:3] + session[4:6])
    assert session[0].context == "\n".join(d.content for d in session[1:3])
    assert all(d.context is None for d in locomo.load(data_root, context_turns=0).documents)
    turns = longmemeval.load(data_root).documents
    first = [
        d for d in turns if d.metadata["session_id"] == turns[0].metadata["session_id"] and d.tenant == turns[0].tenant
    ]
    assert first[1].context == f"{first[0].content}\n{first[2].content}"
