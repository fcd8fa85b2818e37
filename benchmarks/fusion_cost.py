"""The final CTE's cost with and without the per-query weight shift or the lexical feedback (issue
#14), or against a changed copy of its SQL, on the same hits.

    python benchmarks/fusion_cost.py --dsn postgresql://postgres@127.0.0.1:55432/memoria_scale_100000 \
        [--compare shift|feedback] [--compare variant --variant my_final_candidates.sql]
        [--compare revision --rev COMMIT]

Takes `--queries` queries (the first words of random memories of each tenant of a database built by
benchmarks/scale.py), runs each once through the V4 path to get its workers' hits, then times the
final CTE alone (build_candidates, on its generic plan, with the arguments the pipeline gave it) on
those hits, alternating the default registry and NO_SHIFT (the declared weights) or NO_FEEDBACK (no
lexical feedback), or the shipped sql/final_candidates.sql and the `--variant` file, `--rounds` times
each. `queries_whose_candidates_differ` counts the queries whose candidates (ids and fused scores to
1e-9) are not the same in the two forms' first round: 0 for a variant meant to change only the cost.
`--compare revision` times the shipped path (build_candidates, as above) against the statement
sql/final_candidates.sql was at COMMIT (`git show`), executed as it stands on the same hits with
today's parameters (a statement of then ignores those it does not name), fetched the same way: the
final CTE's p50 now against then, whatever changed in between (issue #14's "+1 ms" read as the
final CTE's cost against the statement before its work).
The database is migrated to head first: give it a copy (CREATE DATABASE ... TEMPLATE ...) of a shared one.
Figures of 2026-12-01 (a copy of memoria_scale_100000): results/fusion/final_cte_cost_100k.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
from overhead import git_head

from memoria_pg import Config, MemorySystem
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db.native import native
from memoria_pg.query import candidates as candidates_module
from memoria_pg.query import pipeline as pipeline_module
from memoria_pg.query.candidates import _fetch, build_candidates, final_cte_params
from memoria_pg.query.workers import DEFAULT_WORKERS, WorkerRegistry
from memoria_pg.query.workers.registry import NO_FEEDBACK, NO_SHIFT

Seen = list[tuple[str, dict[str, Any], dict[str, Any]]]  # tenant, hits, the pipeline's other arguments


def captured_hits(system: MemorySystem, tenants: list[str], per_tenant: int, lean: bool) -> Seen:
    seen: Seen = []
    original = pipeline_module.build_candidates

    def record(conn, hits, registry, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((current, dict(hits), kwargs))
        return original(conn, hits, registry, **kwargs)

    pipeline_module.build_candidates = record  # type: ignore[assignment]
    try:
        for current in tenants:
            with system.db.transaction(current) as conn:
                texts = conn.execute(
                    "SELECT content FROM memoria.memories WHERE tenant = %s ORDER BY md5(id::text) LIMIT %s",
                    (current, per_tenant),
                ).fetchall()
            for (text,) in texts:
                system.query(" ".join(text.split()[:6]), tenant=current, top_k=10, ranking=False, candidates=not lean)
    finally:
        pipeline_module.build_candidates = original  # type: ignore[assignment]
    return seen


@contextlib.contextmanager
def final_sql(text: str | None) -> Iterator[None]:
    """build_candidates reads `text` as sql/final_candidates.sql (None: the shipped file)."""
    original = candidates_module.load_sql
    if text is not None:
        candidates_module.load_sql = lambda name: text if name == "final_candidates" else original(name)  # type: ignore[assignment]
    _forget_texts()
    try:
        yield
    finally:
        candidates_module.load_sql = original  # type: ignore[assignment]
        _forget_texts()


def _forget_texts() -> None:
    """The statement texts candidates.py made from the SQL file and keeps."""
    for made in (candidates_module._final_text, candidates_module._top_text, candidates_module._v3_text):
        made.cache_clear()


Rows = dict[str, list[list[tuple[int, float]]]]  # per form, per query: (id, fused score to 1e-9)


def alternate(
    seen: Seen,
    system: MemorySystem,
    rounds: int,
    registries: Mapping[str, WorkerRegistry],
    texts: Mapping[str, str | None] | None = None,
) -> tuple[dict[str, list[float]], Rows]:
    """build_candidates on each query's hits with each form in turn (a registry, and the SQL text
    `texts` gives it, else the shipped file), the order rotating per query and round: every form's
    wall milliseconds, and its candidates in the first round."""
    names, texts = list(registries), texts or {}
    times: dict[str, list[float]] = {name: [] for name in names}
    rows: Rows = {name: [] for name in names}
    for r in range(rounds):
        for i, (tenant, hits, kwargs) in enumerate(seen):
            k = (i + r) % len(names)
            for name in names[k:] + names[:k]:
                with final_sql(texts.get(name)), system.db.transaction(tenant, generic_plans=True) as conn:
                    t0 = time.perf_counter()
                    found = build_candidates(conn, hits, registries[name], **kwargs)
                    times[name].append((time.perf_counter() - t0) * 1000)
                if r == 0:
                    rows[name].append([(c.memory_id, round(c.retrieval_score, 9)) for c in found])
    return times, rows


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": statistics.median(values), "p95_ms": ordered[int(0.95 * (len(ordered) - 1))]}


def time_final_cte(
    seen: Seen, system: MemorySystem, rounds: int, compare: str, variant: str | None = None
) -> dict[str, Any]:
    registries = {
        "shift": {"shift": DEFAULT_WORKERS, "declared": DEFAULT_WORKERS.with_shift(NO_SHIFT)},
        "feedback": {"feedback": DEFAULT_WORKERS, "without": DEFAULT_WORKERS.with_feedback(NO_FEEDBACK)},
        "variant": {"variant": DEFAULT_WORKERS, "shipped": DEFAULT_WORKERS},
    }[compare]
    times, rows = alternate(seen, system, rounds, registries, {"variant": variant})
    out: dict[str, Any] = {"queries": len(seen), "rounds": rounds}
    out.update({name: percentiles(values) for name, values in times.items()})
    out["mean_hits"] = statistics.fmean(sum(len(v) for v in hits.values()) for _, hits, _ in seen)
    first, second = registries
    out["median_ratio"] = statistics.median(a / b for a, b in zip(times[first], times[second], strict=True))
    out["queries_whose_candidates_differ"] = sum(a != b for a, b in zip(rows[first], rows[second], strict=True))
    return out


def time_against_revision(seen: Seen, system: MemorySystem, rounds: int, rev: str) -> dict[str, Any]:
    """The shipped build_candidates against the raw statement of sql/final_candidates.sql at `rev`,
    alternating per query and round (which goes first rotates)."""
    then = subprocess.run(
        ["git", "show", f"{rev}:sql/final_candidates.sql"], check=True, capture_output=True, text=True
    ).stdout
    old = native(then, f"sql/final_candidates.sql at {rev}")
    times: dict[str, list[float]] = {"now": [], "then": []}
    for r in range(rounds):
        for i, (tenant, hits, kwargs) in enumerate(seen):
            for name in ("now", "then") if (i + r) % 2 == 0 else ("then", "now"):
                with system.db.transaction(tenant, generic_plans=True) as conn:
                    t0 = time.perf_counter()
                    if name == "now":
                        build_candidates(conn, hits, DEFAULT_WORKERS, **kwargs)
                    else:
                        _fetch(conn, old, final_cte_params(hits, DEFAULT_WORKERS, **kwargs))
                    times[name].append((time.perf_counter() - t0) * 1000)
    out: dict[str, Any] = {"queries": len(seen), "rounds": rounds, "rev": rev}
    out.update({name: percentiles(values) for name, values in times.items()})
    out["median_ratio"] = statistics.median(a / b for a, b in zip(times["now"], times["then"], strict=True))
    out["p50_difference_ms"] = out["now"]["p50_ms"] - out["then"]["p50_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="a database built by benchmarks/scale.py")
    parser.add_argument("--queries", type=int, default=10, help="per tenant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", choices=("shift", "feedback", "variant", "revision"), default="shift")
    parser.add_argument(
        "--variant",
        default=None,
        help="with --compare variant: a changed copy of sql/final_candidates.sql to time against it",
    )
    parser.add_argument("--rev", default=None, help="with --compare revision: the commit to time against")
    parser.add_argument("--lean", action="store_true", help="the hits of queries without the candidate list")
    parser.add_argument("--out", default=None, help="write the figures here (JSON)")
    args = parser.parse_args(argv)
    if (args.compare == "variant") != (args.variant is not None):
        parser.error("--compare variant and --variant FILE go together")
    if (args.compare == "revision") != (args.rev is not None):
        parser.error("--compare revision and --rev COMMIT go together")
    variant = Path(args.variant).read_text(encoding="utf-8") if args.variant else None
    with MemorySystem(Config(dsn=args.dsn), embedder=HashEmbedder(), auto_migrate=True) as system:
        with psycopg.connect(args.dsn) as conn:
            tenants = [r[0] for r in conn.execute("SELECT DISTINCT tenant FROM memoria.memories ORDER BY 1")]
        seen = captured_hits(system, tenants, args.queries, args.lean)
        load_before = os.getloadavg()[0]
        timed = (
            time_against_revision(seen, system, args.rounds, args.rev)
            if args.rev
            else time_final_cte(seen, system, args.rounds, args.compare, variant)
        )
        result = {
            **timed,
            "compare": args.compare,
            "lean": args.lean,
            "commit": git_head(),
            "load_average": [load_before, os.getloadavg()[0]],
        }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
