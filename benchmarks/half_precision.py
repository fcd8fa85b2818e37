"""A large tenant's HNSW index over half-precision vectors against the full-precision one, on real
embeddings: size, build time, search latency, server CPU and recall against the exact search.

    python benchmarks/half_precision.py [--set longmemeval] [--queries 300] [--limit 50] [--ef 40,100]

The vectors are the evaluation's cached MiniLM embeddings of a dev set (`memoria-pg eval` writes them:
<cache>/<set>-all-MiniLM-L6-v2[-onnx].npz, MEMORIA_EVAL_CACHE or ~/.cache/memoria-pg/eval), never
copied into the project; `--queries` of them, drawn at random, are held out as the queries. In a
scratch database (`--db`, dropped at the end unless `--keep`) one table holds the rest as one tenant's
partition does, with both indexes the library has built (m 16, ef_construction 64):
`... USING hnsw (embedding vector_cosine_ops)` (db/vector_indexes.py) and `... USING hnsw
((embedding::halfvec(384)) halfvec_cosine_ops)` (tried on 2026-12-06 and not kept: docs/measurements.md,
"Half-precision HNSW indexes"). Each query runs both searches as the vector worker would (sql/workers/vector.sql's shape:
the nearest `--limit` by the index's order, their full-precision distances re-sorted), alternating which goes
first, at each `--ef` (hnsw.ef_search; the library's default is 100). Reported: p50/p95 wall time,
the backend's CPU per search (/proc/<pid>/schedstat: the server must run on this machine), recall@10
and @limit against the exact search, the median per-query time ratio. Writes
results/scale/<timestamp>-half-precision.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from scratch import add_arguments, heading, scratch_database, write_report

ROOT = Path(__file__).resolve().parents[1]
FORMS = {
    "full": ("vector_cosine_ops", "embedding", "%(q)s"),
    "half": ("halfvec_cosine_ops", "(embedding::halfvec({dims}))", "%(q)s::halfvec({dims})"),
}


def cache_file(name: str) -> Path:
    folder = Path(os.environ.get("MEMORIA_EVAL_CACHE") or Path.home() / ".cache" / "memoria-pg" / "eval")
    for suffix in ("-onnx", ""):
        path = folder / f"{name}-all-MiniLM-L6-v2{suffix}.npz"
        if path.is_file():
            return path
    raise SystemExit(f"no cached vectors of {name!r} in {folder}: run `memoria-pg eval --sets {name}` first")


def search_sql(form: str, dims: int) -> str:
    _, expression, query = FORMS[form]
    order = f"{expression.format(dims=dims)} <=> {query.format(dims=dims)}"
    return (
        "WITH nearest AS MATERIALIZED (SELECT id, embedding <=> %(q)s AS distance FROM bench_vectors "
        f"ORDER BY {order} LIMIT %(limit)s) SELECT id, distance FROM nearest ORDER BY distance"
    )


def cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, "memoria_half_precision")
    parser.add_argument("--set", default="longmemeval")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--ef", default="40,100")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    source = cache_file(args.set)
    vectors = np.load(source)["vectors"].astype(np.float32)
    dims = vectors.shape[1]
    order = np.random.default_rng(args.seed).permutation(len(vectors))
    queries, stored = vectors[order[: args.queries]], order[args.queries :]
    with scratch_database(args.dsn, args.db, keep=args.keep) as dsn:
        lines = run(dsn, args, source, vectors, stored, queries, dims)
    write_report(lines, args.out, "half-precision")


def run(
    dsn: str,
    args: argparse.Namespace,
    source: Path,
    vectors: np.ndarray,
    stored: np.ndarray,
    queries: np.ndarray,
    dims: int,
) -> list[str]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    conn.execute("SET jit = off")
    conn.execute("SET maintenance_work_mem = '256MB'")  # as db/vector_indexes.py builds
    conn.execute("SET hnsw.iterative_scan = 'relaxed_order'")  # as the pool's connections search
    conn.execute(f"CREATE TABLE bench_vectors (id bigint PRIMARY KEY, embedding vector({dims}) NOT NULL)")
    with conn.cursor().copy("COPY bench_vectors (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "vector"])
        for i in stored:
            copy.write_row((int(i), vectors[i]))
    built = {}
    for form, (ops, expression, _) in FORMS.items():
        started = time.perf_counter()
        conn.execute(
            f"CREATE INDEX bench_{form} ON bench_vectors USING hnsw ({expression.format(dims=dims)} {ops}) "
            "WITH (m = 16, ef_construction = 64)"
        )
        size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f"bench_{form}",)).fetchone()[0]  # type: ignore[index]
        built[form] = (time.perf_counter() - started, size)
    conn.execute("VACUUM ANALYZE bench_vectors")
    pid = conn.info.backend_pid
    exact = []
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        for q in queries:
            rows = conn.execute(
                "SELECT id, embedding <=> %(q)s AS d FROM bench_vectors ORDER BY d, id LIMIT %(limit)s",
                {"q": q, "limit": args.limit},
            ).fetchall()
            exact.append(rows)
    lines = [
        heading("HNSW over half-precision vectors against full precision"),
        "",
        f"{len(stored):,} real MiniLM vectors ({source.name}, the evaluation's cache) in one table, {len(queries)} held-out "
        f"vectors as queries, the nearest {args.limit} per search; m 16, ef_construction 64, iterative scans "
        f"(relaxed order), both forms alternating per query; load {os.getloadavg()[0]:.1f} at the start, "
        f"{os.cpu_count()} CPUs.",
        "",
        "| index | size | build |",
        "|---|---|---|",
        *(f"| {form} | {size / 2**20:.1f} MB | {seconds:.1f} s |" for form, (seconds, size) in built.items()),
        "",
        f"| ef_search | form | p50 ms | p95 ms | server CPU ms (median) | recall@10 | recall@{args.limit} | "
        "median per-query time, half / full |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ef in [int(e) for e in args.ef.split(",")]:
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
        wall: dict[str, list[float]] = {f: [] for f in FORMS}
        cpu: dict[str, list[float]] = {f: [] for f in FORMS}
        recall: dict[str, list[tuple[float, float]]] = {f: [] for f in FORMS}
        for k, q in enumerate(queries):
            for form in list(FORMS) if k % 2 == 0 else list(FORMS)[::-1]:
                c0, t0 = cpu_ns(pid), time.perf_counter()
                rows = conn.execute(search_sql(form, dims), {"q": q, "limit": args.limit}).fetchall()
                wall[form].append((time.perf_counter() - t0) * 1000)
                cpu[form].append((cpu_ns(pid) - c0) / 1e6)
                truth = [r[0] for r in exact[k]]
                found = [r[0] for r in rows]
                recall[form].append(
                    (len(set(found[:10]) & set(truth[:10])) / 10, len(set(found) & set(truth)) / len(truth))
                )
        ratio = statistics.median(h / f for h, f in zip(wall["half"], wall["full"], strict=True))
        for form in FORMS:
            w = sorted(wall[form])
            lines.append(
                f"| {ef} | {form} | {statistics.median(w):.2f} | {w[int(0.95 * (len(w) - 1))]:.2f} | "
                f"{statistics.median(cpu[form]):.2f} | {np.mean([r[0] for r in recall[form]]):.4f} | "
                f"{np.mean([r[1] for r in recall[form]]):.4f} | {f'{ratio:.3f}' if form == 'half' else ''} |"
            )
    lines += ["", f"Load at the end: {os.getloadavg()[0]:.1f}."]
    conn.close()
    return lines


if __name__ == "__main__":
    main()
