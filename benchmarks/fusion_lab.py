"""Fusion lab, step 2: replay the captured worker hit lists (benchmarks/fusion_capture.py) through
fusion rules in process, score them with the evaluation's metrics, and choose a rule's parameters
by leave-one-set-out (tune on four sets, report the fifth).

    python benchmarks/fusion_lab.py --data /work/shared/eval [--check] [--loso]

`--check` verifies that the replay of today's SQL fusion (`engine`: the declared weights and the
per-query ConfidenceShift) gives the engine's own rankings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.data import Dataset, Query
from evals.locomo import ADVERSARIAL
from evals.runner import LOADERS

DEFAULT_DIR = Path.home() / ".cache" / "memoria-pg" / "fusion-lab"
SETS = ("locomo", "scifact", "hotpotqa", "longmemeval", "msmarco")
CAP = 200
Hit = tuple[int, str, int, float, dict[str, Any]]
Hits = Mapping[str, Sequence[Hit]]
LOWER_BETTER = {"vector", "attribute", "graph", "relevance", "temporal"}
# Today's score-fusion weights (query/workers/registry.py).
WEIGHTS = {"vector": 0.5, "bm25": 0.5, "attribute": 0.3, "relevance": 0.15, "fusion": 0.5, "temporal": 0.3}


@dataclass
class LabSet:
    name: str
    dataset: Dataset
    queries: list[dict[str, Any]]
    doc: dict[int, str]  # memory id -> doc id
    depth: int


def load(name: str, root: Path, folder: Path = DEFAULT_DIR) -> LabSet:
    with (folder / f"{name}.pkl").open("rb") as f:
        cap = pickle.load(f)
    dataset = LOADERS[name](root, None)
    return LabSet(name, dataset, cap["queries"], {row[0]: row[2] for row in cap["memories"]}, cap["depth"])


# -- metrics (the evaluation's, in plain Python: ranx agrees, see --check) --------------------------
def _recall(ranked: Sequence[str], q: Query, k: int) -> float:
    return len(set(ranked[:k]) & q.relevant) / len(q.relevant)


def _ndcg(ranked: Sequence[str], q: Query, k: int = 10) -> float:
    gains = [q.grades.get(d, 1) for d in q.relevant]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains, reverse=True)[:k]))
    dcg = sum(q.grades.get(d, 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in q.relevant)
    return dcg / ideal


def main_metric(lab: LabSet, run: Mapping[str, Sequence[str]], group: str | None = None) -> float:
    qs = [q for q in lab.dataset.queries if q.relevant]
    if lab.name == "locomo":
        qs = [q for q in qs if (q.group == group if group else q.group != ADVERSARIAL)]
        values = [_recall(run.get(q.query_id, ()), q, 10) for q in qs]
    elif lab.name == "longmemeval":
        values = [float(bool(set(run.get(q.query_id, ())[:5]) & q.relevant)) for q in qs]
    else:
        values = [_ndcg(run.get(q.query_id, ()), q) for q in qs]
    return sum(values) / len(values)


# -- replay --------------------------------------------------------------------------------------
def minmax_norm(scores: Sequence[float], lower: bool) -> list[float]:
    """final_candidates.sql's normalization: best 1, last 1/n."""
    n = len(scores)
    hi, lo = max(scores), min(scores)
    if hi == lo:
        return [1.0] * n
    step = (hi - lo) / (n - 1)
    return [(((hi - s) if lower else (s - lo)) + step) / (step * n) for s in scores]


Rule = Callable[[Hits], dict[int, float]]


def today(hits: Hits, weights: Mapping[str, float] = WEIGHTS) -> dict[int, float]:
    fused: dict[int, float] = {}
    for source, hs in hits.items():
        if not hs:
            continue
        norms = minmax_norm([h[3] for h in hs], source in LOWER_BETTER)
        w = weights.get(source, 0.0)
        for h, v in zip(hs, norms, strict=True):
            fused[h[0]] = fused.get(h[0], 0.0) + w * v
    return fused


def engine(hits: Hits) -> dict[int, float]:
    """Today's SQL fusion as the engine runs it: the declared weights with the registry's per-query
    shift (ConfidenceShift: final_candidates.sql's `shift` CTE) from BM25 to the vector source when
    the vector list's best distance is a near match."""
    from memoria_pg.query.workers import DEFAULT_WORKERS

    shift = DEFAULT_WORKERS.shift.params()
    vector, bm25 = shift_rule({"near": shift["shift_near"], "slope": shift["shift_slope"]})(features(hits))
    return today(hits, {**WEIGHTS, "vector": vector, "bm25": bm25})


def weighted(
    hits: Hits, norm: Callable[[str, list[float]], list[float]], weights: Mapping[str, float]
) -> dict[int, float]:
    """sum over sources of weight * norm(source, the list's scores), the others as today."""
    fused: dict[int, float] = {}
    for source, hs in hits.items():
        if not hs:
            continue
        scores = [h[3] for h in hs]
        values = norm(source, scores) if source in ("vector", "bm25") else minmax_norm(scores, source in LOWER_BETTER)
        w = weights.get(source, WEIGHTS.get(source, 0.0))
        for h, v in zip(hs, values, strict=True):
            fused[h[0]] = fused.get(h[0], 0.0) + w * v
    return fused


def ratio_norm(source: str, scores: list[float]) -> list[float]:
    """Each score over the list's best, in the source's natural units: a BM25 score over the best
    one, a cosine similarity (1 - distance) over the best one."""
    values = [1.0 - s for s in scores] if source == "vector" else scores
    top = max(values[0], 1e-9)
    return [v / top for v in values]


def order(hits: Hits, fused: Mapping[int, float], hint: str | None) -> list[int]:
    """Cap, retrieval order, prefer_current_facts (ignored: no effect on these sets), type filter."""
    distance = {h[0]: h[3] for h in hits.get("vector", ())}
    types = {h[0]: h[1] for hs in hits.values() for h in hs}
    ids = sorted(fused, key=lambda m: (-fused[m], distance.get(m, math.inf), m))[:CAP]

    def key(m: int) -> tuple[float, float, int]:
        base = 1.0 / (1.0 + distance[m]) if m in distance else 0.0
        final = fused[m] if fused[m] > 0 else base * 1e-3
        return (-final, -base, m)

    ids.sort(key=key)
    if hint and any(types[m] == hint for m in ids):
        ids = [m for m in ids if types[m] == hint]
    return ids


def replay(lab: LabSet, rule: Rule) -> dict[str, list[str]]:
    run = {}
    for q in lab.queries:
        ids = order(q["hits"], rule(q["hits"]), q["hint"])
        run[q["query_id"]] = [lab.doc[m] for m in ids[: lab.depth]]
    return run


def engine_run(lab: LabSet) -> dict[str, list[str]]:
    return {q["query_id"]: q["v4"] for q in lab.queries}


def source_run(lab: LabSet, source: str) -> dict[str, list[str]]:
    return {q["query_id"]: [lab.doc[h[0]] for h in q["hits"].get(source, ())] for q in lab.queries}


def check(labs: Iterable[LabSet]) -> None:
    from evals.metrics import MAIN_METRIC, score

    for lab in labs:
        group, metric = MAIN_METRIC[lab.dataset.kind]
        engine_score = score(lab.dataset, engine_run(lab))[group][metric]
        replayed = replay(lab, engine)
        same = sum(replay_one == q["v4"] for replay_one, q in zip(replayed.values(), lab.queries))
        print(
            f"{lab.name}: engine {engine_score:.4f} (lab metric {main_metric(lab, engine_run(lab)):.4f}), "
            f"replay {main_metric(lab, replayed):.4f}, identical rankings {same}/{len(lab.queries)}; "
            f"vector {main_metric(lab, source_run(lab, 'vector')):.4f}, bm25 {main_metric(lab, source_run(lab, 'bm25')):.4f}"
        )


def grid(space: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = list(space)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(space[k] for k in keys))]


@dataclass
class Family:
    """A fusion rule with parameters: `make(params)` is the rule."""

    name: str
    space: Mapping[str, Sequence[Any]]
    make: Callable[[dict[str, Any]], Rule]


def best_single(lab: LabSet) -> float:
    return max(main_metric(lab, source_run(lab, "vector")), main_metric(lab, source_run(lab, "bm25")))


def table(labs: Sequence[LabSet], family: Family) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Every parameter point with its main metric on every set."""
    return [(p, {lab.name: main_metric(lab, replay(lab, family.make(p))) for lab in labs}) for p in grid(family.space)]


def objective(values: Mapping[str, float], floors: Mapping[str, Mapping[str, float]], names: Iterable[str]) -> Any:
    """What parameters are chosen by, over the training sets: first how many sets meet issue #14's
    floors (within 0.005 of the best single source and of the fusion before), then the mean plus
    the worst gain over the best single source."""
    names = list(names)
    met = sum(values[n] >= max(floors[n]["single"], floors[n]["before"]) - 0.005 for n in names)
    gains = [values[n] - floors[n]["single"] for n in names]
    return (met, sum(gains) / len(gains) + min(gains))


def leave_one_out(
    labs: Sequence[LabSet], rows: Sequence[tuple[dict[str, Any], dict[str, float]]]
) -> dict[str, tuple[dict[str, Any], float]]:
    """{held-out set: (parameters chosen on the others, the held-out set's metric with them)};
    under "all", the parameters chosen on every set."""
    if len(labs) < 2:
        raise ValueError("leave-one-set-out needs at least two sets")
    floors = {lab.name: {"single": best_single(lab), "before": main_metric(lab, engine_run(lab))} for lab in labs}
    names = [lab.name for lab in labs]
    out = {}
    for held in [*names, "all"]:
        train = [n for n in names if n != held]
        params, values = max(rows, key=lambda r: objective(r[1], floors, train))
        out[held] = (params, values[held] if held != "all" else math.nan)
    return out


# -- fast replay: per-query weights on today's normalized lists ------------------------------------
@dataclass
class Prepared:
    """One query's candidates as arrays: each normalized list (vector, BM25, the other weighted
    sources already summed with today's weights), the distances and the hint mask."""

    query_id: str
    ids: Any
    nv: Any
    nb: Any
    other: Any
    base: Any
    dist: Any
    keep: Any  # the type filter's mask (all True when it does not apply)
    features: dict[str, float]


def features(hits: Hits) -> dict[str, float]:
    """What the engine knows at query time about each list's shape (final_candidates.sql's `shape`)."""
    v, b = hits.get("vector", ()), hits.get("bm25", ())
    out = {"d1": v[0][3] if v else math.nan, "nv": float(len(v)), "nb": float(len(b))}
    if b and b[0][3] > 0:
        head = [h[3] for h in b if h[2] <= 10]
        out["r10"] = head[-1] / b[0][3]
    else:
        out["r10"] = math.nan
    out["overlap10"] = float(len({h[0] for h in v if h[2] <= 10} & {h[0] for h in b if h[2] <= 10}))
    return out


def prepare(lab: LabSet) -> list[Prepared]:
    import numpy as np

    out = []
    for q in lab.queries:
        hits = q["hits"]
        ids = sorted({h[0] for hs in hits.values() for h in hs})
        pos = {m: i for i, m in enumerate(ids)}
        arrays = {k: np.zeros(len(ids)) for k in ("vector", "bm25", "other")}
        for source, hs in hits.items():
            if not hs:
                continue
            norms = minmax_norm([h[3] for h in hs], source in LOWER_BETTER)
            key = source if source in ("vector", "bm25") else "other"
            w = 1.0 if key != "other" else WEIGHTS.get(source, 0.0)
            for h, value in zip(hs, norms, strict=True):
                arrays[key][pos[h[0]]] += w * value
        dist = np.full(len(ids), np.inf)
        for h in hits.get("vector", ()):
            dist[pos[h[0]]] = h[3]
        types = {h[0]: h[1] for hs in hits.values() for h in hs}
        keep = np.array([types[m] == q["hint"] for m in ids]) if q["hint"] else np.ones(len(ids), bool)
        base = np.where(np.isfinite(dist), 1.0 / (1.0 + np.where(np.isfinite(dist), dist, 0)), 0.0)
        out.append(
            Prepared(
                q["query_id"],
                np.array(ids),
                arrays["vector"],
                arrays["bm25"],
                arrays["other"],
                base,
                dist,
                keep,
                features(hits),
            )
        )
    return out


WeightRule = Callable[[dict[str, float]], tuple[float, float]]


def fast_run(lab: LabSet, prepared: Sequence[Prepared], weights: WeightRule) -> dict[str, list[str]]:
    import numpy as np

    run = {}
    for p in prepared:
        wv, wb = weights(p.features)
        fused = wv * p.nv + wb * p.nb + p.other
        capped = np.lexsort((p.ids, p.dist, -fused))[:CAP]
        final = np.where(fused[capped] > 0, fused[capped], p.base[capped] * 1e-3)
        ranked = capped[np.lexsort((p.ids[capped], -p.base[capped], -final))]
        if p.keep[ranked].any():
            ranked = ranked[p.keep[ranked]]
        run[p.query_id] = [lab.doc[int(m)] for m in p.ids[ranked[: lab.depth]]]
    return run


# The family final_candidates.sql implements (ConfidenceShift): BM25's share of the vector + BM25
# weight (0.5 of 1 as declared) falls by slope * (near - d1) when the vector list's best distance d1
# is under `near`.
SHIFT_SPACE = {"near": [0.2, 0.25, 0.3, 0.35, 0.4], "slope": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]}


def shift_rule(params: Mapping[str, float]) -> WeightRule:
    def weights(f: dict[str, float]) -> tuple[float, float]:
        d1 = 1.0 if math.isnan(f["d1"]) else f["d1"]
        shift = min(0.5, params["slope"] * max(0.0, params["near"] - d1))
        return 0.5 + shift, 0.5 - shift

    return weights


def loso(labs: Sequence[LabSet], out: Path | None = None) -> dict[str, Any]:
    """The shift family's grid on every set, leave-one-set-out, and the final choice (on all five)."""
    prepared = {lab.name: prepare(lab) for lab in labs}
    rows = [
        (p, {lab.name: main_metric(lab, fast_run(lab, prepared[lab.name], shift_rule(p))) for lab in labs})
        for p in grid(SHIFT_SPACE)
    ]
    chosen = leave_one_out(labs, rows)
    final = chosen["all"][0]
    result = {
        "family": "ConfidenceShift (near, slope)",
        "space": SHIFT_SPACE,
        "sets": {
            lab.name: {
                "vector": main_metric(lab, source_run(lab, "vector")),
                "bm25": main_metric(lab, source_run(lab, "bm25")),
                "before": main_metric(lab, engine_run(lab)),
                "held_out_params": chosen[lab.name][0],
                "held_out": chosen[lab.name][1],
                "final": next(v[lab.name] for p, v in rows if p == final),
            }
            for lab in labs
        },
        "final_params": final,
    }
    if out is not None:
        write_json(out, result)
    return result


def print_loso(result: Mapping[str, Any]) -> None:
    """A lab's leave-one-set-out table, a set a line, then the final parameters."""
    for name, row in result["sets"].items():
        print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
    print("final", result["final_params"])


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """A lab's leave-one-set-out table, where memoria-pg eval reads it (evals/report.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def set_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """A lab's --sets; --loso needs two at least (it holds one out and tunes on the others)."""
    sets = args.sets.split(",")
    if args.loso and len(sets) < 2:
        parser.error("--loso holds one set out and tunes on the others: give --sets at least two")
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--loso", default=None, help="write the leave-one-set-out table here (JSON)")
    args = parser.parse_args(argv)
    sets = set_names(parser, args)
    labs = [load(n, Path(args.data)) for n in sets]
    if args.check:
        check(labs)
    if args.loso:
        print_loso(loso(labs, Path(args.loso)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
