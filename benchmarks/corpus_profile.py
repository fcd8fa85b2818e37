"""The shape of a memory in the public sets and in the synthetic corpus: what ingestion's cost follows.

    python benchmarks/corpus_profile.py [--data DIR] [--sets scifact,hotpotqa,locomo] [--synthetic 5000]

For SciFact and HotpotQA abstracts and LoCoMo turns with their context (the evaluation's loaders,
evals.runner.LOADERS, reading MEMORIA_EVAL_DATA or --data where the data lies, never copied) and for
the synthetic corpus of benchmarks/corpus.py in each of its profiles, every memory goes through the
library's own record preparation (memoria_pg.ingest.records.prepare: validation, BM25 tokenization of
content and context, rule-based entity extraction with the speaker first, the index-key limits and the
deduplication by entity key), no database involved. Per memory it counts:

    characters   of the content (what memoria.memories.content holds; the context is not counted)
    terms        BM25 postings: distinct indexed terms of content and context (memoria.memory_terms rows)
    entities     distinct entities (memoria.memory_entities rows)
    pairs        directed pairs of its entities, k(k-1): what every pair used to cost before migration 0013
    co-occ.      pairs the co-occurrence upkeep writes: the mentions whose ordinals (their places in the
                 memory's entity list, 1-based) are at most memoria.co_occurs's window apart
                 (COOCCURRENCE_WINDOW, read from migration 0013), each pair once (migration 0017), as
                 sql/ingest/insert_entities.sql counts them
    attributes   (subject, attribute, value) triples extracted (memoria.memory_attributes rows)

and reports the mean, p10, p50 and p90 of each, per set: markdown on stdout and in
results/ingest/<timestamp>-profile.md. benchmarks/ingest_real.py reads the same counts back from the
database after storing (its "entity mentions" and "co-occurrences counted" rows), a cross-check.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import os
import statistics
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import corpus

from memoria_pg.config import DEFAULT_MEMORY_TYPES
from memoria_pg.ingest.records import RecordRules, prepare

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "ingest"
REAL = ("scifact", "hotpotqa", "locomo")
METRICS = (
    ("chars", "characters"),
    ("terms", "BM25 terms"),
    ("entities", "entities"),
    ("pairs", "pairs of its entities"),
    ("counted", "co-occurrences counted"),
    ("attributes", "attributes"),
)
RULES = RecordRules(
    memory_types=DEFAULT_MEMORY_TYPES, default_type="general", default_tenant="default", dim=384, max_chars=100_000
)


def cooccurrence_window() -> int:
    """memoria.co_occurs's window, as migration 0013 creates it."""
    path = ROOT / "migrations" / "versions" / "0013_cooccurrence_window.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COOCCURRENCE_WINDOW" for t in node.targets):
            return int(ast.literal_eval(node.value))
    raise SystemExit(f"{path}: no COOCCURRENCE_WINDOW")


WINDOW = cooccurrence_window()


def counted_pairs(k: int, window: int = WINDOW) -> int:
    """Pairs {a, b}, a != b, of k mentions with ordinals 1..k that are at most `window` apart."""
    return sum(k - d for d in range(1, min(window, k - 1) + 1))


def shape(record: Mapping[str, Any], now: dt.datetime) -> dict[str, float]:
    """One record's counts, as the library prepares it for its batch."""
    p = prepare(dict(record), "profile", now, RULES)
    k = len(p.entities)
    return {
        "chars": float(len(p.record.content)),
        "terms": float(len(p.terms)),
        "entities": float(k),
        "pairs": float(k * (k - 1)),
        "counted": float(counted_pairs(k)),
        "attributes": float(len(p.attributes)),
    }


def summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for key, _ in METRICS:
        values = [r[key] for r in rows]
        deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
        out[key] = {"mean": statistics.fmean(values), "p10": deciles[0], "p50": deciles[4], "p90": deciles[8]}
    return out


def profile(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    rows = [shape(r, now) for r in records]
    return {"n": len(rows), "stats": summary(rows)}


def real_records(root: Path, name: str, limit: int | None) -> list[dict[str, Any]]:
    """The set's documents as records, the way benchmarks/ingest_real.py stores them."""
    from evals.runner import LOADERS

    docs = LOADERS[name](root, None).documents[:limit]
    return [{"content": d.content, "context": d.context, "tenant": d.tenant, "metadata": dict(d.metadata),
             "created_at": d.created_at} for d in docs]  # fmt: skip


def synthetic_records(n: int, profile_name: str) -> Iterable[dict[str, Any]]:
    return corpus.memories(n, seed=99, n_tenants=10, profile=profile_name)  # ingest_real.py's seed and tenants


def report(results: dict[str, dict[str, Any]], note: str) -> str:
    names = list(results)
    lines = [
        f"# Corpus profile ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        "Per memory, as memoria_pg.ingest.records.prepare derives it (benchmarks/corpus_profile.py): characters "
        "of the content, BM25 terms (distinct, content and context), entities, directed pairs of its entities "
        f"and the co-occurring pairs the database counts (ordinals at most {WINDOW} apart, migration 0013; each pair "
        "once, migration 0017), and "
        "the attributes extracted.",
        "",
        note,
        "",
        "| per memory | " + " | ".join(f"{n} ({results[n]['n']})" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label in METRICS:
        lines.append(f"| **{label}**, mean | " + " | ".join(f"**{results[n]['stats'][key]['mean']:.1f}**" for n in names) + " |")  # fmt: skip
        lines.append(
            f"| {label}, p10 / p50 / p90 | "
            + " | ".join("{p10:.0f} / {p50:.0f} / {p90:.0f}".format(**results[n]["stats"][key]) for n in names)
            + " |"
        )
    target, realistic = corpus.REALISTIC_TARGET["set"].casefold(), "synthetic (realistic)"
    if target in results and realistic in results:
        mean = {n: {k: results[n]["stats"][k]["mean"] for k, _ in METRICS} for n in (target, realistic)}
        lines += [
            "",
            f"The realistic profile against its target, {target} (corpus.REALISTIC_TARGET), mean per memory: "
            + ", ".join(
                f"{label} {mean[realistic][k]:.1f} vs {mean[target][k]:.1f} ({relative(mean[realistic][k], mean[target][k])})"
                for k, label in METRICS
                if k != "attributes"
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def relative(value: float, reference: float) -> str:
    return f"{(value - reference) / reference:+.1%}" if reference else "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=os.environ.get("MEMORIA_EVAL_DATA"))
    p.add_argument("--sets", default=",".join(REAL), help="real sets to profile (evals.runner.LOADERS names)")
    p.add_argument("--limit", type=int, default=None, help="the first LIMIT documents of each real set (all)")
    p.add_argument("--synthetic", type=int, default=5000, help="synthetic memories per profile (0: none)")
    p.add_argument("--profiles", default="short,realistic", help="the synthetic corpus's profiles")
    p.add_argument("--no-save", action="store_true", help="print only, do not write results/ingest/")
    args = p.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for name in filter(None, args.sets.split(",")):
        if args.data is None:
            raise SystemExit("the real sets need --data or MEMORIA_EVAL_DATA")
        print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
        results[name] = profile(real_records(args.data, name, args.limit))
    if args.synthetic > 0:
        for name in filter(None, args.profiles.split(",")):
            print(f"[{time.strftime('%H:%M:%S')}] synthetic ({name})", file=sys.stderr, flush=True)
            results[f"synthetic ({name})"] = profile(synthetic_records(args.synthetic, name))
    note = (
        f"Real sets: all their documents{'' if args.limit is None else f' up to {args.limit}'} (LoCoMo: every turn, "
        "with the 2 turns before and after as its context, evals.locomo.CONTEXT_TURNS). Synthetic: "
        f"corpus.memories({args.synthetic}, seed=99, n_tenants=10, profile=...), as benchmarks/ingest_real.py "
        "stores it."
    )
    text = report(results, note)
    if not args.no_save:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}-profile.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
