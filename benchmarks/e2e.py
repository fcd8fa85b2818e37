"""End to end with the real query embedding (issue 17, item 6): `query()` as a REST, MCP or CLI call
makes it, the library embedding the text, on a database the scale benchmark built.

    PYTHONPATH=.:benchmarks python benchmarks/e2e.py [--db memoria_scale_100000] [--backends onnx,onnx-int8]
        [--queries 200] [--rounds 2]

One MemorySystem per embedding backend (all-MiniLM-L6-v2 on ONNX Runtime, float or int8; torch when
named), without the query cache (every query pays its embedding).
Query by query the backends take turns, the order rotated, so the machine's drift falls on all alike.
Two modes: retrieval-only without the candidate list (`candidates=False`: what REST, MCP and the CLI
ask) and the library's default call (ranking and the candidate list). Reported: wall p50 / p95, the
embedding's share, the client process's CPU per query, and the median per-query ratio to the first
backend. Writes results/scale/<UTC timestamp>-<db>-e2e.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import corpus
from overhead import git_head
from report import run_line, save_figures, summary
from scale import with_db

from memoria_pg import Config, MemorySystem

REPO = Path(__file__).resolve().parents[1]
MODES = {
    "lean": ("retrieval-only, no candidate list (`candidates=False`)", {"ranking": False, "candidates": False}),
    "default": ("the library's default call (ranking, candidate list)", {}),
}
TARGET_P95_MS = 20.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--db", default="memoria_scale_100000")
    parser.add_argument("--backends", default="onnx,onnx-int8")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "results" / "scale"))
    args = parser.parse_args(argv)

    dsn = with_db(args.admin_dsn, args.db)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    queries = corpus.queries(args.queries, seed=7, n_tenants=10, world=corpus.universe(7, 10))
    systems = {
        b: MemorySystem(
            Config.from_env(dsn=dsn, use_age=False, query_cache_size=0, embedding_backend=b), auto_migrate=False
        )
        for b in backends
    }
    rows: dict[str, dict[str, list[dict[str, float]]]] = {m: {b: [] for b in backends} for m in MODES}
    load = [os.getloadavg()[0]]
    try:
        for system in systems.values():  # load the model, warm the pool and the plans
            for q in queries[:30]:
                for _, kw in MODES.values():
                    system.query(q.text, tenant=q.tenant, memory_type=q.memory_type, **kw)
        for r in range(args.rounds):
            for i, q in enumerate(queries):
                for mode, (_, kw) in MODES.items():
                    k = (i + r) % len(backends)
                    for b in backends[k:] + backends[:k]:
                        c0, t0 = time.process_time(), time.perf_counter()
                        resp = systems[b].query(q.text, tenant=q.tenant, memory_type=q.memory_type, **kw)
                        wall, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
                        embedding = resp.diagnostics.embedding_ms
                        rows[mode][b].append({"wall_ms": wall, "cpu_ms": cpu, "embedding_ms": embedding})
            load.append(os.getloadavg()[0])
    finally:
        for system in systems.values():
            system.close()

    figures: dict[str, Any] = {}
    first = backends[0]
    for mode in MODES:
        figures[mode] = {}
        for b in backends:
            rs = rows[mode][b]
            ratios = [x["wall_ms"] / y["wall_ms"] for x, y in zip(rs, rows[mode][first], strict=True)]
            figures[mode][b] = {
                "wall_ms": summary([x["wall_ms"] for x in rs]),
                "embedding_ms_p50": statistics.median(x["embedding_ms"] for x in rs),
                "cpu_ms_mean": statistics.fmean(x["cpu_ms"] for x in rs),
                "ratio_to_first": statistics.median(ratios),
            }
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    meta = {"db": args.db, "commit": git_head(), "cpus": os.cpu_count(), "load": load, "queries": len(queries),
            "rounds": args.rounds, "backends": backends}  # fmt: skip
    out = Path(args.out)
    save_figures(out, f"{stamp}-{args.db}-e2e", meta, figures)
    lines = [
        f"# End to end with the real query embedding: {args.db}",
        "",
        run_line(meta, load) + f"{len(queries)} scale queries x {args.rounds} rounds, the backends taking turns "
        "query by query (`benchmarks/e2e.py`). The library embeds each query (all-MiniLM-L6-v2).",
        "",
        f"| mode | backend | wall p50 / p95 ms | embedding p50 ms | client CPU ms per query | median per-query ratio to {first} | p95 <= {TARGET_P95_MS:g} ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, (label, _) in MODES.items():
        for b in backends:
            fig = figures[mode][b]
            w = fig["wall_ms"]
            verdict = "met" if w["p95"] <= TARGET_P95_MS else "missed"
            lines.append(
                f"| {label} | {b} | {w['p50']:.1f} / {w['p95']:.1f} | {fig['embedding_ms_p50']:.1f} "
                f"| {fig['cpu_ms_mean']:.1f} | {fig['ratio_to_first']:.2f} | {verdict} |"
            )
    (out / f"{stamp}-{args.db}-e2e.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
