"""Evidence for the report: EXPLAIN ANALYZE of the slowest statements and the plan cache's choices."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from library import sql_text
from phases import Bench
from psycopg import sql
from psycopg.types.string import StrDumper

from memoria_pg import Diagnostics, MemorySystem


def explain(conn, text: str, params: dict[str, Any]) -> tuple[float, list[str]]:
    cur = conn.cursor()
    # Strings go as text, not "unknown": EXPLAIN cannot infer a parameter's type from its context.
    cur.adapters.register_dumper(str, StrDumper)
    rows = cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, params).fetchall()
    lines = [r[0] for r in rows]
    exec_ms = sum(
        float(line.split(":")[1].split()[0]) for line in lines if line.startswith(("Execution Time", "Planning Time"))
    )
    return exec_ms, lines


def _pg_type(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "vector"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "float8"
    if isinstance(value, (list, tuple)):
        return "text[]"
    return "text"


def explain_generic(conn, text: str, params: dict[str, Any]) -> tuple[float, list[str]]:
    """EXPLAIN ANALYZE of the statement's generic plan (what a prepared statement may settle on)."""
    order: list[str] = []

    def placeholder(m: re.Match[str]) -> str:
        if m.group(1) not in order:
            order.append(m.group(1))
        return f"${order.index(m.group(1)) + 1}"

    body = re.sub(r"%\((\w+)\)s", placeholder, text).replace("%%", "%")
    types = [_pg_type(params[k]) for k in order]
    conn.execute(f"PREPARE bench_generic ({', '.join(types)}) AS " + body)
    try:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        # EXECUTE's arguments cannot be bind parameters inside EXPLAIN: inline them as literals.
        args = ", ".join(f"{sql.Literal(params[k]).as_string(conn)}::{t}" for k, t in zip(order, types, strict=True))
        return explain(conn, f"EXECUTE bench_generic({args})", None)
    finally:
        conn.execute("DEALLOCATE bench_generic")


def plans(bench: Bench, v4_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE of the slowest query per worker, a common-word BM25 query and the final CTE."""
    system, out = bench.system, []
    registry, scheduler, cfg = system.pipeline.registry, system.pipeline.scheduler, system.config
    picks: list[tuple[str, int]] = []
    for worker in registry:
        timed = [(r["worker_ms"][worker], i) for i, r in enumerate(v4_rows) if worker in r["worker_ms"]]
        if timed:
            picks.append((worker, max(timed)[1]))
    common = [i for i, q in enumerate(bench.queries) if q.category == "common"]
    if common:
        slow = max(common, key=lambda i: v4_rows[i]["worker_ms"].get("bm25", 0))
        picks += [("bm25", slow), ("tsrank", slow)]
    for worker, i in picks:
        query, _, ctx, _ = bench.context(i)
        if worker == "tsrank":
            tsquery = " | ".join("'" + t + "'" for t in query.tokens)
            statements = [
                (
                    sql_text("workers/bm25_tsrank"),
                    {"tsquery": tsquery, "memory_type": s.memory_type, "limit": ctx.limit},
                )
                for s in ctx.shards
            ]
        else:
            with system.db.transaction(query.tenant) as conn:
                statements = registry[worker]().statements_for(conn, ctx)
        for text, params in statements:
            with system.db.transaction(query.tenant) as conn:
                exec_ms, lines = explain(conn, text, params)
            out.append(
                {
                    "what": worker,
                    "query": bench.queries[i].text,
                    "tenant": query.tenant,
                    "category": bench.queries[i].category,
                    "shard": params.get("memory_type"),
                    "in_query_worker_ms": v4_rows[i]["worker_ms"].get(worker),
                    "execution_ms": exec_ms,
                    "plan": lines,
                }
            )
    typed = [i for i, r in enumerate(v4_rows) if "vector" in r["worker_ms"] and r["shards"] != ["*"]]
    if typed:  # the vector worker on a tenant-filtered partition, custom and generic plan
        i = max(typed, key=lambda i: v4_rows[i]["worker_ms"]["vector"])
        query, _, ctx, _ = bench.context(i)
        with system.db.transaction(query.tenant) as conn:
            text, params = registry["vector"]().statements_for(conn, ctx)[0]
        for what, fn in (("vector (custom plan)", explain), ("vector (generic plan)", explain_generic)):
            with system.db.transaction(query.tenant) as conn:
                exec_ms, lines = fn(conn, text, params)
            out.append(
                {
                    "what": what,
                    "query": bench.queries[i].text,
                    "tenant": query.tenant,
                    "category": bench.queries[i].category,
                    "shard": params.get("memory_type"),
                    "in_query_worker_ms": v4_rows[i]["worker_ms"]["vector"],
                    "execution_ms": exec_ms,
                    "plan": lines,
                }
            )
    slow = max(range(len(v4_rows)), key=lambda i: v4_rows[i]["database_ms"])
    query, _, ctx, tasks = bench.context(slow)
    hits = dict(scheduler.run(tasks, tenant=query.tenant, deadline_ms=cfg.retrieval_deadline_ms).hits)
    hits.update(system.pipeline.relevance(query, ctx.embedding, cfg.top_k, Diagnostics()))
    statement, params = system.pipeline.candidate_statement(hits)
    with system.db.transaction(query.tenant) as conn:
        exec_ms, lines = explain(conn, statement, params)
    out.append(
        {
            "what": "final_cte",
            "query": bench.queries[slow].text,
            "tenant": query.tenant,
            "category": bench.queries[slow].category,
            "shard": None,
            "hits": sum(len(v) for v in hits.values()),
            "in_query_worker_ms": v4_rows[slow]["database_ms"],
            "execution_ms": exec_ms,
            "plan": lines,
        }
    )
    return out


def plan_cache(system: MemorySystem) -> list[dict[str, Any]]:
    """Prepared statements on the pool's connections: did the server switch to generic plans?"""
    conns, rows = [], []
    try:
        for _ in range(min(system.db.pool.get_stats().get("pool_size", 4), 12)):
            conns.append(system.db.pool.getconn(timeout=2))
    except Exception:
        pass
    for conn in conns:
        for _name, statement, generic, custom in conn.execute(
            "SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall():
            rows.append(
                {"statement": " ".join(statement.split())[:90], "generic_plans": generic, "custom_plans": custom}
            )
    for conn in conns:
        system.db.pool.putconn(conn)
    merged: dict[str, dict[str, Any]] = {}
    for r in rows:
        m = merged.setdefault(
            r["statement"], {"statement": r["statement"], "generic_plans": 0, "custom_plans": 0, "connections": 0}
        )
        m["generic_plans"] += r["generic_plans"]
        m["custom_plans"] += r["custom_plans"]
        m["connections"] += 1
    return sorted(merged.values(), key=lambda m: -m["generic_plans"] - m["custom_plans"])
