"""Throughput side by side: one setting's effect on queries per second under concurrent clients.

Two MemorySystems on the same database in one process, the configuration's defaults ("default")
and the same with --set KEY=VALUE ("set"), take turns: each runs the scale benchmark's
queries (embedding supplied unless --embed, retrieval-only, no candidate list unless --candidates) from T client
threads for --seconds, one then the other, then the other way round, --rounds times. Reported per side: queries/s
(median over its turns), latency p50 / p95 over all its queries, the client process's CPU per query
(its turns only) and its own server backends' CPU per query (/proc/<pid>/schedstat of the
connections its pool opened: the server must run on this machine).

    python benchmarks/throughput_ab.py --db memoria_scale_100000 --set vector_parallel_min_rows=5000 \\
        [--threads 1,4,8] [--seconds 20] [--rounds 2]

Writes results/scale/<timestamp>-<db>-throughput-ab.{md,json}.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import library  # noqa: E402
import psycopg  # noqa: E402
from before_after import backend_cpu_ns  # noqa: E402

from memoria_pg import Config, MemorySystem  # noqa: E402


def parse_setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    if not key or not _:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


class Side:
    """One MemorySystem, its pool's connections named so that its own server backends can be found."""

    def __init__(self, label: str, dsn: str, overrides: dict[str, Any]) -> None:
        self.label = label
        self.app = f"memoria-tab-{label}-{os.getpid()}"
        dsn = psycopg.conninfo.make_conninfo(dsn, application_name=self.app)
        # the overrides parsed as MEMORIA_* variables are: the setting's own type and range checks
        env = {**os.environ, **{f"MEMORIA_{k.upper()}": str(v) for k, v in overrides.items()}}
        self.config = Config.from_env(
            env, dsn=dsn, use_age=False, pool_min_size=12, pool_max_size=48, query_cache_size=0
        )  # fmt: skip
        self.system = MemorySystem(self.config, auto_migrate=False)
        self.turns: list[dict[str, float]] = []
        self.latencies: list[float] = []


def backends(admin: psycopg.Connection, app: str) -> list[int]:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()
    return [r[0] for r in rows]


def turn(
    side: Side, admin: psycopg.Connection, threads: int, seconds: float, jobs, candidates: bool, embed: bool = False
) -> None:
    """The side's queries from `threads` clients for `seconds`: its queries/s, CPU per query."""
    stop = threading.Event()
    latencies: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> int:
        n, i = 0, k
        while not stop.is_set():
            text, tenant, memory_type, vector = jobs[i % len(jobs)]
            t0 = time.perf_counter()
            side.system.query(
                text, tenant=tenant, memory_type=memory_type, ranking=False, candidates=candidates,
                embedding=None if embed else vector,
            )  # fmt: skip
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(ms)
            n, i = n + 1, i + threads
        return n

    pids = backends(admin, side.app)
    s0, c0, t0 = backend_cpu_ns(pids), time.process_time(), time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as ex:
        futures = [ex.submit(client, k) for k in range(threads)]
        time.sleep(seconds)
        stop.set()
        done = sum(f.result() for f in futures)
    wall = time.perf_counter() - t0
    client_s = time.process_time() - c0
    server_s = (backend_cpu_ns(backends(admin, side.app)) - s0) / 1e9  # a backend opened meanwhile: from 0
    side.turns.append(
        {
            "threads": threads,
            "queries": done,
            "qps": done / wall,
            "client_cpu_ms": client_s / done * 1000,
            "server_cpu_ms": server_s / done * 1000,
            "load": os.getloadavg()[0],
        }
    )
    side.latencies.extend(latencies)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True, help="database built by scale.py (same seed and tenants)")
    p.add_argument(
        "--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", "postgresql://postgres@127.0.0.1:55432/postgres")
    )
    p.add_argument("--set", dest="settings", type=parse_setting, action="append", required=True, metavar="KEY=VALUE")
    p.add_argument("--threads", default="1,4,8")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--candidates", action="store_true", help="ask for the candidate list too (the default query)")
    p.add_argument(
        "--embed", action="store_true",
        help="let the library embed each query (its configured embedder, ONNX int8 by default) instead of supplying it",
    )  # fmt: skip
    p.add_argument("--out", default="results/scale")
    args = p.parse_args()
    params = psycopg.conninfo.conninfo_to_dict(args.dsn)
    params["dbname"] = args.db
    dsn = psycopg.conninfo.make_conninfo(**params)

    world = corpus.universe(args.seed, args.tenants)
    queries = corpus.queries(args.queries, seed=args.seed, n_tenants=args.tenants, world=world)
    embed = library.hash_embed()
    jobs = [(q.text, q.tenant, q.memory_type, embed(q.text)) for q in queries]
    changed, default = Side("set", dsn, dict(args.settings)), Side("default", dsn, {})
    levels = [int(t) for t in args.threads.split(",")]
    with psycopg.connect(dsn, autocommit=True) as admin:
        for side in (changed, default):  # warm-up: statements prepared, pages cached, the pools' connections open
            turn(side, admin, max(levels), min(5.0, args.seconds), jobs, args.candidates, args.embed)
            side.turns.clear()
            side.latencies.clear()
        per_level: dict[int, dict[str, Any]] = {}
        for threads in levels:
            for side in (changed, default):
                side.turns.clear()
                side.latencies.clear()
            for r in range(args.rounds):
                for side in (changed, default) if r % 2 == 0 else (default, changed):
                    turn(side, admin, threads, args.seconds, jobs, args.candidates, args.embed)
            per_level[threads] = {side.label: summarize(side) for side in (changed, default)}
            c, d = per_level[threads]["set"], per_level[threads]["default"]
            print(f"{threads} clients: set {c['qps']:.1f} q/s, default {d['qps']:.1f} q/s", file=sys.stderr)
    for side in (changed, default):
        side.system.close()
    write(args, per_level, dsn)
    return 0


def summarize(side: Side) -> dict[str, Any]:
    lat = sorted(side.latencies)
    return {
        "qps": statistics.median(t["qps"] for t in side.turns),
        "qps_turns": [round(t["qps"], 1) for t in side.turns],
        "p50_ms": statistics.median(lat),
        "p95_ms": lat[min(len(lat) - 1, int(len(lat) * 0.95))],
        "client_cpu_ms": statistics.median(t["client_cpu_ms"] for t in side.turns),
        "server_cpu_ms": statistics.median(t["server_cpu_ms"] for t in side.turns),
        "load": [round(t["load"], 1) for t in side.turns],
    }


def write(args: argparse.Namespace, per_level: dict[int, dict[str, Any]], dsn: str) -> None:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    setting = ", ".join(f"{k}={v}" for k, v in args.settings)
    lines = [
        f"# Throughput side by side on `{args.db}`: `{setting}` (set) vs the defaults (default)",
        "",
        f"Commit {head.stdout.strip()}, {os.cpu_count()} CPUs. One process, two MemorySystems on the same "
        f"database taking turns of {args.seconds:.0f} s (one then the other, then the other way round), {args.rounds} rounds per client count; "
        f"the {args.queries} scale-benchmark queries (seed {args.seed}, {args.tenants} tenants), "
        f"{'embedded by the library (its configured embedder)' if args.embed else 'embedding supplied'}, "
        f"retrieval-only, {'with' if args.candidates else 'no'} candidate list. CPU per query: the "
        "client process during the side's turns, and the side's own server backends (schedstat).",
        "",
        "| clients | side | queries/s (median of turns) | turns | p50 ms | p95 ms | client CPU ms/query | "
        "server CPU ms/query | load per turn |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for threads, sides in per_level.items():
        for label, s in sides.items():
            lines.append(
                f"| {threads} | {label} | {s['qps']:.1f} | {s['qps_turns']} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} "
                f"| {s['client_cpu_ms']:.2f} | {s['server_cpu_ms']:.2f} | {s['load']} |"
            )
    out = REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"{stamp}-{args.db}-throughput-ab"
    base.with_suffix(".md").write_text("\n".join(lines) + "\n")
    base.with_suffix(".json").write_text(json.dumps({"args": vars(args), "levels": per_level}, indent=1, default=str))
    print("\n".join(lines))
    print(f"written: {base}.md", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
