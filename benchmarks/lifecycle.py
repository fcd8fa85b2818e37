"""The lifecycle at scale: delete and update latency, forget of 10% of a tenant, erasure of a tenant, and V4
query latency with 20% of the memories deleted (before and after VACUUM), side by side with an untouched
copy, alternating query by query.

    python benchmarks/lifecycle.py --source memoria_scale_100000 [--ops 200] [--queries 200]

Two copies of the source database (built by scale.py) are made (CREATE DATABASE ... TEMPLATE) and
migrated to head: `kept` stays as it is, `changed` takes every lifecycle operation. They are dropped at
the end unless --keep. Vectors are HashEmbedder vectors (synthetic): the figures are the database part.
Writes results/lifecycle/<timestamp>.md (also printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import time
from pathlib import Path

import corpus
import psycopg
from psycopg import sql

from memoria_pg import DEFAULT_MEMORY_TYPES, Config, HashEmbedder, MemorySystem, normalize

OUT = Path(__file__).resolve().parent.parent / "results" / "lifecycle"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def copy_database(admin: str, source: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(source)))
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)


def tenants(system: MemorySystem) -> dict[str, int]:
    with psycopg.connect(system.dsn) as conn:
        return dict(conn.execute("SELECT tenant, count(*) FROM memoria.memories GROUP BY tenant").fetchall())


def sample_ids(dsn: str, tenant: str, n: int, seed: int) -> list[int]:
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM memoria.memories WHERE tenant = %s", (tenant,)).fetchall()]
    return random.Random(seed).sample(ids, min(n, len(ids)))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def operations(system: MemorySystem, counts: dict[str, int], ops: int) -> list[str]:
    tenant = sorted(counts, key=counts.get)[len(counts) // 2]
    ids = sample_ids(system.dsn, tenant, 2 * ops, seed=1)
    embedder = HashEmbedder()
    deletes = [timed(lambda i=i: system.delete(i, tenant=tenant)) for i in ids[:ops]]
    updates = []
    for n, i in enumerate(ids[ops:]):
        text = f"corrected note {n}: the review moved to Thursday"
        vector = embedder.embed([normalize(text)])[0]
        updates.append(timed(lambda i=i, t=text, v=vector: system.update(i, tenant=tenant, content=t, embedding=v)))
    with psycopg.connect(system.dsn) as conn:
        cut = conn.execute("SELECT percentile_disc(0.1) WITHIN GROUP (ORDER BY created_at) FROM memoria.memories "
                           "WHERE tenant = %s", (tenant,)).fetchone()[0]  # fmt: skip
    t0 = time.perf_counter()
    forgotten = system.forget(tenant=tenant, before=cut)
    forget_ms = (time.perf_counter() - t0) * 1000
    big = max(counts, key=counts.get)
    t0 = time.perf_counter()
    erased = system.erase_tenant(big)
    erase_s = time.perf_counter() - t0
    return [
        f"| delete one memory (tenant {tenant}, {counts[tenant]:,} memories) | {statistics.median(deletes):.1f} | "
        f"{pct(deletes, 0.95):.1f} | {len(deletes)} | p95 <= 10 ms |",
        f"| update one memory, new text and supplied vector | {statistics.median(updates):.1f} | "
        f"{pct(updates, 0.95):.1f} | {len(updates)} | p95 <= 20 ms |",
        f"| forget 10% of the tenant ({forgotten.deleted:,} memories, one transaction) | {forget_ms:.0f} | - | 1 | - |",
        f"| erase_tenant {big} ({erased['memories']:,} memories, {sum(erased.values()):,} rows) | "
        f"{erase_s * 1000:.0f} | - | 1 | <= 5 s for 10k |",
    ]


def delete_share(system: MemorySystem, share: float) -> int:
    done = 0
    for tenant in tenants(system):
        ids = sample_ids(system.dsn, tenant, 10**9, seed=2)
        doomed = ids[: int(len(ids) * share)]
        for start in range(0, len(doomed), 2000):
            done += system.delete(doomed[start : start + 2000], tenant=tenant)
    return done


def side_by_side(kept: MemorySystem, changed: MemorySystem, queries: list[corpus.Query]) -> tuple[float, float, float]:
    """Median total_ms of V4 retrieval-only on each copy (alternating), and the median per-query ratio."""
    embedder = HashEmbedder()
    vectors = [embedder.embed([normalize(q.text)])[0] for q in queries]
    times: dict[str, list[float]] = {"kept": [], "changed": []}
    systems = {"kept": kept, "changed": changed}
    for rnd in range(3):  # the first round warms both
        for i, q in enumerate(queries):
            for side in ("kept", "changed") if i % 2 == 0 else ("changed", "kept"):
                d = systems[side].query(q.text, tenant=q.tenant, memory_type=q.memory_type, ranking=False,
                                        embedding=vectors[i]).diagnostics  # fmt: skip
                if rnd:
                    times[side].append(d.total_ms)
    ratios = [c / k for k, c in zip(times["kept"], times["changed"])]
    return statistics.median(times["kept"]), statistics.median(times["changed"]), statistics.median(ratios)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True, help="database built by scale.py (left untouched)")
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--ops", type=int, default=200)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    names = ("memoria_lifecycle_kept", "memoria_lifecycle_changed")
    dsns = [copy_database(args.dsn, args.source, n) for n in names]
    lines = [f"# Lifecycle at scale: `{args.source}` ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs)", ""]
    try:
        configs = [Config(dsn=d, use_age=False, memory_types=DEFAULT_MEMORY_TYPES, pool_max_size=12) for d in dsns]
        with MemorySystem(configs[0], embedder=HashEmbedder(), auto_migrate=True) as kept, \
                MemorySystem(configs[1], embedder=HashEmbedder(), auto_migrate=True) as changed:  # fmt: skip
            counts = tenants(changed)
            load0 = os.getloadavg()[0]
            lines += ["| operation | p50 ms | p95 ms | n | target |", "|---|---|---|---|---|"]
            lines += operations(changed, counts, args.ops)
            queries = [q for q in corpus.queries(args.queries, seed=7, n_tenants=10, world=corpus.universe(7, 10))
                       if q.tenant in tenants(changed)]  # fmt: skip
            deleted = delete_share(changed, 0.2)
            before_vacuum = side_by_side(kept, changed, queries)
            with psycopg.connect(dsns[1], autocommit=True) as conn:
                t0 = time.perf_counter()
                conn.execute("VACUUM (ANALYZE)")
                vacuum_s = time.perf_counter() - t0
            after_vacuum = side_by_side(kept, changed, queries)
            load1 = os.getloadavg()[0]
        lines += [
            "", f"V4 retrieval-only total_ms (embedding supplied), {len(queries)} queries x 2 rounds, alternating "
            f"between the untouched copy and the one with {deleted:,} more memories deleted (20% of each tenant):", "",
            "| | untouched p50 | 20% deleted p50 | median per-query ratio | target |", "|---|---|---|---|---|",
            f"| before VACUUM | {before_vacuum[0]:.1f} | {before_vacuum[1]:.1f} | {before_vacuum[2]:.2f} | - |",
            f"| after VACUUM ({vacuum_s:.0f} s) | {after_vacuum[0]:.1f} | {after_vacuum[1]:.1f} | {after_vacuum[2]:.2f} | "
            "within 10% |", "", f"1-minute load average {load0:.1f} -> {load1:.1f}.",
        ]  # fmt: skip
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                for n in names:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(n)))
    text = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{dt.datetime.now():%Y%m%dT%H%M%S}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
