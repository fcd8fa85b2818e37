"""AsyncMemorySystem against MemorySystem: the cost of the hop to its thread pool, and N concurrent tasks.

1. Overhead: the same queries through `system.query` and `await memory.query` (the same MemorySystem),
   alternating, the order flipped each time; p50 of each and the median per-query difference, wall and
   CPU (this process, every thread).
2. Concurrency: N tasks (1, 2, 4, 8 by default) each running queries for `--seconds`, on an
   AsyncMemorySystem with max_concurrency = the pool size, against N threads calling the sync API:
   throughput and p50 / p95. The event loop's responsiveness meanwhile: the worst delay of a 1 ms
   heartbeat task (a blocked loop would show the query time here).

HashEmbedder vectors (no model); the corpus is benchmarks/corpus.py's.

    python benchmarks/async_api.py --n 5000 --pairs 300 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time

import corpus
from service_load import DEFAULT_ADMIN_DSN, load_corpus, summary
from soak import drop_database, fresh_database, require_loopback

from memoria_pg import AsyncMemorySystem, Config, HashEmbedder, MemorySystem


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("MEMORIA_TEST_DSN", DEFAULT_ADMIN_DSN), help="admin DSN (loopback)")
    p.add_argument("--db-name", default="memoria_async_api")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--pairs", type=int, default=300)
    p.add_argument("--tasks", default="1,2,4,8")
    p.add_argument("--seconds", type=float, default=10.0, help="per concurrency level and API")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true")
    return p.parse_args(argv)


async def overhead(system: MemorySystem, memory: AsyncMemorySystem, queries: list[corpus.Query]) -> dict[str, object]:
    wall: dict[str, list[float]] = {"sync": [], "async": []}
    cpu = {"sync": 0.0, "async": 0.0}
    for i, q in enumerate(queries):
        order = ("sync", "async") if i % 2 == 0 else ("async", "sync")
        for api in order:
            t0, c0 = time.perf_counter(), time.process_time()
            if api == "sync":
                system.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            else:
                await memory.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            wall[api].append((time.perf_counter() - t0) * 1000)
            cpu[api] += time.process_time() - c0
    n = len(queries)
    return {
        "sync": summary(wall["sync"]),
        "async": summary(wall["async"]),
        "overhead_median_paired_ms": statistics.median(a - s for a, s in zip(wall["async"], wall["sync"])),
        "cpu_per_query_ms": {api: cpu[api] / n * 1000 for api in cpu},
    }


async def async_level(memory: AsyncMemorySystem, queries: list[corpus.Query], tasks: int, seconds: float) -> dict:
    times: list[float] = []
    stop_at = time.perf_counter() + seconds
    worst_tick = 0.0

    async def heartbeat() -> None:
        nonlocal worst_tick
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            worst_tick = max(worst_tick, (time.perf_counter() - t0) * 1000 - 1)

    async def task(index: int) -> None:
        i = index
        while time.perf_counter() < stop_at:
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            await memory.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            times.append((time.perf_counter() - t0) * 1000)
            i += tasks

    t0 = time.perf_counter()
    await asyncio.gather(heartbeat(), *(task(i) for i in range(tasks)))
    elapsed = time.perf_counter() - t0
    return {**summary(times), "per_s": len(times) / elapsed, "worst_loop_delay_ms": worst_tick}


def sync_level(system: MemorySystem, queries: list[corpus.Query], threads: int, seconds: float) -> dict:
    times: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker(index: int) -> None:
        i, mine = index, []
        while time.perf_counter() < stop_at:
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            system.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            mine.append((time.perf_counter() - t0) * 1000)
            i += threads
        with lock:
            times.extend(mine)

    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {**summary(times), "per_s": len(times) / (time.perf_counter() - t0)}


async def measure(system: MemorySystem, args: argparse.Namespace, queries: list[corpus.Query]) -> dict:
    memory = AsyncMemorySystem(system, owns_system=False)
    for q in queries[:20]:
        await memory.query(q.text, tenant=q.tenant)
    figures: dict[str, object] = {"max_concurrency": memory.max_concurrency}
    figures["overhead"] = await overhead(system, memory, queries[: args.pairs])
    levels = {}
    for n in (int(x) for x in args.tasks.split(",")):
        levels[n] = {
            "async": await async_level(memory, queries, n, args.seconds),
            "sync_threads": await asyncio.to_thread(sync_level, system, queries, n, args.seconds),
        }
    figures["concurrency"] = levels
    await memory.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    try:
        world = corpus.universe(args.seed, args.tenants)
        queries = corpus.queries(max(args.pairs, 500), seed=args.seed, n_tenants=args.tenants, world=world)
        with MemorySystem(Config(dsn=dsn), embedder=HashEmbedder(), auto_migrate=True) as system:
            load_corpus(system, args, world)
            before = os.getloadavg()
            figures = asyncio.run(measure(system, args, queries))
        figures.update(load_average_before=before, load_average_after=os.getloadavg())
        print(json.dumps(figures, indent=2))
    finally:
        if not args.keep:
            drop_database(args.dsn, args.db_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
