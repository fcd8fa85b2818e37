"""The library's own overhead around its SQL (issue 17): per query, the wall time of `query()` minus
the time its statements spent in the server on the query's critical path.

    python benchmarks/overhead.py --db memoria_ab_locomo_snow --locomo /work/shared/eval [--queries 400]
    python benchmarks/overhead.py --db memoria_scale_100000 [--queries 200]

Queries run one at a time (vectors supplied, retrieval-only), each between two snapshots of
`pg_stat_statements` taken on a separate admin connection, so each statement's server time is known
per query, not only in aggregate. Each statement is put in its stage by the comment that opens its SQL
file: the entity lookup, the relevance pool, the workers (vector, BM25, ...), the final CTE, and the
settings each read block sends first. The stages run one after the other, the workers at the same
time, so the server's part of the critical path is

    settings + lookup + relevance pool + max(worker statements) + final CTE

and the overhead is the wall time minus that: the Python pipeline (query processing, routing, the
scheduler's threads, building the response), the driver, and the round trips. Counting every settings
statement and the relevance pool as sequential makes the overhead, if anything, smaller than it is.
The server must load pg_stat_statements (for the AGE server: `bash scripts/age-server.sh stop`, then
`MEMORIA_AGE_STAT_STATEMENTS=1 bash scripts/age-server.sh start`; off by default there, as it adds to every statement other benchmarks
time); the extension is created here if missing. Writes results/scale/<timestamp>-<db>-overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import corpus
import library
import psycopg
from before_after import locomo_queries
from report import run_line, save_figures, summary
from scale import with_db

from memoria_pg import Config, MemorySystem

REPO = Path(__file__).resolve().parents[1]
# Each statement's stage, by the start of its text (the SQL files' first comment; the settings
# statement is built in db/database.py). Worker statements run concurrently, the others in sequence.
STAGES = (
    ("-- Query processing's one read", "lookup", False),
    ("-- Relevance pool", "relevance", False),
    ("/* memoria-pg: sql/final_candidates.sql", "final", False),
    ("SELECT set_config(", "settings", False),
    ("-- Vector worker", "vector", True),
    ("-- BM25 worker", "bm25", True),
    ("-- Phrase worker", "phrase", True),
    ("-- Attribute worker", "attribute", True),
    ("-- Graph worker", "graph", True),
    ("-- Temporal worker", "temporal", True),
    ("-- Fusion worker", "fusion", True),
)
SNAPSHOT = """
SELECT queryid, left(query, 400), calls, total_exec_time + total_plan_time
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE 'SELECT queryid, left(query, %'  -- this snapshot: the one before the query is counted after it
"""


def stage_of(text: str) -> tuple[str, bool] | None:
    text = text.lstrip()
    for prefix, stage, concurrent in STAGES:
        if text.startswith(prefix):
            return stage, concurrent
    if text.startswith("SELECT memory_id, memory_type, distance FROM (") and "-- Vector worker" in text:
        return "vector", True  # a large tenant's split search: a UNION ALL of typed searches (VectorWorker)
    return None


def snapshot(admin: psycopg.Connection) -> dict[int, tuple[str, int, float]]:
    try:
        rows = admin.execute(SNAPSHOT).fetchall()
    except psycopg.errors.ObjectNotInPrerequisiteState:
        raise SystemExit(
            "the server does not load pg_stat_statements: add it to shared_preload_libraries and restart it "
            "(the AGE server: bash scripts/age-server.sh stop; MEMORIA_AGE_STAT_STATEMENTS=1 bash scripts/age-server.sh start)"
        ) from None
    return {qid: (text, calls, ms) for qid, text, calls, ms in rows}


def server_path(before: dict, after: dict) -> dict[str, Any]:
    """Server milliseconds per stage between two snapshots, and the critical path they make. A worker
    stage that ran several statements (the vector search split in two parts) counts its longest
    statement's mean as its share of the path, since they ran side by side."""
    sequential: dict[str, float] = {}
    concurrent: dict[str, float] = {}
    unknown = 0.0
    for qid, (text, calls, ms) in after.items():
        b_calls, b_ms = (before[qid][1], before[qid][2]) if qid in before else (0, 0.0)
        d_calls, d_ms = calls - b_calls, ms - b_ms
        if d_calls <= 0:
            continue
        kind = stage_of(text)
        if kind is None:
            unknown += d_ms
        elif kind[1]:
            concurrent[kind[0]] = max(concurrent.get(kind[0], 0.0), d_ms / d_calls)
        else:
            sequential[kind[0]] = sequential.get(kind[0], 0.0) + d_ms
    path = sum(sequential.values()) + max(concurrent.values(), default=0.0) + unknown
    return {"sequential": sequential, "workers": concurrent, "unknown": unknown, "path_ms": path}


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """The database and queries options of this benchmark and query_trace.py."""
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--db", required=True)
    parser.add_argument("--locomo", default=None, help="the evaluation data folder: LoCoMo's questions")
    parser.add_argument("--queries", type=int, default=200)


def query_set(locomo: str | None, n: int) -> tuple[list[Any], list[Any]]:
    """`n` queries and their vectors: LoCoMo's questions with their cached vectors (`locomo`: the
    evaluation data folder), else the scale benchmark's queries with HashEmbedder vectors."""
    if locomo:
        return locomo_queries(Path(locomo), n)
    queries = corpus.queries(n, seed=7, n_tenants=10, world=corpus.universe(7, 10))
    embed = library.hash_embed()
    return queries, [embed(q.text) for q in queries]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_query_arguments(parser)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "results" / "scale"))
    args = parser.parse_args(argv)

    dsn = with_db(args.admin_dsn, args.db)
    queries, vectors = query_set(args.locomo, args.queries)
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    config = Config.from_env(dsn=dsn, use_age=False, pool_min_size=12, pool_max_size=48, query_cache_size=0)
    modes = {"lean": {"candidates": False}, "list": {"candidates": True}}
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    load = [os.getloadavg()[0]]
    with MemorySystem(config, auto_migrate=False) as system:

        def run(i: int, **kw: Any) -> float:
            q = queries[i]
            t0 = time.perf_counter()
            system.query(
                q.text, tenant=q.tenant, memory_type=getattr(q, "memory_type", None), ranking=False,
                embedding=vectors[i], **kw,
            )  # fmt: skip
            return (time.perf_counter() - t0) * 1000

        for i in range(min(50, len(queries))):  # warm the pool, the plans and the caches
            for kw in modes.values():
                run(i, **kw)
        for r in range(args.rounds):
            for i in range(len(queries)):
                order = list(modes) if (i + r) % 2 == 0 else list(modes)[::-1]
                for mode in order:
                    before = snapshot(admin)
                    wall = run(i, **modes[mode])
                    path = server_path(before, snapshot(admin))
                    rows[mode].append({"wall_ms": wall, **path, "overhead_ms": wall - path["path_ms"]})
            load.append(os.getloadavg()[0])

    figures: dict[str, Any] = {}
    for mode, rs in rows.items():
        stages: dict[str, list[float]] = {}
        for r in rs:
            for k, v in {
                **r["sequential"],
                **r["workers"],
                "unrecognized (counted as sequential)": r["unknown"],
            }.items():
                stages.setdefault(k, []).append(v)
        figures[mode] = {
            "wall_ms": summary([r["wall_ms"] for r in rs]),
            "server_path_ms": summary([r["path_ms"] for r in rs]),
            "overhead_ms": summary([r["overhead_ms"] for r in rs]),
            "stage_median_ms": {k: statistics.median(v) for k, v in sorted(stages.items())},
            "queries": len(rs),
        }
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = Path(args.out)
    meta = {"db": args.db, "commit": git_head(), "cpus": os.cpu_count(), "load": load, "queries": len(queries),
            "rounds": args.rounds, "locomo": bool(args.locomo)}  # fmt: skip
    save_figures(out, f"{stamp}-{args.db}-overhead", meta, figures)
    lines = [
        f"# The library's overhead around its SQL: {args.db}",
        "",
        run_line(meta, load) + f"{len(queries)} {'LoCoMo' if args.locomo else 'scale'} queries x "
        f"{args.rounds} rounds, each mode after the other in turn, vectors supplied, retrieval-only "
        "(`benchmarks/overhead.py`). Server time per statement from `pg_stat_statements` around each query.",
        "",
        "| mode | wall p50 / p95 ms | server critical path p50 ms | overhead p50 / p95 ms | issue 17 target |",
        "|---|---|---|---|---|",
    ]
    names = {"lean": "V4, no candidate list (`candidates=False`)", "list": "V4 with the candidate list"}
    for mode, fig in figures.items():
        w, s, o = fig["wall_ms"], fig["server_path_ms"], fig["overhead_ms"]
        verdict = "met" if o["p50"] <= 3.0 else "missed"
        lines.append(
            f"| {names[mode]} | {w['p50']:.2f} / {w['p95']:.2f} | {s['p50']:.2f} | {o['p50']:.2f} / {o['p95']:.2f} "
            f"| overhead <= 3 ms p50: {verdict} |"
        )
    lines += [
        "",
        "Server milliseconds per stage (median over the queries that ran it; workers: their longest statement):",
        "",
    ]
    for mode, fig in figures.items():
        parts = ", ".join(f"{k} {v:.2f}" for k, v in fig["stage_median_ms"].items())
        lines.append(f"- {names[mode]}: {parts}")
    (out / f"{stamp}-{args.db}-overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
