"""Scoring a run ({query id: ranked doc ids}) against a data set's answers.

nDCG and recall come from ranx. LongMemEval's session metric (are ALL answer sessions among the
top k sessions, sessions ranked by their best turn) is not a ranx metric and is computed here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence

from .data import Dataset, Query
from .locomo import ADVERSARIAL
from .longmemeval import session_of

Run = Mapping[str, Sequence[str]]
OVERALL = "overall"  # LoCoMo: categories 1-4 together
ALL = "all"
CURVE_KS = (1, 2, 3, 5, 10, 20, 50, 100)
LOCOMO_KS = (5, 10, 20)
LONGMEMEVAL_KS = (5, 10)


def ranx_means(queries: Iterable[Query], run: Run, metrics: Sequence[str]) -> dict[str, float]:
    """Mean of each ranx metric over `queries`; a query the run has nothing for scores 0."""
    from ranx import Qrels, evaluate
    from ranx import Run as RanxRun

    queries = [q for q in queries if q.relevant]
    if not queries:
        return {m: float("nan") for m in metrics}
    qrels = Qrels({q.query_id: {doc: q.grades.get(doc, 1) for doc in q.relevant} for q in queries})
    # Scores that strictly decrease down the list keep the run's own order (ranx sorts by score).
    scored = {
        q.query_id: {doc: float(len(ranked) - i) for i, doc in enumerate(_unique(ranked))}
        for q in queries
        if (ranked := run.get(q.query_id))
    }
    if not scored:
        return {m: 0.0 for m in metrics}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety chatter
        values = evaluate(qrels, RanxRun(scored), list(metrics), make_comparable=True)
    if isinstance(values, float) or not isinstance(values, Mapping):
        values = {metrics[0]: values}
    return {m: float(values[m]) for m in metrics}


def _unique(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(d for d in ranked if d is not None))


def all_sessions_in_top(queries: Iterable[Query], run: Run, k: int) -> float:
    """Share of queries whose answer sessions all rank among the top k sessions."""
    queries = [q for q in queries if q.answer_sessions]
    if not queries:
        return float("nan")
    hits = sum(q.answer_sessions <= set(ranked_sessions(run.get(q.query_id, ()))[:k]) for q in queries)
    return hits / len(queries)


def ranked_sessions(ranked_turns: Sequence[str]) -> list[str]:
    """Sessions in the order of their best (first) turn."""
    return list(dict.fromkeys(session_of(t) for t in ranked_turns if t is not None))


def score_locomo(dataset: Dataset, run: Run) -> dict[str, dict[str, float]]:
    metrics = [f"recall@{k}" for k in LOCOMO_KS]
    groups: dict[str, list[Query]] = {OVERALL: [q for q in dataset.queries if q.group != ADVERSARIAL]}
    for q in dataset.queries:
        groups.setdefault(q.group, []).append(q)
    out = {}
    for name in [OVERALL, *sorted(g for g in groups if g not in (OVERALL, ADVERSARIAL)), ADVERSARIAL]:
        if groups.get(name):
            out[name] = {**ranx_means(groups[name], run, metrics), "queries": len(groups[name])}
    return out


def score_beir(dataset: Dataset, run: Run) -> dict[str, dict[str, float]]:
    values = ranx_means(dataset.queries, run, ["ndcg@10", "recall@10", "recall@100"])
    return {ALL: {**values, "queries": len(dataset.queries)}}


KNOWLEDGE_UPDATE = "knowledge-update"  # LongMemEval's question type about facts that changed


def score_longmemeval(dataset: Dataset, run: Run) -> dict[str, dict[str, float]]:
    """Turn recall_any@k (LongMemEval's convention: a has_answer turn among the top k; ranx hit_rate),
    turn recall@k (the share of has_answer turns found), and all answer sessions among the top k; for
    every question, and for the knowledge-update questions on their own (the lifecycle's concern)."""
    scores = {ALL: _longmemeval_values(dataset.queries, run)}
    updates = [q for q in dataset.queries if q.group == KNOWLEDGE_UPDATE]
    if updates:
        scores[KNOWLEDGE_UPDATE] = _longmemeval_values(updates, run)
    return scores


def _longmemeval_values(queries: list[Query], run: Run) -> dict[str, float]:
    with_turns = [q for q in queries if q.relevant]
    ks = LONGMEMEVAL_KS
    turns = ranx_means(with_turns, run, [f"hit_rate@{k}" for k in ks] + [f"recall@{k}" for k in ks])
    values: dict[str, float] = {}
    for k in ks:
        values[f"turn_recall_any@{k}"] = turns[f"hit_rate@{k}"]
    for k in ks:
        values[f"turn_recall@{k}"] = turns[f"recall@{k}"]
    for k in ks:
        values[f"all_sessions@{k}"] = all_sessions_in_top(queries, run, k)
    values["queries"] = len(queries)
    values["queries_with_turns"] = len(with_turns)
    return values


SCORERS: dict[str, Callable[[Dataset, Run], dict[str, dict[str, float]]]] = {
    "locomo": score_locomo,
    "beir": score_beir,
    "longmemeval": score_longmemeval,
}
# The number each data set is judged by: (group, metric).
MAIN_METRIC = {"locomo": (OVERALL, "recall@10"), "beir": (ALL, "ndcg@10"), "longmemeval": (ALL, "turn_recall_any@5")}


def score(dataset: Dataset, run: Run) -> dict[str, dict[str, float]]:
    return SCORERS[dataset.kind](dataset, run)


def recall_curve(dataset: Dataset, run: Run, depth: int) -> dict[int, float]:
    """recall@k for the CURVE_KS up to `depth` (LoCoMo: categories 1-4 only)."""
    queries = [q for q in dataset.queries if q.relevant and q.group != ADVERSARIAL]
    ks = [k for k in CURVE_KS if k <= depth]
    values = ranx_means(queries, run, [f"recall@{k}" for k in ks])
    return {k: values[f"recall@{k}"] for k in ks}
