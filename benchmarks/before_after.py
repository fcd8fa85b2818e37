"""Before/after, side by side in one run: a git revision of the library (A, "before") and the working
tree (B, "after"), each in its own process with its own MemorySystem, on the same database, alternating
per query (A then B, then B then A), the scale benchmark's queries with their vectors supplied.

    python benchmarks/before_after.py --rev 4d9e953 --db memoria_scale_100000 [--queries 200] [--rounds 2]
    python benchmarks/before_after.py --rev 2baa82b --before-db memoria_old_layout --db memoria_new_layout
    python benchmarks/before_after.py --rev 7e3efa7 --db memoria_ab_locomo --locomo /work/shared/eval

With --locomo the data and queries are real: the LoCoMo dev turns with their context (loaded into --db
the first time, with the evaluation's cached MiniLM vectors, as benchmarks/peers.py loads them) and its
questions with evidence, their cached vectors supplied.

The database must exist (built by `scale.py`) and be migrated to the working tree's head; the old code
runs against that schema. With --before-db the revision runs on that database instead (a copy of the
same data in an earlier schema, e.g. before a layout migration: CREATE DATABASE ... TEMPLATE, then
upgrade one copy), so a schema change is compared side by side on the same rows. Writes results/scale/<timestamp>-<db>-before-after.{md,json}.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODES = {
    "v4": "V4 retrieval-only",
    # What a caller that reads only the memories gets: query(..., candidates=False) where the library has
    # it (since 7530bf1: the final CTE reads only the rows it can return), else the same as "v4" / "v3".
    "v4lean": "V4 retrieval-only, no candidate list",
    "v3lean": "V3 retrieval-only, no candidate list",
    "v3": "V3",
    "ranked": "V4 with ranking",
    "v3ranked": "V3 with ranking (V3 as by default)",
    # The query embedded by the configured backend (ONNX by default) instead of supplied: latency only
    # (the stored vectors are HashEmbedder's, so the ranking means nothing).
    "e2e": "V4 retrieval-only, query embedded by the library",
    "e2elean": "V4 retrieval-only, no candidate list, query embedded by the library",
}
WORKERS = ("vector", "bm25", "graph", "phrase", "attribute")


def backend_cpu_ns(pids: list[int]) -> int:
    """CPU time the server backends `pids` have used (/proc/<pid>/schedstat: nanoseconds on a CPU, not
    the 10 ms ticks of /proc/<pid>/stat), 0 for one that has gone."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def serve(dsn: str, n: int, locomo: str | None = None) -> None:
    """The child: answers `<query index> <mode>` lines with the query's diagnostics as JSON lines.

    Its library is the revision's or the working tree's (the child's PYTHONPATH): only what both
    have is used here, the queries and vectors built as phases.Bench builds them. The server CPU of a
    query is what the child's own backends (its application_name) used meanwhile, read from /proc: the
    server must run on this machine."""
    import corpus
    import library
    import psycopg

    from memoria_pg import Config, MemorySystem

    name = f"memoria-bench-{os.getpid()}"
    dsn = psycopg.conninfo.make_conninfo(dsn, application_name=name)
    admin = psycopg.connect(dsn, autocommit=True)

    def backends() -> list[int]:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()", (name,)
        ).fetchall()
        return [r[0] for r in rows]

    # No query-vector cache: the e2e mode embeds every query each time, as a user's new question is.
    config = Config.from_env(dsn=dsn, use_age=False, pool_min_size=12, pool_max_size=48, query_cache_size=0)
    if locomo:
        queries, vectors = locomo_queries(Path(locomo), n)
    else:
        queries = corpus.queries(n, seed=7, n_tenants=10, world=corpus.universe(7, 10))
        embed = library.hash_embed()
        vectors = [embed(q.text) for q in queries]
    with MemorySystem(config, auto_migrate=False) as system:
        lean = {"candidates": False} if "candidates" in inspect.signature(system.query).parameters else {}
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            i, mode = line.split()
            q = queries[int(i)]
            pids = backends()  # the pool's connections (it may open more during the query: counted from 0)
            s0 = backend_cpu_ns(pids)
            c0 = time.process_time()
            result = system.query(
                q.text,
                tenant=q.tenant,
                memory_type=getattr(q, "memory_type", None),
                ranking=mode in ("ranked", "v3ranked"),
                v4=mode not in ("v3", "v3ranked", "v3lean"),
                embedding=None if mode.startswith("e2e") else vectors[int(i)],
                **(lean if mode.endswith("lean") else {}),
            )
            d = result.diagnostics
            client_ms = (time.process_time() - c0) * 1000
            server_ms = (backend_cpu_ns(backends()) - s0) / 1e6
            print(
                json.dumps(
                    {
                        "total_ms": d.total_ms,
                        "embedding_ms": d.embedding_ms,
                        "retrieval_ms": d.retrieval_ms,
                        "database_ms": d.database_ms,
                        "worker_ms": d.worker_ms,
                        "client_cpu_ms": client_ms,
                        "server_cpu_ms": server_ms,
                        "ids": [m.memory_id for m in result.memories],
                    }
                ),
                flush=True,
            )


def locomo_data(data: Path) -> tuple[Any, dict, dict]:
    """LoCoMo dev and the evaluation's cached MiniLM vectors of its memories and questions."""
    from evals import locomo
    from evals.cache import EmbeddingCache, default_cache_dir
    from evals.runner import embed

    dataset = locomo.load(data)
    docs, queries = embed(dataset, EmbeddingCache(default_cache_dir() / "locomo-all-MiniLM-L6-v2.npz"))
    return dataset, docs, queries


def locomo_queries(data: Path, n: int) -> tuple[list[Any], list[Any]]:
    """The first `n` questions with evidence (no adversarial ones), and their vectors."""
    from evals.metrics import ADVERSARIAL

    dataset, _, vectors = locomo_data(data)
    queries = [q for q in dataset.queries if q.relevant and q.group != ADVERSARIAL][:n]
    return queries, [vectors[q.query_id] for q in queries]


def load_locomo(admin_dsn: str, db: str, data: Path) -> None:
    """Create `db` with the LoCoMo turns (context and vectors as the evaluation stores them), once."""
    import psycopg
    from psycopg import sql

    from memoria_pg import Config, MemoryRecord, MemorySystem

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
            return
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    params = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = db
    dsn = psycopg.conninfo.make_conninfo(**params)
    dataset, vectors, _ = locomo_data(data)
    with MemorySystem(Config(dsn=dsn, use_age=False), auto_migrate=True) as system:
        system.store_many(
            (MemoryRecord(content=d.content, context=d.context, tenant=d.tenant, metadata={"doc_id": d.doc_id},
                          created_at=d.created_at, external_id=d.doc_id, embedding=vectors[(d.tenant, d.doc_id)])
             for d in dataset.documents), return_ids=False,
        )  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def child(
    root: Path, dsn: str, n: int, locomo: str | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    # The child imports the library of `root` (first on its PYTHONPATH), and this folder's serve(),
    # corpus and library modules: both sides build the same queries. `extra_env`: MEMORIA_* settings
    # of this side only (its Config.from_env reads them).
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": os.pathsep.join([str(root), str(HERE)])}
    code = f"import before_after; before_after.serve({dsn!r}, {n}, {locomo!r})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root, env=env
    )
    assert json.loads(proc.stdout.readline())["ready"]
    return proc


def ask(proc: subprocess.Popen, i: int, mode: str) -> dict[str, Any]:
    proc.stdin.write(f"{i} {mode}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def p95(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.95))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rev", required=True, help="the 'before' git revision")
    p.add_argument("--db", required=True, help="database name on the server of --dsn")
    p.add_argument("--before-db", help="the revision's database (default: --db), the same data in its schema")
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--modes", default="v4,v3,ranked", help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--locomo", type=Path, help="real data: the folder holding locomo/ (MEMORIA_EVAL_DATA)")
    p.add_argument(
        "--before-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a MEMORIA_* setting of the 'before' side only (repeatable): with --rev HEAD, one setting's effect",
    )
    p.add_argument("--out", default="results/scale")
    args = p.parse_args()
    before_env = dict(item.split("=", 1) for item in args.before_env)
    if any(not k.startswith("MEMORIA_") for k in before_env):
        p.error("--before-env takes MEMORIA_* settings, as NAME=VALUE")
    import psycopg

    params = psycopg.conninfo.conninfo_to_dict(args.dsn)
    params["dbname"] = args.db
    dsn = psycopg.conninfo.make_conninfo(**params)
    params["dbname"] = args.before_db or args.db
    before_dsn = psycopg.conninfo.make_conninfo(**params)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", args.rev], capture_output=True, check=True, cwd=REPO).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        locomo = str(args.locomo) if args.locomo else None
        if locomo:
            load_locomo(args.dsn, args.db, args.locomo)
        sides = {
            "before": child(Path(tmp), before_dsn, args.queries, locomo, before_env),
            "after": child(REPO, dsn, args.queries, locomo),
        }
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            p.error(f"unknown modes {unknown}: choose from {list(MODES)}")
        res: dict[str, dict[str, list[dict[str, Any]]]] = {m: {s: [] for s in sides} for m in modes}
        loads = []
        for mode in modes:  # warm-up: every statement prepared, every page cached, on both sides
            for i in range(args.queries):
                for proc in sides.values():
                    ask(proc, i, mode)
        for _ in range(args.rounds):
            for mode in modes:
                for i in range(args.queries):
                    for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                        res[mode][side].append(ask(sides[side], i, mode))
                loads.append(os.getloadavg()[0])
        for proc in sides.values():
            proc.stdin.close()
            proc.wait()

    lines = [
        f"# Before/after side by side: `{args.rev}` vs the working tree (HEAD {head}) on `{args.db}`"
        + (f" (before: on `{args.before_db}`)" if args.before_db else "")
        + (f" (before with {', '.join(f'{k}={v}' for k, v in before_env.items())})" if before_env else ""),
        "",
        f"Each side is its own process and MemorySystem on the same database, alternating per query "
        f"(before then after, then after then before), {args.queries} queries x {args.rounds} rounds per "
        f"mode, embedding supplied ({'LoCoMo dev, cached MiniLM vectors' if locomo else 'HashEmbedder vectors'}) except in the e2e mode (embedded by the library, no query-vector cache). 1-minute load average during the passes "
        f"{min(loads):.1f}..{max(loads):.1f} on {os.cpu_count()} CPUs. client_cpu_ms = CPU of the client "
        f"process per query (all its threads); server_cpu_ms = CPU of its own server backends per query "
        f"(/proc/<pid>/schedstat, so the machine's load does not inflate it).",
        "",
        "| mode | measure | before p50 | after p50 | before / after (p50) | median per-query ratio | "
        "before p95 | after p95 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        label = MODES[mode]
        b, a = res[mode]["before"], res[mode]["after"]
        measures = [
            (k, [r[k] for r in b], [r[k] for r in a], True)
            for k in ("total_ms", "embedding_ms", "retrieval_ms", "database_ms", "client_cpu_ms", "server_cpu_ms")
            if k != "embedding_ms" or mode.startswith("e2e")
        ]
        if mode in ("v4", "e2e"):
            measures += [
                (
                    f"worker {w}",
                    [r["worker_ms"][w] for r in b if w in r["worker_ms"]],
                    [r["worker_ms"][w] for r in a if w in r["worker_ms"]],
                    False,
                )
                for w in WORKERS
            ]
        for name, vb, va, paired in measures:
            if not vb or not va:
                continue
            ratios = [x / y for x, y in zip(vb, va, strict=True) if y] if paired else []
            per_query = f"{statistics.median(ratios):.2f}" if ratios else "-"  # "-": a side that is all zeros
            if not statistics.median(va):  # e.g. V3's retrieval_ms once its search ran in the final CTE
                lines.append(f"| {label} | {name} | {statistics.median(vb):.1f} | 0 | - | - | {p95(vb):.1f} | 0 |")
                continue
            lines.append(
                f"| {label} | {name} | {statistics.median(vb):.1f} | {statistics.median(va):.1f} | "
                f"{statistics.median(vb) / statistics.median(va):.2f} | {per_query} | {p95(vb):.1f} | "
                f"{p95(va):.1f} |"
            )
    lines.append("")
    for mode in modes:  # the same rows on both sides (--before-db: a copy): the answers should be the same
        pairs = list(zip(res[mode]["before"], res[mode]["after"], strict=True))
        same = sum(b["ids"] == a["ids"] for b, a in pairs)
        overlap = [len(set(b["ids"]) & set(a["ids"])) / max(1, len(b["ids"])) for b, a in pairs]
        lines.append(
            f"{MODES[mode]}: identical result ids (same order) in {same} of {len(pairs)} query pairs; "
            f"mean overlap of the result sets {statistics.mean(overlap):.3f}"
        )
    text = "\n".join(lines) + "\n"
    stem = Path(args.out) / f"{time.strftime('%Y%m%dT%H%M%S')}-{args.db}-before-after"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(
        json.dumps({"args": vars(args), "head": head, "loads": loads, "results": res}, default=str)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
