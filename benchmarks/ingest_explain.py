"""CPU of each statement of one ingest batch, measured on the server process, then ROLLBACK.

    python benchmarks/ingest_explain.py --dsn postgresql://postgres@127.0.0.1:55432/memoria_ingest_ab \
        --batch 2000 --repeat 5 [--plans]
    PYTHONPATH=/tmp/other-checkout python benchmarks/ingest_explain.py ...   # another library version

Writes `--repeat` batches with store_batch on a database that is already migrated (typically filled
by an ingest_ab.py run) and rolls each one back, so the database is left as it was and every repeat
(and every library version) meets the same state. Each statement's CPU is read from the server
backend's /proc/<pid>/schedstat (nanoseconds on CPU), so it does not depend on the machine's load;
the server must run on this machine, in its process namespace (scripts/age-server.sh's does).
The client's CPU (validation, tokenizing, entities, COPY rows) is this thread's CPU time. Reported:
the median over the repeats of each step's CPU per memory. With --plans the statements of the
last repeat run under EXPLAIN (ANALYZE, BUFFERS, WAL) and their plans (first tenant) are printed.

The records come from benchmarks/corpus.py with their own seed: new memories of the same tenants.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence

import corpus
import library

from memoria_pg import Config, MemorySystem


class _Rollback(Exception):
    pass


def backend_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class _MeteredConnection:
    """Adds each statement's server CPU to `spent` under the name of its sql/ingest file."""

    def __init__(self, conn, pid: int, names: dict[str, str], spent: dict[str, int], plans: dict[str, str] | None):
        self._conn, self._pid, self._names, self._spent, self._plans = conn, pid, names, spent, plans

    def execute(self, query, params=None, **kw):
        name = self._names.get(query, "other") if isinstance(query, str) else "other"
        if self._plans is not None and name not in ("other", "stage"):
            rows = self._conn.execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + query, params, **kw).fetchall()
            self._plans.setdefault(name, "\n".join(r[0] for r in rows))
            return self._conn.execute("SELECT NULL WHERE false")
        t0 = backend_cpu_ns(self._pid)
        try:
            return self._conn.execute(query, params, **kw)
        finally:
            self._spent[name] = self._spent.get(name, 0) + backend_cpu_ns(self._pid) - t0

    def transaction(self, *a, **kw):
        return self._conn.transaction(*a, **kw)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True)
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--tenants", type=int, default=10)
    corpus.add_profile_argument(p)
    p.add_argument("--plans", action="store_true", help="print the plans (of the first tenant)")
    p.add_argument(
        "--setup",
        action="append",
        default=[],
        help="SQL run as the login user at the start of every rolled-back batch (an experiment: "
        "e.g. DROP INDEX memoria.memories_relevance, to see what the index costs)",
    )
    args = p.parse_args(argv)
    embed = library.hash_embed()
    world = corpus.universe(7, args.tenants)  # the tenants of the stored corpus, new texts
    records = list(
        corpus.memories(
            args.batch * args.repeat,
            seed=args.seed,
            n_tenants=args.tenants,
            world=world,
            embed=embed,
            profile=args.profile,
        )
    )
    config = Config.from_env(dsn=args.dsn, use_age=False, pool_min_size=1, pool_max_size=2)
    with MemorySystem(config, auto_migrate=False) as system:
        runs, plans = metered_batches(system, records, args.batch, args.repeat, setup=args.setup, plans=args.plans)
    print(summary(runs, args.batch, args.repeat))
    for name, text in plans.items():
        print(f"\n=== {name}\n{text}")
    return 0


def metered_batches(
    system: MemorySystem, records: list, batch: int, repeat: int, *, setup: Sequence[str] = (), plans: bool = False
) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Write `repeat` batches of `batch` records with the system's ingestor, one statement at a time,
    each rolled back; per batch, each step's CPU in ms per memory (server steps by SQL file, client
    steps marked "(client)"), and with `plans` the plans of one more batch."""
    names = {
        library.sql_text(f"ingest/{path.stem}"): path.stem
        for path in sorted((library.sql_dir() / "ingest").glob("*.sql"))
    }
    runs: list[dict[str, float]] = []
    plan_texts: dict[str, str] = {}
    ing = system.ingestor
    ing.pipeline = False  # one statement at a time, to read each one's CPU
    db = ing.db
    state: dict = {}

    class _DB:
        @contextlib.contextmanager
        def connection(self):
            with db.connection() as conn:
                pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                state["pid"] = pid
                try:
                    with conn.transaction():
                        if setup:
                            conn.execute("RESET ROLE")
                            for statement in setup:
                                conn.execute(statement)
                            conn.execute("SET ROLE memoria_app")
                        yield _MeteredConnection(conn, pid, names, state["spent"], state.get("plans"))
                        raise _Rollback
                except _Rollback:
                    pass

        def __getattr__(self, name):
            return getattr(db, name)

    ing.db = _DB()
    # Ingestor.write / copy_batch (named _write / _copy before the restructuring, in older checkouts)
    write_name, copy_name = ("write", "copy_batch") if hasattr(ing, "copy_batch") else ("_write", "_copy")
    copy = getattr(ing, copy_name)

    def metered_copy(conn, *a, **kw):
        t0, c0 = backend_cpu_ns(state["pid"]), time.thread_time_ns()
        try:
            return copy(conn, *a, **kw)
        finally:
            state["spent"]["copy (server)"] = backend_cpu_ns(state["pid"]) - t0
            state["spent"]["copy (client)"] = time.thread_time_ns() - c0

    setattr(ing, copy_name, metered_copy)
    for r in range(repeat + (1 if plans else 0)):
        chunk = records[(r % repeat) * batch : (r % repeat + 1) * batch]
        state["spent"] = {}
        state["plans"] = plan_texts if r == repeat else None
        c0 = time.thread_time_ns()
        prepared = ing.prepare_batch(chunk)
        prepare_ns = time.thread_time_ns() - c0
        c0 = time.thread_time_ns()
        getattr(ing, write_name)(prepared)
        write_client_ns = time.thread_time_ns() - c0
        if r < repeat:
            spent = {k: v / 1e6 / batch for k, v in state["spent"].items()}
            spent["prepare (client)"] = prepare_ns / 1e6 / batch
            write_ns = write_client_ns - state["spent"].get("copy (client)", 0)
            spent["write, not COPY (client)"] = write_ns / 1e6 / batch
            runs.append(spent)
    return runs, plan_texts


def summary(runs: list[dict[str, float]], batch: int, repeat: int) -> str:
    keys = sorted({k for run in runs for k in run}, key=lambda k: -statistics.median(r.get(k, 0.0) for r in runs))
    med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
    server = sum(v for k, v in med.items() if "(client)" not in k)
    client = sum(v for k, v in med.items() if "(client)" in k)
    lines = [
        f"{batch} records a batch, {repeat} batches rolled back; median CPU ms per memory: "
        f"server {server:.3f} + client {client:.3f} = {server + client:.3f}"
    ]
    lines += [f"  {k:28s} {med[k]:.4f}" for k in keys]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
