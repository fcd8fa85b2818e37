"""Load benchmark of `memoria-pg serve`: the server's overhead over the library, then 8 clients mixing
searches and stores for a while.

1. Side by side (one client, alternating per query, the order flipped every other query): the same
   query through POST /v1/search and through MemorySystem.query in this process, on the same database.
   The overhead is the server's p50 minus the library's, and the median of the per-query differences.
2. Load: `--clients` threads (8), each with its own HTTP connection, for `--duration` seconds (60): a
   search with probability `--search-share` (0.8), else a store of one new memory. p50/p95 per kind,
   throughput, errors (any non-2xx answer or failed request: the run exits 1 when there is one).

The server runs as a subprocess (`memoria-pg serve`, access log off) with HashEmbedder
(MEMORIA_EMBEDDING_MODEL=hash), so the figures are the service and the database, not the model. The
corpus is benchmarks/corpus.py's (ten tenants); requests use one admin key naming each query's tenant.

    python benchmarks/service_load.py                          # 5k memories, 300 paired queries, 60 s of load
    python benchmarks/service_load.py --duration 20 --pairs 200 --json results/service/run.json

Loopback only. The database (--db-name) is dropped and created, and dropped again unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import corpus
import httpx
import psycopg
from soak import drop_database, fresh_database, log, require_loopback

from memoria_pg import Config, HashEmbedder, MemorySystem, normalize
from memoria_pg.service import keys

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:55432/postgres"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("MEMORIA_TEST_DSN", DEFAULT_ADMIN_DSN), help="admin DSN (loopback)")
    p.add_argument("--db-name", default="memoria_service_load")
    p.add_argument("--n", type=int, default=5000, help="memories loaded first")
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--pairs", type=int, default=300, help="queries of the side-by-side phase")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of the load phase")
    p.add_argument("--search-share", type=float, default=0.8)
    p.add_argument("--port", type=int, default=18080)
    p.add_argument("--seed", type=int, default=7)
    corpus.add_profile_argument(p)
    p.add_argument("--json", help="write the figures here too")
    p.add_argument("--keep", action="store_true", help="keep the database")
    return p.parse_args(argv)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": percentile(values, 0.5), "p95_ms": percentile(values, 0.95)}


def load_corpus(system: MemorySystem, args: argparse.Namespace, world: corpus.Universe) -> None:
    embedder = HashEmbedder()
    records = corpus.memories(
        args.n,
        seed=args.seed,
        n_tenants=args.tenants,
        world=world,
        embed=lambda t: embedder.embed([normalize(t)])[0],
        profile=args.profile,
    )
    result = system.store_many(records)
    with psycopg.connect(system.dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    log(f"loaded {result.inserted} memories")


def start_server(dsn: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MEMORIA_EMBEDDING_MODEL": "hash"}
    command = [sys.executable, "-m", "memoria_pg.cli", "--dsn", dsn, "serve", "--port", str(port), "--no-access-log"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited: {server.stderr.read().decode() if server.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/ready", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise SystemExit("the server did not become ready in 120 s")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def side_by_side(
    system: MemorySystem, http: httpx.Client, queries: list[corpus.Query], server_pid: int
) -> dict[str, object]:
    """The same queries through the server and the library, alternating, the order flipped each time.

    Besides wall time (which on a busy machine includes waiting for a core, once more per process a
    request crosses), CPU: the server process's CPU over its requests (it serves nothing else meanwhile)
    against this process's CPU over the library calls (every thread: the query's workers too). The
    PostgreSQL backends run the same statements either way and are left out of both."""
    server_ms: list[float] = []
    library_ms: list[float] = []
    library_cpu = 0.0
    server_cpu_start = process_cpu_s(server_pid)
    for i, q in enumerate(queries):
        calls = [("server", lambda q=q: _search(http, q)),
                 ("library", lambda q=q: system.query(q.text, tenant=q.tenant, memory_type=q.memory_type))]  # fmt: skip
        for name, call in calls if i % 2 == 0 else reversed(calls):
            t0, c0 = time.perf_counter(), time.process_time()
            call()
            (server_ms if name == "server" else library_ms).append((time.perf_counter() - t0) * 1000)
            if name == "library":
                library_cpu += time.process_time() - c0
    server_cpu = process_cpu_s(server_pid) - server_cpu_start
    differences = [s - lib for s, lib in zip(server_ms, library_ms)]
    n = len(queries)
    return {
        "server": summary(server_ms),
        "library": summary(library_ms),
        "overhead_p50_ms": percentile(server_ms, 0.5) - percentile(library_ms, 0.5),
        "overhead_median_paired_ms": statistics.median(differences),
        "server_cpu_per_search_ms": server_cpu / n * 1000,
        "library_cpu_per_query_ms": library_cpu / n * 1000,
        "overhead_cpu_per_search_ms": (server_cpu - library_cpu) / n * 1000,
    }


def _search(http: httpx.Client, q: corpus.Query) -> httpx.Response:
    body = {"text": q.text, "memory_type": q.memory_type}
    response = http.post("/v1/search", json=body, headers={"X-Memoria-Tenant": q.tenant})
    response.raise_for_status()
    return response


def load(url: str, token: str, args: argparse.Namespace, queries: list[corpus.Query]) -> dict[str, object]:
    results: list[tuple[str, float, str | None]] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + args.duration

    def client(index: int) -> None:
        rng = random.Random(f"{args.seed}:client:{index}")
        done: list[tuple[str, float, str | None]] = []
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            seq = 0
            while time.perf_counter() < stop_at:
                q = rng.choice(queries)
                kind = "search" if rng.random() < args.search_share else "store"
                t0 = time.perf_counter()
                error = None
                try:
                    if kind == "search":
                        response = http.post(
                            "/v1/search", json={"text": q.text}, headers={"X-Memoria-Tenant": q.tenant}
                        )
                    else:
                        seq += 1
                        body = {"content": f"Load client {index} note {seq}: {q.text}", "memory_type": "episodic"}
                        response = http.post("/v1/memories", json=body, headers={"X-Memoria-Tenant": q.tenant})
                    if response.status_code >= 300:
                        error = f"{response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    error = repr(exc)
                done.append((kind, (time.perf_counter() - t0) * 1000, error))
        with lock:
            results.extend(done)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    errors = [e for _, _, e in results if e]
    return {
        "clients": args.clients,
        "elapsed_s": elapsed,
        "requests": len(results),
        "throughput_per_s": len(results) / elapsed,
        "search": summary([ms for kind, ms, _ in results if kind == "search"]),
        "store": summary([ms for kind, ms, _ in results if kind == "store"]),
        "errors": len(errors),
        "first_errors": errors[:5],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    server = None
    try:
        world = corpus.universe(args.seed, args.tenants)
        queries = corpus.queries(max(args.pairs, 500), seed=args.seed, n_tenants=args.tenants, world=world)
        with MemorySystem(Config(dsn=dsn), embedder=HashEmbedder(), auto_migrate=True) as system:
            load_corpus(system, args, world)
            token = keys.create_key(dsn, tenant=None, admin=True, description="service_load.py")[1]
            server = start_server(dsn, args.port)
            url = f"http://127.0.0.1:{args.port}"
            load_before = os.getloadavg()
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                for q in queries[:20]:  # warm both paths up
                    _search(http, q)
                    system.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
                paired = side_by_side(system, http, queries[: args.pairs], server.pid)
            log(f"side by side: {json.dumps(paired)}")
        mixed = load(url, token, args, queries)
        figures = {"args": vars(args), "load_average_before": load_before, "load_average_after": os.getloadavg(),
                   "side_by_side": paired, "load": mixed}  # fmt: skip
        print(json.dumps(figures, indent=2))
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(figures, indent=2))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        if not args.keep:
            drop_database(args.dsn, args.db_name)
    return 1 if mixed["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
