"""The lexical feedback's cost on long memories (issue #14): the final CTE with the feedback as shipped
(memories longer than LexicalFeedback.max_length tokens take no part and are not read through), with
the feedback unbounded (the form before the bound), and without it, on the same hits, alternating.

    python benchmarks/feedback_length.py --data /work/shared/eval [--rounds 5] [--queries 30]

A scratch database (`--db-name`, dropped and created, dropped at the end) gets three tenants of 300
memories each: LongMemEval documents drawn at random (real text, a session's turns), the 300 longest
LongMemEval documents (real text), and synthetic memories of `--synthetic-words` words drawn from a
Zipf vocabulary (a stand-in for stored documents: synthetic, and reported as such). Vectors are
hashed (HashEmbedder): what is timed is the final CTE's reads, not the ranking's quality. For each
tenant, `--queries` queries (the first words of random memories) run once through the V4 path to get
their workers' hits (benchmarks/fusion_cost.py), then build_candidates is timed on those hits with each
of the three registries in turn, `--rounds` times. Writes results/fusion/<timestamp>-feedback-length.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import psycopg
from fusion_cost import alternate, captured_hits, percentiles
from overhead import git_head
from psycopg import sql

from evals.runner import LOADERS
from memoria_pg import Config, MemorySystem, indexed_tokens
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.registry import DEFAULT_FEEDBACK, NO_FEEDBACK, LexicalFeedback

REPO = Path(__file__).resolve().parents[1]
PER_TENANT = 300
FORMS = {
    "shipped": DEFAULT_WORKERS,
    "unbounded": DEFAULT_WORKERS.with_feedback(LexicalFeedback(max_length=2**31 - 1)),
    "without": DEFAULT_WORKERS.with_feedback(NO_FEEDBACK),
}


def tenants(data: Path, synthetic_words: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    docs = LOADERS["longmemeval"](data, None).documents
    rng = random.Random(seed)
    length = {id(d): len(indexed_tokens(d.content, d.context)) for d in docs}
    vocab = [f"{w}{i}" for i, w in enumerate(["tea", "map", "run", "sky", "oak", "ink", "fox", "bay"] * 6000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]

    def rows(chosen: list[Any]) -> list[dict[str, Any]]:
        return [{"content": d.content, "context": d.context} for d in chosen]

    return {
        "lme_random": rows(rng.sample(docs, PER_TENANT)),
        "lme_longest": rows(sorted(docs, key=lambda d: -length[id(d)])[:PER_TENANT]),
        f"synthetic_{synthetic_words}_words": [
            {"content": " ".join(rng.choices(vocab, weights=weights, k=synthetic_words))[:100_000]}
            for _ in range(PER_TENANT)
        ],
    }


def shape(dsn: str, tenant: str) -> dict[str, float]:
    with psycopg.connect(dsn) as conn:
        postings, doc_len = conn.execute(
            "SELECT count(*)::float8 / count(DISTINCT memory_id), percentile_cont(0.5) WITHIN GROUP (ORDER BY doc_len) "
            "FROM memoria.memory_terms WHERE tenant = %s",
            (tenant,),
        ).fetchone()
    return {"postings_per_memory": round(postings, 1), "doc_len_p50": doc_len}


def report(result: dict[str, Any]) -> str:
    lines = [
        "# The lexical feedback on long memories",
        "",
        f"{result['when']}, commit {result['commit']}, load {result['load']}; {result['queries']} queries x "
        f"{result['rounds']} rounds per tenant, the three forms alternating on the same hits "
        f"(`benchmarks/feedback_length.py`). The bound: memories longer than {result['max_length']} tokens "
        "take no part in the feedback.",
        "",
        "| tenant (300 memories) | postings per memory | doc_len p50 | final CTE p50 ms: shipped / unbounded / without feedback |",
        "|---|---|---|---|",
    ]
    for name, row in result["tenants"].items():
        p50 = " / ".join(f"{row[form]['p50_ms']:.2f}" for form in FORMS)
        lines.append(f"| {name} | {row['postings_per_memory']} | {row['doc_len_p50']:.0f} | {p50} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the evaluation data folder (LongMemEval)")
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--db-name", default="memoria_feedback_length")
    parser.add_argument("--queries", type=int, default=30, help="per tenant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--synthetic-words", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", default=str(REPO / "results" / "fusion"))
    args = parser.parse_args(argv)
    name = sql.Identifier(args.db_name)
    with psycopg.connect(args.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
    dsn = psycopg.conninfo.make_conninfo(args.admin_dsn, dbname=args.db_name)
    try:
        result = run(dsn, args)
    finally:
        with psycopg.connect(args.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stamp}-feedback-length.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / f"{stamp}-feedback-length.md").write_text(report(result), encoding="utf-8")
    print(report(result))
    return 0


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    load = [os.getloadavg()[0]]
    result: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_head(),
        "queries": args.queries,
        "rounds": args.rounds,
        "max_length": DEFAULT_FEEDBACK.max_length,
        "tenants": {},
    }
    with MemorySystem(Config(dsn=dsn, use_age=False), embedder=HashEmbedder(), auto_migrate=True) as system:
        corpus = tenants(Path(args.data), args.synthetic_words, args.seed)
        for tenant, rows in corpus.items():
            system.store_many([{**row, "tenant": tenant} for row in rows])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")
        for tenant in corpus:
            seen = captured_hits(system, [tenant], args.queries, lean=True)
            times, _ = alternate(seen, system, args.rounds, FORMS)
            load.append(os.getloadavg()[0])
            result["tenants"][tenant] = {
                **shape(dsn, tenant),
                **{form: percentiles(values) for form, values in times.items()},
            }
    result["load"] = f"{min(load):.1f}-{max(load):.1f}"
    return result


if __name__ == "__main__":
    sys.exit(main())
