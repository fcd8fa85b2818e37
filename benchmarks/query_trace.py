"""Where a query's wall time goes outside the server (issue 17's overhead): a timeline of each query's
steps across the threads that run it, and the medians of the gaps between them.

    python benchmarks/query_trace.py --db memoria_ab_locomo --locomo /work/shared/eval [--queries 200] [--show 2]
    python benchmarks/query_trace.py --db memoria_scale_100000 [--queries 200]

Queries run one at a time (vectors supplied, retrieval-only, no candidate list) on a MemorySystem whose
steps are wrapped to record when they start and end, on which thread: the query processing and its entity
lookup, the scheduler's submission of the workers, each task's start on its thread, its settings and
statements, its result recorded, the caller woken, the final CTE's parameters, statement and rows. The
wrappers cost a few microseconds each (the query runs slower by about that), so read the gaps, not the
total. Reported: the medians over the queries of

- processing: the lookup's statement sent, its answer read (the round trip, for a statement the server
  runs in ~0.03 ms), and the rest of the processing;
- workers: from the submission to the first and to the last task's start on its thread (thread
  wake-ups), from a task's start to its statement sent (pool checkout, settings), the statement's wall
  time, from the last result recorded to the caller woken;
- final CTE: from the hits to the statement sent (parameters, checkout, settings), its wall time, the
  rows turned into candidates.

`--show K` prints the first K timelines. The database is one `before_after.py --locomo` loads (LoCoMo
dev turns with context, the questions' cached vectors) or one `scale.py` built. Writes nothing.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading
import time
from typing import Any

import psycopg
from overhead import add_query_arguments, query_set
from scale import with_db

import memoria_pg.query.candidates as candidates
import memoria_pg.query.processor as processor
import memoria_pg.query.scheduler as scheduler
import memoria_pg.query.workers.base as workers
from memoria_pg import Config, MemorySystem
from memoria_pg.query.pipeline import QueryPipeline

Event = tuple[float, str, str]  # (time, thread, step)
EVENTS: list[Event] = []
RECORDING = threading.Event()


def mark(step: str) -> None:
    if RECORDING.is_set():
        EVENTS.append((time.perf_counter(), threading.current_thread().name, step))


def traced(owner: Any, attr: str, step: str) -> None:
    """Wrap owner.attr so that its start ("step>") and end ("step<") are marked."""
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(step + ">")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(step + "<")

    setattr(owner, attr, wrapper)


def instrument() -> None:
    traced(QueryPipeline, "process_in", "process")
    traced(processor.TableLookup, "__call__", "lookup")
    traced(QueryPipeline, "run_workers", "workers")
    traced(scheduler.Running, "add", "submit")
    traced(scheduler._Run, "execute", "task")
    traced(workers.Worker, "run", "statement")
    traced(scheduler._Run, "_completed", "recorded")
    traced(QueryPipeline, "candidates", "final")
    traced(candidates, "_fetch", "final_statement")
    execute = psycopg.Cursor.execute

    def sent(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        out = execute(self, query, *args, **kwargs)
        mark("sent:" + str(query)[:24].replace("\n", " "))
        return out

    psycopg.Cursor.execute = sent  # type: ignore[method-assign]


def first(events: list[Event], step: str, after: float = 0.0) -> float | None:
    return next((t for t, _, s in events if s == step and t >= after), None)


def last(events: list[Event], step: str) -> float | None:
    return next((t for t, _, s in reversed(events) if s == step), None)


def spans(events: list[Event], start: str, end: str) -> list[float]:
    """In ms, from each `start` to the next `end` on the same thread."""
    out = []
    for t0, thread, step in events:
        if step == start:
            t1 = next((t for t, th, s in events if th == thread and s == end and t >= t0), None)
            if t1 is not None:
                out.append((t1 - t0) * 1000)
    return out


def gaps(events: list[Event]) -> dict[str, float]:
    """The intervals of one query's timeline, in ms (those it has)."""
    out: dict[str, float] = {}

    def put(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None and b >= a:
            out[name] = (b - a) * 1000

    put("processing", first(events, "process>"), first(events, "process<"))
    lookup_sent = next((t for t, _, s in events if s.startswith("sent:-- Query processing")), None)
    put("lookup: sent -> answer read", lookup_sent, first(events, "lookup<"))
    put("processing after the lookup", first(events, "lookup<"), first(events, "process<"))
    submitted = last(events, "submit<")
    starts = [t for t, _, s in events if s == "task>" and submitted is not None and t >= submitted]
    put("submitted -> first task started", submitted, min(starts, default=None))
    put("submitted -> last task started", submitted, max(starts, default=None))
    for name, start, end in (
        ("task started -> its worker statement sent (checkout, settings), slowest task", "task>", "statement>"),
        ("slowest worker statement (wall)", "statement>", "statement<"),
    ):
        if durations := spans(events, start, end):
            out[name] = max(durations)
    put("last recorded -> caller woken", last(events, "recorded<"), first(events, "workers<"))
    put("workers (wall)", first(events, "workers>"), first(events, "workers<"))
    put("final: hits -> statement sent", first(events, "final>"), first(events, "final_statement>"))
    put("final: statement (wall)", first(events, "final_statement>"), first(events, "final_statement<"))
    put("final: rows -> candidates", first(events, "final_statement<"), first(events, "final<"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_query_arguments(parser)
    parser.add_argument("--show", type=int, default=1, help="timelines printed")
    args = parser.parse_args(argv)

    queries, vectors = query_set(args.locomo, args.queries)
    instrument()
    config = Config.from_env(dsn=with_db(args.admin_dsn, args.db), use_age=False, pool_min_size=12,
                             pool_max_size=48, query_cache_size=0)  # fmt: skip
    per_query: list[dict[str, float]] = []
    walls: list[float] = []
    with MemorySystem(config, auto_migrate=False) as system:

        def run(i: int) -> None:
            q = queries[i]
            system.query(q.text, tenant=q.tenant, memory_type=getattr(q, "memory_type", None), ranking=False,
                         embedding=vectors[i], candidates=False)  # fmt: skip

        for i in range(min(50, len(queries))):  # warm the pool, the plans and the caches
            run(i)
        for i in range(len(queries)):
            EVENTS.clear()
            RECORDING.set()
            t0 = time.perf_counter()
            run(i)
            wall = time.perf_counter() - t0
            RECORDING.clear()
            walls.append(wall * 1000)
            per_query.append(gaps(EVENTS))
            if i < args.show:
                print(f"query {i}: {wall * 1000:.2f} ms")
                for t, thread, step in EVENTS:
                    print(f"  {(t - t0) * 1000:7.3f}  {thread[:18]:18s}  {step}")
    print(f"\n{len(queries)} queries, wall p50 {statistics.median(walls):.2f} ms (traced)\n")
    print("| interval | median ms | queries |")
    print("|---|---|---|")
    names = list(dict.fromkeys(k for g in per_query for k in g))
    for name in names:
        values = [g[name] for g in per_query if name in g]
        print(f"| {name} | {statistics.median(values):.3f} | {len(values)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
