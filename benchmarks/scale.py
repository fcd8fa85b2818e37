"""Scale benchmark: ingest N synthetic memories into a fresh database, then measure the query path.

    python benchmarks/scale.py --n 100000 [--dsn ADMIN_DSN | --embedded] [--queries 200] [--out results/scale]

Vectors are HashEmbedder vectors (synthetic bag-of-words, hashed, unit length), supplied with the
records and the queries, so the numbers are the database part alone; one phase then lets the library
embed the queries with its own embedder as configured (`embedding_backend`: ONNX Runtime's int8 graph of
all-MiniLM-L6-v2 by default) when it loads. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import corpus
import evidence
import ingestion
import phases
import psycopg
import report
from psycopg import sql
from timing import CpuMeter, LoadMonitor, log

from memoria_pg import DEFAULT_MEMORY_TYPES, Config, MemorySystem, start_embedded_server

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:55432/postgres"


# -- setup ---------------------------------------------------------------------------------------


def with_db(dsn: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)


def admin_dsn(args) -> str:
    if not args.embedded:
        return args.dsn
    data_dir = Path(args.data_dir).resolve()
    # The server stops when this process exits (unless it was already running).
    return with_db(start_embedded_server(data_dir, keep_running=False), "postgres")


def migrate(dsn: str) -> None:
    """Migrate the database to head (MemorySystem's auto_migrate, with the default memory types).
    The AGE graph is left out: the graph worker runs its recursive CTE over the plain tables."""
    config = Config(dsn=dsn, memory_types=DEFAULT_MEMORY_TYPES, use_age=False, pool_min_size=1, pool_max_size=1)
    MemorySystem(config, auto_migrate=True).close()


def fresh_database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = with_db(admin, name)
    migrate(dsn)
    return dsn


def environment(admin: str, dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        settings = {
            name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
            for name in (
                "server_version",
                "shared_buffers",
                "work_mem",
                "effective_cache_size",
                "max_parallel_workers_per_gather",
                "jit",
                "synchronous_commit",
                "random_page_cost",
                "plan_cache_mode",
            )
        }
        settings["extensions"] = dict(conn.execute("SELECT extname, extversion FROM pg_extension").fetchall())
    repo = Path(__file__).resolve().parent.parent
    try:
        git = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=repo
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memoria_pg", "sql", "migrations"],
            capture_output=True,
            text=True,
            cwd=repo,
        ).stdout.split("\n")
    except OSError:
        git, dirty = "?", []
    return {
        "server": settings,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "git_head": git,
        "uncommitted_library_files": [d[3:] for d in dirty if d.strip()],
    }


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="memories to ingest")
    p.add_argument(
        "--dsn",
        default=os.environ.get("MEMORIA_BENCH_DSN", DEFAULT_ADMIN_DSN),
        help="admin (superuser) DSN of the server; a fresh database is created there",
    )
    p.add_argument("--embedded", action="store_true", help="use the embedded server instead of --dsn")
    p.add_argument("--data-dir", default="results/tmp/embedded-pg", help="embedded server data directory")
    p.add_argument("--db-name", default=None, help="database to (re)create (default memoria_scale_<n>)")
    p.add_argument("--drop", action="store_true", help="drop the database at the end (default: keep it)")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="query an existing database of this name (built by an earlier run) instead of creating "
        "and ingesting a fresh one: no ingestion figures; migrated to head first",
    )
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    corpus.add_profile_argument(p)
    p.add_argument("--batch-size", type=int, default=None, help="store_many batch size (default: config)")
    p.add_argument("--threads", default="1,4,8", help="client thread counts for the throughput phase")
    p.add_argument("--rounds", type=int, default=2, help="passes over the queries per throughput level")
    p.add_argument("--no-vacuum", action="store_true", help="skip VACUUM ANALYZE after ingestion")
    p.add_argument(
        "--no-vector-indexes",
        action="store_true",
        help="skip the per-tenant HNSW indexes after ingestion (memoria-pg db vector-indexes): tenants above "
        "vector_exact_max_rows are then searched exactly",
    )
    p.add_argument("--no-model", action="store_true", help="skip the real-embedding phase")
    p.add_argument("--out", default="results/scale")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out_dir = Path(args.out) / f"{stamp}-n{args.n}"
    admin = admin_dsn(args)
    name = args.db_name or f"memoria_scale_{args.n}"
    if args.reuse:
        log(f"reusing database {name}")
        dsn = with_db(admin, name)
        migrate(dsn)
    else:
        log(f"creating database {name}")
        dsn = fresh_database(admin, name)
    # The per-tenant indexes are built in their own phase after the load (a measured step), not by the
    # library's background keeper meanwhile.
    config = Config.from_env(dsn=dsn, use_age=False, pool_min_size=12, pool_max_size=48, vector_index_auto=False)
    results: dict[str, Any] = {
        "args": vars(args),
        "started": stamp,
        "database": name,
        "environment": environment(admin, dsn),
    }
    world = corpus.universe(args.seed, args.tenants)
    queries = corpus.queries(args.queries, seed=args.seed, n_tenants=args.tenants, world=world)

    load = LoadMonitor()
    with MemorySystem(config, auto_migrate=False) as system, psycopg.connect(dsn, autocommit=True) as admin_conn:
        meter = CpuMeter(admin_conn)
        if args.reuse:
            results["ingest"] = {"skipped": f"--reuse: the existing database {name} was queried"}
        else:
            with load.phase(f"ingest {args.n} memories"):
                before = meter.snapshot()
                results["ingest"] = ingestion.ingest(system, args, world)
                results["ingest"]["cpu"] = meter.since(before)
            if not args.no_vacuum:
                with load.phase("VACUUM ANALYZE"):
                    results["ingest"]["vacuum_analyze_s"] = ingestion.vacuum_analyze(dsn)
            if not args.no_vector_indexes and config.vector_exact_max_rows > 0:
                # as `memoria-pg ingest` and the server do after a load: each (tenant, type) above the
                # exact bound gets its own HNSW index, the only one its vector search can use (0016)
                with load.phase("per-tenant vector indexes"):
                    t0 = time.perf_counter()
                    built = [a for a in system.sync_vector_indexes() if a.action == "build"]
                    results["ingest"]["vector_indexes"] = {"built": len(built), "seconds": time.perf_counter() - t0}
        results["corpus"] = ingestion.corpus_stats(dsn)
        bench = phases.Bench(system, queries)
        # The same queries with the vector worker on HNSW for every tenant (vector_exact_max_rows=0).
        hnsw_system = MemorySystem(config.replace(vector_exact_max_rows=0), auto_migrate=False)
        hnsw = phases.Bench(hnsw_system, queries)
        with load.phase("warm-up"):
            for i in range(len(queries)):
                bench.query(i)
                bench.query(i, v4=False)
                hnsw.query(i)
        with load.phase("latency passes (V4, V3, V4 with ranking, V4 HNSW only)"):
            passes = phases.latency_passes(bench, hnsw)
        hnsw_system.close()
        with load.phase("CPU per query"):
            results["cpu"] = phases.cpu_cost(bench, meter)
        with load.phase("concurrent vs sequential workers"):
            results["concurrency"] = phases.concurrent_vs_sequential(bench)
        with load.phase("custom vs generic plans"):
            results["plan_modes"] = phases.plan_modes(bench)
        with load.phase("BM25 worker vs ts_rank_cd"):
            results["bm25_vs_tsrank"] = phases.bm25_vs_tsrank(bench)
        with load.phase("row-level security cost per worker"):
            results["rls"] = phases.rls_cost(bench, dsn)
        with load.phase("throughput"):
            results["throughput"] = phases.throughput(bench, [int(t) for t in args.threads.split(",")], args.rounds)
        with load.phase("EXPLAIN ANALYZE evidence"):
            results["plans"] = evidence.plans(bench, passes["v4"])
            results["plan_cache"] = evidence.plan_cache(system)
    results["passes"] = passes
    if not args.no_model:
        with load.phase("end to end with the real embedding model"):
            results["model"] = phases.with_model(config, queries)
    load.stop()
    results["load"] = load.phases
    if args.drop:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    results["finished"] = time.strftime("%Y%m%dT%H%M%S")

    out_dir.mkdir(parents=True, exist_ok=True)  # made at the end: a long run must not lose it midway
    # The measurements first: a failure while rendering the report must not lose a long run.
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    summaries = report.summarize(results)
    results["summary"] = summaries
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    markdown = report.markdown(results)
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "plans.md").write_text(report.plans_markdown(results["plans"]))
    print(markdown)
    log(f"wrote {out_dir}/report.md, plans.md, results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
