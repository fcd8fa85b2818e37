"""What many tenants' own HNSW indexes on one partition cost everyone on it: planning the vector worker's
HNSW statement, a single insert, and a batch of inserts, as the number of partial indexes grows.

    python benchmarks/partial_indexes.py [--counts 0,50,100,200,300,500,1000] [--repeat 150]

The library gives each (tenant, memory type) above `vector_exact_max_rows` memories a partial HNSW index
on the type's partition, `WHERE tenant = '<tenant>'` (db/vector_indexes.py). Each such index is one more
that every insert into the partition opens and whose predicate it checks, and one more whose predicate the
planner tries to prove for the HNSW statement's custom plan, whichever tenant the row or the query is
for; `Config.vector_index_max_per_type` caps them. This measures that cost in a scratch database (`--db`,
dropped at the end unless `--keep`): one table shaped like a partition (tenant, id, embedding, with the
covering index), 2,000 tenants of 5 random unit vectors, and partial HNSW indexes added tenant by tenant
up to each of `--counts`. At each count: the planning time of the HNSW statement for a tenant without an
index (EXPLAIN ANALYZE's "Planning Time", p50), a one-row INSERT for a tenant without an index (p50 wall
time), and a 1,000-row COPY (per row). Writes results/scale/<timestamp>-partial-indexes.md.
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
from psycopg import sql
from scratch import add_arguments, heading, scratch_database, write_report

ROOT = Path(__file__).resolve().parents[1]
TENANTS = 2_000
HNSW = (
    "SELECT id FROM (SELECT id, embedding <=> %(q)s AS d FROM m WHERE tenant = %(t)s::text "
    "ORDER BY embedding <=> %(q)s LIMIT 50) x ORDER BY d"
)


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def measure(conn: psycopg.Connection, rng: np.random.Generator, repeat: int) -> tuple[float, float, float]:
    """(planning ms p50, one-row insert ms p50, COPY ms per row) for tenants without an index."""
    q = unit(rng)
    planning = []
    for k in range(repeat):
        rows = conn.execute("EXPLAIN (ANALYZE, SUMMARY) " + HNSW, {"q": q, "t": f"t{TENANTS - 1 - k:04d}"}).fetchall()
        planning.append(next(float(r[0].split(":")[1].split()[0]) for r in rows if r[0].startswith("Planning Time")))
    inserts = []
    for k in range(repeat):
        started = time.perf_counter()
        conn.execute("INSERT INTO m (tenant, embedding) VALUES (%s, %s)", (f"t{TENANTS - 1 - k:04d}", unit(rng)))
        inserts.append((time.perf_counter() - started) * 1000)
    batch = [(f"t{TENANTS - 1 - k % repeat:04d}", unit(rng)) for k in range(1_000)]
    started = time.perf_counter()
    with conn.cursor().copy("COPY m (tenant, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["text", "vector"])
        for row in batch:
            copy.write_row(row)
    per_row = (time.perf_counter() - started) * 1000 / len(batch)
    return statistics.median(planning), statistics.median(inserts), per_row


def run(dsn: str, counts: list[int], repeat: int) -> list[str]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    conn.execute("SET jit = off")
    conn.execute("CREATE TABLE m (tenant text, id bigserial, embedding vector(384) NOT NULL, PRIMARY KEY (tenant, id))")
    conn.execute("CREATE INDEX ON m (tenant) INCLUDE (id, embedding)")
    rng = np.random.default_rng(1)
    with conn.cursor().copy("COPY m (tenant, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["text", "vector"])
        for t in range(TENANTS):
            for _ in range(5):
                copy.write_row((f"t{t:04d}", unit(rng)))
    conn.execute("ANALYZE m")
    lines = [
        heading("Partial HNSW indexes on one partition: what each costs everyone on it"),
        "",
        f"One table shaped like a memory type's partition, {TENANTS:,} tenants of 5 vectors; partial HNSW indexes "
        f"(`WHERE tenant = ...`) added tenant by tenant; every figure for a tenant without an index. {repeat} "
        f"plans and inserts per count; load {os.getloadavg()[0]:.1f} at the start, {os.cpu_count()} CPUs.",
        "",
        "| partial indexes | HNSW statement planning p50 ms | one-row INSERT p50 ms | COPY of 1,000 rows, ms per row |",
        "|---|---|---|---|",
    ]
    built = 0
    for count in counts:
        while built < count:
            conn.execute(
                sql.SQL("CREATE INDEX ON m USING hnsw (embedding vector_cosine_ops) WHERE tenant = {}").format(
                    sql.Literal(f"t{built:04d}")
                )
            )
            built += 1
        conn.execute("ANALYZE m")
        plan_ms, insert_ms, copy_ms = measure(conn, rng, repeat)
        lines.append(f"| {count:,} | {plan_ms:.3f} | {insert_ms:.3f} | {copy_ms:.4f} |")
        print(lines[-1], flush=True)
    lines += ["", f"Load at the end: {os.getloadavg()[0]:.1f}."]
    conn.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, "memoria_partial_indexes")
    parser.add_argument("--counts", default="0,50,100,200,300,500,1000")
    parser.add_argument("--repeat", type=int, default=150)
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))
    if counts[-1] > TENANTS:
        raise SystemExit(f"at most {TENANTS} partial indexes (one per tenant)")
    with scratch_database(args.dsn, args.db, keep=args.keep) as dsn:
        lines = run(dsn, counts, args.repeat)
    write_report(lines, args.out, "partial-indexes")


if __name__ == "__main__":
    main()
