"""Read replicas: what routing and read-your-writes cost per query, replica lag under ingestion, and
throughput at N clients with and without the standby (README, "Read replicas").

    bash scripts/standby.sh start     # the standby of the test server (prints its DSN)
    python benchmarks/replicas.py --n 20000 --seconds 20

1. Lag under ingestion: `store_many` of N records (vectors supplied, 2 writers, as benchmarks/ingestion.py)
   while, every 50 ms, the WAL bytes the standby has not replayed and the visibility delay (how long
   until the standby has replayed the primary's WAL position of that moment) are sampled.
2. Overhead per query: the same queries through a MemorySystem without standbys and one with the
   standby, alternating (order flipped each time): end-to-end p50 of each, the median paired
   difference, and the routing time (`diagnostics.routing_ms`: choosing the server, the status check
   when due, the read-your-writes check).
3. Read-your-writes: each query right after a store of its tenant (through the same system): how
   often the standby had replayed it already, waited, or the query went to the primary; the routing
   time then; and the write side (`wrote`: one pg_current_wal_lsn() on the primary per write call).
4. Throughput: C client threads, primary only, with the standby, and with the standby and a store
   before one query in ten; S seconds each, in four slices alternating between the modes; with each
   server's CPU per query (its backends connected to the benchmark database, from /proc).

Both servers share this machine's cores: the throughput with the standby cannot show a gain here.
HashEmbedder vectors (no model); the corpus is benchmarks/corpus.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import corpus
from service_load import DEFAULT_ADMIN_DSN, percentile, summary
from soak import drop_database, fresh_database, require_loopback, with_db
from timing import LoadMonitor, log

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.core.text import normalize

DEFAULT_STANDBY_DSN = "postgresql://postgres@127.0.0.1:55433/postgres"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=os.environ.get("MEMORIA_TEST_DSN", DEFAULT_ADMIN_DSN), help="primary admin DSN")
    p.add_argument("--standby", default=os.environ.get("MEMORIA_TEST_STANDBY_DSN", DEFAULT_STANDBY_DSN))
    p.add_argument("--db-name", default="memoria_replicas_bench")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--pairs", type=int, default=300)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=7)
    corpus.add_profile_argument(p)
    p.add_argument("--out", default="results/replicas")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--phases", choices=("all", "ingest", "routing"), default="all", help="stop after this one")
    return p.parse_args(argv)


def sample_lag(primary: str, standby: str, stop: threading.Event, samples: list[tuple[float, int, float]]) -> None:
    """Every 50 ms: the WAL bytes the standby has not replayed yet, and the visibility delay: how long
    until the standby has replayed the primary's position of that moment (what a read-your-writes
    check waits for; pg_stat_replication.replay_lag is only refreshed at the standby's status replies)."""
    import psycopg

    with psycopg.connect(primary, autocommit=True) as conn, psycopg.connect(standby, autocommit=True) as replica:
        while not stop.wait(0.05):
            t0 = time.perf_counter()
            lsn, behind = conn.execute(
                "SELECT pg_current_wal_lsn(), pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint "
                "FROM pg_stat_replication LIMIT 1"
            ).fetchone()
            while not replica.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
                time.sleep(0.001)
            samples.append((t0, int(behind), (time.perf_counter() - t0) * 1000))


def wait_caught_up(primary: str, standby: str) -> float:
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(primary, autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    with psycopg.connect(standby, autocommit=True) as conn:
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
            time.sleep(0.005)
    return time.perf_counter() - t0


def ingest_lag(system: MemorySystem, args: argparse.Namespace, world: corpus.Universe, standby: str) -> dict:
    embedder = HashEmbedder()
    records = corpus.memories(
        args.n,
        seed=args.seed,
        n_tenants=args.tenants,
        world=world,
        embed=lambda t: embedder.embed([normalize(t)])[0],
        profile=args.profile,
    )
    samples: list[tuple[float, int, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_lag, args=(system.dsn, standby, stop, samples), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    result = system.store_many(records, return_ids=False)
    elapsed = time.perf_counter() - t0
    catch_up = wait_caught_up(system.dsn, standby)
    stop.set()
    sampler.join()
    during = [s for s in samples if s[0] <= t0 + elapsed]
    lag_bytes = [s[1] for s in during] or [0]
    lag_ms = [s[2] for s in during] or [0.0]
    return {
        "inserted": result.inserted,
        "seconds": elapsed,
        "per_s": result.inserted / elapsed,
        "samples": len(during),
        "lag_bytes_p50": percentile([float(b) for b in lag_bytes], 0.5),
        "lag_bytes_p95": percentile([float(b) for b in lag_bytes], 0.95),
        "lag_bytes_max": max(lag_bytes),
        "visibility_delay_ms_p50": percentile(lag_ms, 0.5),
        "visibility_delay_ms_p95": percentile(lag_ms, 0.95),
        "visibility_delay_ms_max": max(lag_ms),
        "caught_up_after_s": catch_up,
    }


def overhead(plain: MemorySystem, routed: MemorySystem, queries: list[corpus.Query]) -> dict:
    wall: dict[str, list[float]] = {"primary": [], "standby": []}
    routing, servers = [], []
    for i, q in enumerate(queries):
        order = ("primary", "standby") if i % 2 == 0 else ("standby", "primary")
        for mode in order:
            system = plain if mode == "primary" else routed
            t0 = time.perf_counter()
            response = system.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            wall[mode].append((time.perf_counter() - t0) * 1000)
            if mode == "standby":
                routing.append(response.diagnostics.routing_ms)
                servers.append(response.diagnostics.server)
    return {
        "primary_only": summary(wall["primary"]),
        "with_standby": summary(wall["standby"]),
        "median_paired_difference_ms": statistics.median(s - p for s, p in zip(wall["standby"], wall["primary"])),
        "routing_ms": {**summary(routing), "mean_ms": statistics.fmean(routing)},
        "answered_by_standby": sum(s != "primary" for s in servers) / len(servers),
    }


def read_your_writes(routed: MemorySystem, queries: list[corpus.Query]) -> dict:
    embedder = HashEmbedder()
    routing, outcomes, store_ms = [], {"standby": 0, "standby_after_wait": 0, "primary": 0}, []
    for i, q in enumerate(queries):
        text = f"benchmark note {i} for {q.tenant}"
        t0 = time.perf_counter()
        routed.store(text, tenant=q.tenant, embedding=embedder.embed([text])[0])
        store_ms.append((time.perf_counter() - t0) * 1000)
        d = routed.query(q.text, tenant=q.tenant, memory_type=q.memory_type).diagnostics
        routing.append(d.routing_ms)
        key = "primary" if d.server == "primary" else "standby_after_wait" if d.server_note else "standby"
        outcomes[key] += 1
    wrote = []
    for q in queries[:200]:
        t0 = time.perf_counter()
        routed.reads.wrote(q.tenant)
        wrote.append((time.perf_counter() - t0) * 1000)
    return {
        "queries": len(queries),
        "outcomes": outcomes,
        "routing_ms": {**summary(routing), "mean_ms": statistics.fmean(routing)},
        "store_ms": summary(store_ms),
        "wrote_ms": summary(wrote),
    }


def backends_cpu_s(dsn: str) -> float:
    """CPU seconds (user + system) of the server's backends connected to the benchmark database (not
    this probe's): the query work, without other databases' clients on a shared server. The server runs
    on this machine (/proc); a backend that exits is no longer counted (the pools keep theirs)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()]  # fmt: skip
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def client_load(system: MemorySystem, queries: list[corpus.Query], clients: int, seconds: float, writes: bool) -> dict:
    """`clients` threads querying for `seconds` (with `writes`, a store before every tenth query)."""
    times: list[float] = []
    servers: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    embedder = HashEmbedder()

    def client(index: int) -> None:
        i, mine, where = index, [], []
        while time.perf_counter() < stop_at:
            q = queries[i % len(queries)]
            if writes and (i // clients) % 10 == 0:
                text = f"throughput note {index} {i} {time.perf_counter()}"
                system.store(text, tenant=q.tenant, embedding=embedder.embed([text])[0])
            t0 = time.perf_counter()
            response = system.query(q.text, tenant=q.tenant, memory_type=q.memory_type)
            mine.append((time.perf_counter() - t0) * 1000)
            where.append(response.diagnostics.server)
            i += clients
        with lock:
            times.extend(mine)
            servers.extend(where)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"times": times, "servers": servers, "seconds": time.perf_counter() - t0}


def throughput(modes: dict[str, tuple[MemorySystem, bool]], queries, args, primary: str, standby: str) -> dict:
    """Each mode for `rounds` slices of seconds/rounds, the modes alternating (order rotated each round),
    so a change in the machine's load falls on all of them; queries/s, latency, and each server's CPU
    per query (the standby's CPU is what a second machine would take off the primary)."""
    rounds = 4
    acc: dict[str, dict[str, Any]] = {m: {"times": [], "servers": [], "seconds": 0.0, "cpu": [0.0, 0.0]} for m in modes}
    names = list(modes)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            system, writes = modes[name]
            c0 = (backends_cpu_s(primary), backends_cpu_s(standby))
            out = client_load(system, queries, args.clients, args.seconds / rounds, writes)
            c1 = (backends_cpu_s(primary), backends_cpu_s(standby))
            a = acc[name]
            a["times"] += out["times"]
            a["servers"] += out["servers"]
            a["seconds"] += out["seconds"]
            a["cpu"] = [a["cpu"][0] + c1[0] - c0[0], a["cpu"][1] + c1[1] - c0[1]]
    result = {}
    for name, a in acc.items():
        n = max(1, len(a["times"]))
        result[name] = {
            **summary(a["times"]),
            "queries_per_s": len(a["times"]) / a["seconds"],
            "answered_by_standby": sum(s != "primary" for s in a["servers"]) / n,
            "primary_cpu_ms_per_query": a["cpu"][0] / n * 1000,
            "standby_cpu_ms_per_query": a["cpu"][1] / n * 1000,
        }
    return result


def routing_parts(routed: MemorySystem, tenants: list[str], n: int = 500) -> dict:
    """The routing's parts, timed alone (no query around them): a choice from the cached status (the
    usual case while queries come faster than STATUS_TTL_S), a choice with its status check (one
    statement on the standby), and the write side plus the choice right after it (one statement on the
    primary; on the standby, the check and any wait for the replay)."""
    reads = routed.reads
    replica = reads.replicas[0]
    cached, checked, after_write, noted = [], [], [], []
    embedder, waited, primary = HashEmbedder(), 0, 0
    for i in range(n):
        tenant = tenants[i % len(tenants)]
        reads.choose(tenant)  # fresh status
        t0 = time.perf_counter()
        reads.choose(tenant)
        cached.append((time.perf_counter() - t0) * 1000)
        replica.checked_at = float("-inf")
        t0 = time.perf_counter()
        reads.choose(tenant)
        checked.append((time.perf_counter() - t0) * 1000)
        text = f"routing note {i}"
        routed.store(text, tenant=tenant, embedding=embedder.embed([text])[0])  # a real write, then wrote()
        t0 = time.perf_counter()
        target = reads.choose(tenant)
        after_write.append((time.perf_counter() - t0) * 1000)
        waited += target.note is not None and target.replica is not None
        primary += target.replica is None
        t0 = time.perf_counter()
        reads.wrote(tenant)  # what store() added to the write: timed alone
        noted.append((time.perf_counter() - t0) * 1000)
    return {
        "cached_choice_ms": {**summary(cached), "mean_ms": statistics.fmean(cached)},
        "choice_with_status_check_ms": {**summary(checked), "mean_ms": statistics.fmean(checked)},
        "wrote_ms": {**summary(noted), "mean_ms": statistics.fmean(noted)},
        "choice_after_a_write_ms": {**summary(after_write), "mean_ms": statistics.fmean(after_write)},
        "after_a_write_waited": waited,
        "after_a_write_primary": primary,
    }


def measure(args: argparse.Namespace, dsn: str, replica: str, monitor: LoadMonitor) -> dict[str, Any]:
    world = corpus.universe(args.seed, args.tenants)
    base = {"pool_min_size": 2, "pool_max_size": 10}
    figures: dict[str, Any] = {}
    routed_config = Config(dsn=dsn, replica_dsns=(replica,), **base)
    with MemorySystem(routed_config, embedder=HashEmbedder(), auto_migrate=True) as routed:
        with monitor.phase("ingest with the standby replaying"):
            figures["ingest_lag"] = ingest_lag(routed, args, world, args.standby)
        if args.phases == "ingest":
            return figures
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
        wait_caught_up(dsn, args.standby)
        queries = corpus.queries(max(args.pairs, 400), seed=args.seed, n_tenants=args.tenants, world=world)
        with monitor.phase("routing parts"):
            figures["routing_parts"] = routing_parts(routed, sorted({q.tenant for q in queries}))
        if args.phases == "routing":
            return figures
        with MemorySystem(Config(dsn=dsn, **base), embedder=HashEmbedder()) as plain:
            for q in queries[:30]:  # warm both pools and plan caches
                plain.query(q.text, tenant=q.tenant)
                routed.query(q.text, tenant=q.tenant)
            with monitor.phase("overhead, alternating"):
                figures["overhead"] = overhead(plain, routed, queries[: args.pairs])
            with monitor.phase("read-your-writes"):
                figures["read_your_writes"] = read_your_writes(routed, queries[: args.pairs])
            modes = {
                "primary_only": (plain, False),
                "with_standby": (routed, False),
                "with_standby_one_write_in_ten": (routed, True),
            }
            with monitor.phase("throughput, the modes alternating"):
                figures["throughput"] = throughput(modes, queries, args, dsn, replica)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    wait_caught_up(args.dsn, args.standby)
    replica = with_db(args.standby, args.db_name)
    monitor = LoadMonitor()
    started = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    try:
        figures = measure(args, dsn, replica, monitor)
    finally:
        monitor.stop()
        if not args.keep:
            drop_database(args.dsn, args.db_name)
    figures["phases"] = monitor.phases
    figures["settings"] = {k: v for k, v in vars(args).items() if k not in ("dsn", "standby")}
    out = Path(args.out) / f"{started}-n{args.n}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(figures, indent=2, default=str))
    log(f"wrote {out / 'results.json'}")
    print(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
