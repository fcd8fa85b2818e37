"""Lexical feedback lab (issue #14): replay the captured worker lists (benchmarks/fusion_capture.py)
through the engine's fusion and then the final CTE's lexical feedback (LexicalFeedback,
sql/final_candidates.sql), in process, over a grid of its five numbers; choose them by
leave-one-set-out (tune on four sets, report the fifth) with the fusion lab's objective.

    MEMORIA_EMBEDDING_BACKEND=onnx python benchmarks/feedback_lab.py --data /work/shared/eval \\
        [--check] [--loso results/fusion/feedback_loso.json]

The feedback needs each memory's terms, which the captures do not hold: they are made again here
from the data sets, as the engine indexes them (memoria_pg.indexed_tokens), per tenant. The captured
hits are the workers' (the feedback does not change them), so any capture serves the grid; `--check`
replays the default parameters and counts the queries whose ranking equals the engine's captured
one, which needs a capture of an engine with the feedback on:

    python benchmarks/fusion_capture.py --data /work/shared/eval --dsn ... --out ~/.cache/memoria-pg/fusion-lab-feedback
    python benchmarks/feedback_lab.py --data /work/shared/eval --captures ~/.cache/memoria-pg/fusion-lab-feedback --check
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusion_lab import (
    DEFAULT_DIR,
    SETS,
    LabSet,
    engine,
    grid,
    leave_one_out,
    load,
    main_metric,
    minmax_norm,
    order,
    print_loso,
    set_names,
    source_run,
    write_json,
)

from memoria_pg import indexed_tokens, normalize, tokenize
from memoria_pg.query.workers.registry import DEFAULT_FEEDBACK, LexicalFeedback

K1, B = 1.2, 0.75  # Config's bm25_k1, bm25_b
SPACE = {
    "seeds": (2, 3, 4),
    "expansion": (5, 10, 15),
    "repeat": (1, 2),
    "depth": (10, 20, 30),
    "weight": (0.1, 0.2, 0.3),
    "shared": (True, False),  # the engine's rule (True), or any seed term (the lab's first form)
}


@dataclass
class Tenant:
    """One tenant's memories as the BM25 tables hold them: each memory's term counts and length,
    each term's document frequency, the number of documents and their mean length."""

    terms: dict[int, Counter[str]]
    length: dict[int, int]
    df: Counter[str]
    n: int
    avgdl: float

    @classmethod
    def of(cls, docs: Mapping[int, list[str]]) -> Tenant:
        terms = {m: Counter(tokens) for m, tokens in docs.items()}
        df: Counter[str] = Counter()
        for counts in terms.values():
            df.update(counts.keys())
        length = {m: len(tokens) for m, tokens in docs.items()}
        n = len(docs)
        return cls(terms, length, df, n, sum(length.values()) / n if n else 0.0)

    def idf(self, term: str) -> float | None:
        df = self.df.get(term, 0)
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5)) if df else None


def feedback(
    tenant: Tenant, head: Sequence[int], query: Sequence[str], p: LexicalFeedback, shared: bool = True
) -> dict[int, float]:
    """sql/final_candidates.sql's feedback, from `head` (the first `depth` candidates with a fused
    score, in fused order): each one's normalized score (best 1, last 1/n), for those above 0. A memory
    longer than `p.max_length` tokens takes no part (the SQL reads no further than that).
    `shared` (the engine's rule): only a seed term that another memory of the head holds too may
    join the query; without it (the lab's other form) any seed term may."""
    qtf = {t: c * p.repeat for t, c in Counter(query).items()}
    seeds = [m for m in head[: p.seeds] if tenant.length[m] <= p.max_length]  # a long one's place stays empty
    head = [m for m in head if tenant.length[m] <= p.max_length]
    holders = Counter(t for m in head for t in tenant.terms[m])
    share: Counter[str] = Counter()
    for m in seeds:
        for t, tf in tenant.terms[m].items():
            if t not in qtf and (holders[t] >= 2 or not shared):
                share[t] += tf / max(tenant.length[m], 1)
    weighted = [(s * idf, t) for t, s in share.items() if (idf := tenant.idf(t)) is not None]
    expansion = [t for _, t in sorted(weighted, key=lambda x: (-x[0], x[1]))[: p.expansion]]
    terms = {t: (q, idf) for t, q in qtf.items() if (idf := tenant.idf(t)) is not None}
    terms.update({t: (1.0, tenant.idf(t) or 0.0) for t in expansion})
    scores = {}
    for m in head:
        dl, s = tenant.length[m], 0.0
        for t, tf in tenant.terms[m].items():
            if t in terms:
                q, idf = terms[t]
                s += q * idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / tenant.avgdl))
        if s > 0:
            scores[m] = s
    if not scores:
        return {}
    ranked = sorted(scores, key=lambda m: -scores[m])
    return dict(zip(ranked, minmax_norm([scores[m] for m in ranked], False), strict=True))


def head_of(hits: Mapping[str, Sequence[Any]], fused: Mapping[int, float], depth: int) -> list[int]:
    """The first `depth` candidates with a fused score, in the order of the final CTE's `head`: fused
    score to 1e-9, then distance and id."""
    distance = {h[0]: h[3] for h in hits.get("vector", ())}
    scored = [m for m in fused if fused[m] > 0]
    return sorted(scored, key=lambda m: (-round(fused[m], 9), distance.get(m, math.inf), m))[:depth]


class Replay:
    """One set's captured queries with what the feedback needs: the tenants' terms, each query's
    BM25 terms and its fused scores before the feedback."""

    def __init__(self, lab: LabSet, folder: Path) -> None:
        self.lab = lab
        with (folder / f"{lab.name}.pkl").open("rb") as f:
            memories = pickle.load(f)["memories"]
        docs = {(d.tenant, d.doc_id): d for d in lab.dataset.documents}
        by_tenant: dict[str, dict[int, list[str]]] = defaultdict(dict)
        for mid, tenant, doc_id, _ in memories:
            d = docs[(tenant, doc_id)]
            by_tenant[tenant][mid] = indexed_tokens(d.content, d.context)
        self.tenants = {t: Tenant.of(d) for t, d in by_tenant.items()}
        text = {q.query_id: q.text for q in lab.dataset.queries}
        self.terms = {q["query_id"]: tokenize(normalize(text[q["query_id"]])) for q in lab.queries}
        self.fused = {q["query_id"]: engine(q["hits"]) for q in lab.queries}

    def run(self, p: LexicalFeedback, shared: bool = True) -> dict[str, list[str]]:
        out = {}
        for q in self.lab.queries:
            qid, fused = q["query_id"], dict(self.fused[q["query_id"]])
            if p.weight > 0 and "bm25" in q["hits"] and "vector" in q["hits"] and self.terms[qid]:
                head = head_of(q["hits"], fused, p.depth)
                for m, norm in feedback(self.tenants[q["tenant"]], head, self.terms[qid], p, shared).items():
                    fused[m] += p.weight * norm
            out[qid] = [self.lab.doc[m] for m in order(q["hits"], fused, q["hint"])[: self.lab.depth]]
        return out


def check(replays: Sequence[Replay]) -> None:
    for r in replays:
        run = r.run(DEFAULT_FEEDBACK)
        same = sum(run[q["query_id"]] == q["v4"] for q in r.lab.queries)
        print(f"{r.lab.name}: replay {main_metric(r.lab, run):.4f}, identical rankings {same}/{len(r.lab.queries)}")


def loso(replays: Sequence[Replay], out: Path | None) -> dict[str, Any]:
    labs = [r.lab for r in replays]
    before = {r.lab.name: main_metric(r.lab, r.run(LexicalFeedback(weight=0.0))) for r in replays}
    rows = []
    for params in grid(SPACE):
        p = LexicalFeedback(**{k: v for k, v in params.items() if k != "shared"})
        rows.append((params, {r.lab.name: main_metric(r.lab, r.run(p, params["shared"])) for r in replays}))
        print(json.dumps(params), " ".join(f"{n} {v - before[n]:+.4f}" for n, v in rows[-1][1].items()), flush=True)
    chosen = leave_one_out(labs, [({"weight": 0.0}, before), *rows])
    final = chosen["all"][0]
    final_values = next(v for p, v in rows if p == final) if final in [p for p, _ in rows] else before
    result = {
        "family": "LexicalFeedback (seeds, expansion, repeat, depth, weight, shared)",
        "space": SPACE,
        "sets": {
            n: {
                "vector": main_metric(labs[i], source_run(labs[i], "vector")),
                "bm25": main_metric(labs[i], source_run(labs[i], "bm25")),
                "before": before[n],
                "held_out_params": chosen[n][0],
                "held_out": chosen[n][1],
                "final": final_values[n],
            }
            for i, n in enumerate(before)
        },
        "final_params": final,
    }
    if out is not None:
        write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--captures", default=str(DEFAULT_DIR))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--loso", default=None, help="write the leave-one-set-out table here (JSON)")
    args = parser.parse_args(argv)
    sets = set_names(parser, args)
    folder = Path(args.captures)
    replays = [Replay(load(n, Path(args.data), folder), folder) for n in sets]
    if args.check:
        check(replays)
    if args.loso:
        print_loso(loso(replays, Path(args.loso)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
