"""Summaries, targets and the Markdown report of a scale benchmark run (pure functions over its results)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

TIMINGS = ("total_ms", "processing_ms", "retrieval_ms", "database_ms", "ranking_ms", "embedding_ms")
FLAT_TOLERANCE = 0.10  # ingest RSS at 100% within 10% of RSS at 10% counts as flat in N


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {
        "n": int(a.size),
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "max": float(a.max()),
    }


def save_figures(out: Path, name: str, meta: dict[str, Any], figures: dict[str, Any]) -> None:
    """A side-by-side run's figures with its metadata, as <out>/<name>.json (the folder made if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({**meta, "figures": figures}, indent=1))


def run_line(meta: dict[str, Any], load: list[float]) -> str:
    """How a side-by-side report opens: when (UTC), the commit, the CPUs and the load over the run."""
    return (
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, commit {meta['commit']}, {meta['cpus']} CPUs, "
        f"load {min(load):.1f}-{max(load):.1f}; "
    )


def median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def pass_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    workers: dict[str, list[float]] = defaultdict(list)
    hits: dict[str, list[int]] = defaultdict(list)
    by_category: dict[str, list[float]] = defaultdict(list)
    bm25_common: list[float] = []
    for r in rows:
        for name, ms in r["worker_ms"].items():
            workers[name].append(ms)
        for name, n in r["worker_hits"].items():
            hits[name].append(n)
        by_category[r["category"]].append(r["total_ms"])
        if r["category"] == "common" and "bm25" in r["worker_ms"]:
            bm25_common.append(r["worker_ms"]["bm25"])
    answers = [r["answered"] for r in rows if r["answered"] is not None]
    return {
        "timings": {k: summary([r[k] for r in rows]) for k in TIMINGS},
        "workers": {k: summary(v) for k, v in sorted(workers.items())},
        "worker_mean_hits": {k: float(np.mean(v)) for k, v in sorted(hits.items())},
        "bm25_common": summary(bm25_common),
        "by_category": {k: summary(v) for k, v in sorted(by_category.items())},
        "answered": {"asked": len(answers), "hit_at_k": sum(answers)},
        "failed_queries": sum(1 for r in rows if r["failed"]),
        "deadline_queries": sum(1 for r in rows if r["finish"] == "deadline"),
        "fast_path_queries": sum(1 for r in rows if r["relevance_fast_path"]),
    }


def target(name: str, value: float | None, limit: float, unit: str, *, at_least: bool = False) -> dict[str, Any]:
    if value is None:
        return {"name": name, "value": None, "target": limit, "unit": unit, "met": None, "note": "not measured"}
    met = value >= limit if at_least else value <= limit
    miss = (limit - value) if at_least else (value - limit)
    note = "met" if met else f"missed by {miss:.1f} {unit} ({miss / limit:.0%})"
    return {
        "name": name,
        "value": value,
        "target": limit,
        "unit": unit,
        "met": met,
        "note": note,
        "direction": ">=" if at_least else "<=",
    }


# The latency passes and CPU passes (phases.latency_passes, phases.cpu_cost), in the tables' order.
LATENCY_MODES = (
    ("v4", "V4 retrieval-only"),
    ("v4_lean", "V4 retrieval-only, no candidate list (candidates=False)"),
    ("v3", "V3 (v4=False)"),
    ("v4_ranked", "V4 with ranking"),
)


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {"passes": {m: pass_summary(rows) for m, rows in results["passes"].items()}}
    conc = results["concurrency"]
    s["concurrency"] = {
        "queries": len(conc),
        "concurrent_ms": summary([r["concurrent_ms"] for r in conc]),
        "sequential_ms": summary([r["sequential_ms"] for r in conc]),
        "worker_sum_ms": summary([r["worker_sum_ms"] for r in conc]),
        "median_ratio": median([r["sequential_ms"] / r["concurrent_ms"] for r in conc]),
        "noop_concurrent_ms": summary([r["noop_concurrent_ms"] for r in conc]),
        "workers_per_query": median([len(r["workers"]) for r in conc]),
    }
    modes: dict[tuple[str, bool], list[dict[str, Any]]] = defaultdict(list)
    for r in results.get("plan_modes", []):
        modes[(r["worker"], r["typed"])].append(r)
    rls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results.get("rls", []):
        rls[r["worker"]].append(r)
    s["rls"] = [
        {
            "worker": w,
            "app_ms": summary([r["app_ms"] for r in rows]),
            "owner_ms": summary([r["owner_ms"] for r in rows]),
            "common_app_ms": summary([r["app_ms"] for r in rows if r["category"] == "common"]),
            "common_owner_ms": summary([r["owner_ms"] for r in rows if r["category"] == "common"]),
        }
        for w, rows in sorted(rls.items())
    ]
    s["plan_modes"] = [
        {
            "worker": w,
            "typed": typed,
            "custom_ms": summary([r["custom_ms"] for r in rows]),
            "generic_ms": summary([r["generic_ms"] for r in rows]),
        }
        for (w, typed), rows in sorted(modes.items())
    ]
    bm = results["bm25_vs_tsrank"]
    s["bm25_vs_tsrank"] = {}
    for label, rows in (("all", bm), ("common", [r for r in bm if r["category"] == "common"])):
        s["bm25_vs_tsrank"][label] = {
            "queries": len(rows),
            "bm25_ms": summary([r["bm25_ms"] for r in rows]),
            "tsrank_ms": summary([r["tsrank_ms"] for r in rows]),
            "median_ratio": median([r["tsrank_ms"] / r["bm25_ms"] for r in rows]),
        }
    if "v4_hnsw" in results["passes"]:  # the same queries, vector worker on HNSW for every tenant
        a, b = results["passes"]["v4"], results["passes"]["v4_hnsw"]
        vec = [
            (x["worker_ms"]["vector"], y["worker_ms"]["vector"])
            for x, y in zip(a, b, strict=True)
            if "vector" in x["worker_ms"] and "vector" in y["worker_ms"]
        ]
        s["exact_vs_hnsw"] = {
            "total_median_ratio": median([y["total_ms"] / x["total_ms"] for x, y in zip(a, b, strict=True)]),
            "vector_ms": summary([x for x, _ in vec]),
            "hnsw_vector_ms": summary([y for _, y in vec]),
            "vector_median_ratio": median([y / x for x, y in vec]),
        }
    model = results.get("model") or {}
    if "rows" in model:
        s["model"] = {
            m: {
                "total_ms": summary([r["total_ms"] for r in rows]),
                "embedding_ms": summary([r["embedding_ms"] for r in rows]),
            }
            for m, rows in model["rows"].items()
        }
    ing = results["ingest"]
    if "skipped" not in ing:
        rss = {round(x["fraction"], 1): x["rss_mb"] for x in ing["rss"]}
        growth = rss.get(1.0, 0) - rss.get(0.1, 0)
        s["ingest_memory"] = {
            "rss_10_mb": rss.get(0.1),
            "rss_50_mb": rss.get(0.5),
            "rss_100_mb": rss.get(1.0),
            "growth_mb": growth,
            "bytes_per_memory": growth * 2**20 / max(1, 0.9 * ing["records"]),
            "flat": rss.get(0.1) is not None and growth <= FLAT_TOLERANCE * rss[0.1],
        }

    v4 = s["passes"]["v4"]
    bm25 = (v4["workers"].get("bm25") or {}).get("p95")
    s["targets"] = [
        target(
            "V4 retrieval-only, DB part (total_ms, embedding supplied) p50", v4["timings"]["total_ms"]["p50"], 15, "ms"
        ),
        target(
            "V4 retrieval-only, DB part (total_ms, embedding supplied) p95", v4["timings"]["total_ms"]["p95"], 30, "ms"
        ),
        target(
            "End to end with the real query embedding p95, retrieval-only, no candidate list (issue 17)",
            (s.get("model", {}).get("v4_lean", {}).get("total_ms") or {}).get("p95"),
            20,
            "ms",
        ),
        target(
            "End to end with the real query embedding p95, retrieval-only with the candidate list",
            (s.get("model", {}).get("v4", {}).get("total_ms") or {}).get("p95"),
            50,
            "ms",
        ),
        target("BM25 worker p95 (in the query, all queries)", bm25, 10, "ms"),
        target("BM25 worker p95 (in the query, common-word queries)", (v4["bm25_common"] or {}).get("p95"), 10, "ms"),
        target(
            "BM25 statement p95 (isolated, common-word queries)",
            (s["bm25_vs_tsrank"]["common"]["bm25_ms"] or {}).get("p95"),
            10,
            "ms",
        ),
    ]
    if "skipped" in ing:
        return s
    s["targets"] += [
        target(
            "Ingestion, vectors supplied (library time only)", ing["library_rate"], 2000, "memories/s", at_least=True
        ),
        target(
            "Ingestion, vectors supplied (wall, incl. corpus generation)",
            ing["rate"],
            2000,
            "memories/s",
            at_least=True,
        ),
    ]
    flat = s["ingest_memory"]
    s["targets"].append(
        {
            "name": "Ingest memory flat in N (RSS 10% -> 100%)",
            "value": flat["growth_mb"],
            "target": f"<= {FLAT_TOLERANCE:.0%} of RSS at 10%",
            "unit": "MB",
            "met": flat["flat"],
            "note": "met"
            if flat["flat"]
            else f"grew {flat['growth_mb']:.1f} MB ({flat['bytes_per_memory']:.0f} bytes per memory)",
        }
    )
    return s


# -- Markdown ------------------------------------------------------------------------------------


def f(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(f(c) for c in row) + " |" for row in rows]
    return out + [""]


def pct_row(label: str, st: dict[str, float] | None, *extra: Any) -> list[Any]:
    st = st or {}
    return [label, st.get("p50"), st.get("p95"), st.get("p99"), st.get("n"), *extra]


def markdown(results: dict[str, Any]) -> str:
    s, ing, env = results["summary"], results["ingest"], results["environment"]
    args = results["args"]
    L: list[str] = [f"# memoria-pg scale benchmark: {args['n']:,} memories", ""]
    L += [
        f"Run {results['started']} on {env['cpus']} CPUs, PostgreSQL {env['server']['server_version']} "
        f"(shared_buffers {env['server']['shared_buffers']}, work_mem {env['server']['work_mem']}, "
        f"jit {env['server']['jit']}), extensions {env['server']['extensions']}; git {env['git_head']}"
        + (
            f" with uncommitted changes in {', '.join(env['uncommitted_library_files'])}"
            if env["uncommitted_library_files"]
            else ""
        )
        + ".",
        f"Database `{results['database']}`; {args['tenants']} tenants, seed {args['seed']}, "
        + (
            "the corpus an earlier run stored (--reuse: its profile is that run's), "
            if args.get("reuse")
            else f"corpus profile {args.get('profile', 'short')} (benchmarks/corpus.py), "
        )
        + f"{len(results['passes']['v4'])} queries. Graph backend: SQL (recursive CTE; AGE graph not created).",
        "",
        "**Vectors are synthetic**: HashEmbedder bag-of-words vectors (hashed tokens, unit length), not the "
        "real model, for both memories and queries, except in the 'real embedding' section, where queries are "
        "embedded by all-MiniLM-L6-v2 on CPU (those vectors do not match the stored ones: latency only). "
        "The client runs on the same machine as the server.",
        "",
    ]

    if results.get("load"):
        busy = [ph for ph in results["load"] if ph["load_mean"] > ph["cpus"]]
        L += [
            f"Machine load (1-minute load average, {results['load'][0]['cpus']} CPUs) per phase: "
            + ", ".join(f"{ph['phase']} {ph['load_mean']:.1f} (max {ph['load_max']:.1f})" for ph in results["load"])
            + (
                ". **The machine was shared: phases with a load above the CPU count ran with other work "
                "competing for the CPUs, so their timings are pessimistic.**"
                if busy
                else "."
            ),
            "",
        ]
    L += ["## Targets", ""]
    L += table(
        ["target", "measured", "goal", "result"],
        [
            [t["name"], f"{f(t['value'])} {t['unit']}", f"{t.get('direction', '')} {t['target']}", t["note"]]
            for t in s["targets"]
        ],
    )

    L += ["## Ingestion (MemorySystem.store_many, indexes in place)", ""]
    if "skipped" in ing:
        L += [f"Not measured in this run: {ing['skipped']}.", ""]
    L += _ingestion(s, ing, env.get("cpus") or 1) if "skipped" not in ing else []
    return _rest(results, L)


def _ingestion(s: dict[str, Any], ing: dict[str, Any], cpus: int) -> list[str]:
    L: list[str] = []
    L += table(
        [
            "memories",
            "inserted",
            "duplicates",
            "wall s",
            "memories/s (wall)",
            "library s",
            "memories/s (library)",
            "generate s",
            "prepare s (Python)",
            "write s (COPY+SQL)",
            "VACUUM ANALYZE s",
        ],
        [
            [
                ing["records"],
                ing["inserted"],
                ing["duplicates"],
                ing["elapsed_s"],
                ing["rate"],
                ing["library_s"],
                ing["library_rate"],
                ing["generate_s"],
                ing["prepare_s"],
                ing["write_s"],
                ing.get("vacuum_analyze_s"),
            ]
        ],
    )
    built = ing.get("vector_indexes")
    if built:
        L += [
            f"Then `memoria-pg db vector-indexes` (MemorySystem.sync_vector_indexes): {built['built']} per-tenant "
            f"HNSW indexes built in {built['seconds']:.1f} s (each (tenant, memory type) above vector_exact_max_rows).",
            "",
        ]
    steps = ing.get("write_steps_s", {})
    if steps:
        L += [
            "Where the write time goes (seconds, summed over batches; insert_memories includes the GIN, "
            "b-tree and per-tenant HNSW inserts of the memories partitions):",
            "",
        ]
        L += table(list(steps), [[v for v in steps.values()]])
    icpu = ing.get("cpu") or {}
    if icpu.get("client_s") is not None:
        server = icpu.get("server_s")
        per = (icpu["client_s"] + (server or 0.0)) / max(1, ing["records"])
        L += [
            f"CPU during ingestion: this process {icpu['client_s']:.1f} s, PostgreSQL backends "
            f"{f(server)} s, i.e. {per * 1000:.2f} ms per memory: on an idle machine ingestion tops out near "
            f"{1 / per:,.0f} memories/s per busy core ({ing.get('writers') or 1} writer connection(s) here; "
            f"{cpus / per:,.0f}/s if all {cpus} cores were kept busy)."
            if per
            else "",
            "",
        ]
    L += [
        "Rate per tenth of the stream (memories/s): "
        + ", ".join(f"{d['fraction']:.0%}: {d['rate']:,.0f}" for d in ing["deciles"]),
        "",
    ]
    m = s["ingest_memory"]
    L += table(
        [
            "RSS at start MB",
            "at 10% MB",
            "at 50% MB",
            "at 100% MB",
            "peak (getrusage) MB",
            "growth 10->100%",
            "bytes/memory",
        ],
        [
            [
                ing["rss_start_mb"],
                m["rss_10_mb"],
                m["rss_50_mb"],
                m["rss_100_mb"],
                ing["peak_rss_mb"],
                m["growth_mb"],
                m["bytes_per_memory"],
            ]
        ],
    )
    return L


def _rest(results: dict[str, Any], L: list[str]) -> str:
    s, env, cor = results["summary"], results["environment"], results["corpus"]
    c = cor["counts"]
    L += [
        "Corpus: "
        + ", ".join(f"{k} {v:,}" for k, v in c.items())
        + f"; per type {cor['by_type']}; memories per tenant {cor['tenants']['min']:,}..{cor['tenants']['max']:,}; "
        f"database {cor['db_size_mb']:,.0f} MB (HNSW {cor['hnsw_mb']:,.0f} MB). Most common terms (df): "
        + ", ".join(f"{t} {n:,}" for t, n in cor["most_common_terms"])
        + ".",
        "",
    ]

    L += ["## Query latency, embedding supplied (ms)", ""]
    rows = []
    for mode, label in LATENCY_MODES:
        if mode not in s["passes"]:  # a run made before the mode was measured
            continue
        t = s["passes"][mode]["timings"]
        rows.append(pct_row(f"{label}: total_ms (DB part end to end)", t["total_ms"]))
        if mode == "v3":  # V3's search runs in its final CTE's statement (candidates.v3_statement)
            rows.append(pct_row(f"{label}: database_ms (search and final CTE, one statement)", t["database_ms"]))
            continue
        rows.append(pct_row(f"{label}: retrieval_ms (workers)", t["retrieval_ms"]))
        rows.append(pct_row(f"{label}: database_ms (final CTE)", t["database_ms"]))
    if "v4_hnsw" in s["passes"]:
        t = s["passes"]["v4_hnsw"]["timings"]
        rows.append(
            pct_row(
                "V4 retrieval-only, vector on its HNSW form only (vector_exact_max_rows=0: the own index where built, else exact): total_ms",
                t["total_ms"],
            )
        )
        rows.append(
            pct_row("V4 retrieval-only, vector on its HNSW form only: retrieval_ms (workers)", t["retrieval_ms"])
        )
    rows.append(
        pct_row(
            "V4 retrieval-only: query processing (Python + entity lookup)",
            s["passes"]["v4"]["timings"]["processing_ms"],
        )
    )
    rows.append(pct_row("V4 with ranking: ranking_ms", s["passes"]["v4_ranked"]["timings"]["ranking_ms"]))
    L += table(["metric", "p50", "p95", "p99", "n"], rows)

    v4 = s["passes"]["v4"]
    cpu = results.get("cpu")
    if cpu:
        cores = env["cpus"] or 1
        L += ["### CPU per query (this process + the PostgreSQL backends; load-independent, unlike wall time)", ""]
        rows = []
        for mode, label in LATENCY_MODES:
            if mode not in cpu:
                continue
            c = cpu[mode]
            total = c["client_cpu_ms"] + (c["server_cpu_ms"] or 0.0)
            rows.append(
                [
                    label,
                    c["wall_ms"],
                    c["client_cpu_ms"],
                    c["server_cpu_ms"],
                    total,
                    total / cores,
                    cores * 1000 / total if total else None,
                ]
            )
        L += table(
            [
                "mode (sequential pass)",
                "wall ms/query",
                "client CPU ms",
                "server CPU ms",
                "total CPU ms",
                f"CPU / {cores} cores",
                "CPU-bound queries/s",
            ],
            rows,
        )
        L += [
            f"On an idle {cores}-core machine a query's latency lies between its total CPU divided by the cores "
            "(perfect overlap of the concurrent workers) and its total CPU (none), plus network round trips; "
            "the last column is the throughput ceiling the CPU allows.",
            "",
        ]
    L += ["### Per worker, inside V4 queries (diagnostics.worker_ms: pool checkout + tenant + statement + fetch)", ""]
    L += table(
        ["worker", "p50", "p95", "p99", "queries", "mean hits"],
        [pct_row(w, st, v4["worker_mean_hits"].get(w)) for w, st in v4["workers"].items()]
        + [pct_row("bm25 on common-word queries", v4["bm25_common"], None)],
    )
    L += ["### V4 retrieval-only total_ms by query category", ""]
    L += table(["category", "p50", "p95", "p99", "n"], [pct_row(k, v) for k, v in v4["by_category"].items()])
    a4, a3 = v4["answered"], s["passes"]["v3"]["answered"]
    L += [
        f"Sanity check (attribute questions whose known answer is in the top {10}): V4 "
        f"{a4['hit_at_k']}/{a4['asked']}, V3 {a3['hit_at_k']}/{a3['asked']} (hash vectors). "
        f"Queries with a failed worker: {v4['failed_queries']}; deadline hits: {v4['deadline_queries']}; "
        f"relevance fast path: {v4['fast_path_queries']}.",
        "",
    ]

    L += ["## Side by side (medians, same run, same queries)", ""]
    p4, p3 = s["passes"]["v4"]["timings"], s["passes"]["v3"]["timings"]
    cc, bt = s["concurrency"], s["bm25_vs_tsrank"]
    side = [
        [
            "V4 retrieval-only (A) vs V3 (B), total_ms",
            p4["total_ms"]["p50"],
            p3["total_ms"]["p50"],
            ratio(p3["total_ms"]["p50"], p4["total_ms"]["p50"]),
            p4["total_ms"]["p95"],
            p3["total_ms"]["p95"],
        ],
        [
            "workers concurrent, Scheduler.run (A) vs sequential, run_sequential (B)",
            cc["concurrent_ms"]["p50"],
            cc["sequential_ms"]["p50"],
            ratio(cc["sequential_ms"]["p50"], cc["concurrent_ms"]["p50"]),
            cc["concurrent_ms"]["p95"],
            cc["sequential_ms"]["p95"],
        ],
        [
            "BM25 worker (A) vs ts_rank_cd baseline (B), all queries with tokens",
            bt["all"]["bm25_ms"]["p50"],
            bt["all"]["tsrank_ms"]["p50"],
            ratio(bt["all"]["tsrank_ms"]["p50"], bt["all"]["bm25_ms"]["p50"]),
            bt["all"]["bm25_ms"]["p95"],
            bt["all"]["tsrank_ms"]["p95"],
        ],
        [
            "BM25 worker (A) vs ts_rank_cd baseline (B), common-word queries",
            (bt["common"]["bm25_ms"] or {}).get("p50"),
            (bt["common"]["tsrank_ms"] or {}).get("p50"),
            ratio((bt["common"]["tsrank_ms"] or {}).get("p50"), (bt["common"]["bm25_ms"] or {}).get("p50")),
            (bt["common"]["bm25_ms"] or {}).get("p95"),
            (bt["common"]["tsrank_ms"] or {}).get("p95"),
        ],
    ]
    if "v4_lean" in s["passes"]:
        pl = s["passes"]["v4_lean"]["timings"]
        side.append(
            [
                "V4 retrieval-only with the candidate list (A) vs without it, candidates=False (B), total_ms",
                p4["total_ms"]["p50"],
                pl["total_ms"]["p50"],
                ratio(pl["total_ms"]["p50"], p4["total_ms"]["p50"]),
                p4["total_ms"]["p95"],
                pl["total_ms"]["p95"],
            ]
        )
    ev = s.get("exact_vs_hnsw")
    if ev:
        ph = s["passes"]["v4_hnsw"]
        side += [
            [
                "V4 retrieval-only (A) vs the same with the vector worker on HNSW only (B), total_ms",
                p4["total_ms"]["p50"],
                ph["timings"]["total_ms"]["p50"],
                ratio(ph["timings"]["total_ms"]["p50"], p4["total_ms"]["p50"]),
                p4["total_ms"]["p95"],
                ph["timings"]["total_ms"]["p95"],
            ],
            [
                "vector worker in those queries: exact below vector_exact_max_rows (A) vs HNSW only (B)",
                ev["vector_ms"]["p50"],
                ev["hnsw_vector_ms"]["p50"],
                ratio(ev["hnsw_vector_ms"]["p50"], ev["vector_ms"]["p50"]),
                ev["vector_ms"]["p95"],
                ev["hnsw_vector_ms"]["p95"],
            ],
        ]
    L += table(["comparison", "A median ms", "B median ms", "B / A", "A p95", "B p95"], side)
    if ev:
        L += [
            f"Median per-query ratio, HNSW only / as configured: total_ms {f(ev['total_median_ratio'], 2)}, "
            f"vector worker {f(ev['vector_median_ratio'], 2)}.",
            "",
        ]
    L += [
        f"Scheduler overhead: `Scheduler.run` with the same number of no-op tasks (median "
        f"{f(cc['workers_per_query'], 0)} per query: pool checkout, then the settings sent with the Sync of "
        f"the pipeline's implicit transaction, one round trip) takes "
        f"p50 {f(cc['noop_concurrent_ms']['p50'])} ms, p95 {f(cc['noop_concurrent_ms']['p95'])} ms.",
        "",
    ]
    L += [
        f"Concurrent vs sequential over {cc['queries']} queries: median per-query ratio sequential/concurrent "
        f"{f(cc['median_ratio'], 2)}; the concurrent workers' summed time has median "
        f"{f(cc['worker_sum_ms']['p50'])} ms. BM25 vs ts_rank_cd median per-query ratio "
        f"{f(bt['all']['median_ratio'], 2)} (all), {f(bt['common']['median_ratio'], 2)} (common-word).",
        "",
    ]

    if s.get("plan_modes"):
        L += ["### Custom vs generic plans per worker (same statements, `SET LOCAL plan_cache_mode`)", ""]
        L += table(
            ["worker", "shard", "custom p50", "custom p95", "generic p50", "generic p95", "generic/custom p50"],
            [
                [
                    m["worker"],
                    "typed" if m["typed"] else "*",
                    m["custom_ms"]["p50"],
                    m["custom_ms"]["p95"],
                    m["generic_ms"]["p50"],
                    m["generic_ms"]["p95"],
                    ratio(m["generic_ms"]["p50"], m["custom_ms"]["p50"]),
                ]
                for m in s["plan_modes"]
            ],
        )
    if s.get("rls"):
        L += [
            "### Row-level security cost per worker (statements alone; app role with RLS vs superuser, "
            "both filtering on the tenant)",
            "",
        ]
        L += table(
            [
                "worker",
                "app p50",
                "app p95",
                "superuser p50",
                "superuser p95",
                "app/superuser p50",
                "common-word: app p50",
                "superuser p50",
            ],
            [
                [
                    m["worker"],
                    m["app_ms"]["p50"],
                    m["app_ms"]["p95"],
                    m["owner_ms"]["p50"],
                    m["owner_ms"]["p95"],
                    ratio(m["app_ms"]["p50"], m["owner_ms"]["p50"]),
                    (m["common_app_ms"] or {}).get("p50"),
                    (m["common_owner_ms"] or {}).get("p50"),
                ]
                for m in s["rls"]
            ],
        )
    L += ["## Throughput (V4 retrieval-only, embedding supplied; one MemorySystem, pool max_size 48)", ""]
    L += table(
        ["client threads", "queries", "queries/s", "latency p50 ms", "p95 ms", "p99 ms", "with failed worker"],
        [
            [
                t["threads"],
                t["queries"],
                t["qps"],
                t["latency"]["p50"],
                t["latency"]["p95"],
                t["latency"]["p99"],
                t["queries_with_failed_workers"],
            ]
            for t in results["throughput"]
        ],
    )

    L += ["## End to end with the real query embedding (all-MiniLM-L6-v2, CPU, no query cache)", ""]
    model = results.get("model") or {}
    if "skipped" in model:
        L += [f"Skipped: {model['skipped']}", ""]
    elif "model" in s:
        rows = []
        refused = model.get("int8_refused")
        L += [
            f"The library's own embedder as configured: `embedding_backend` {model.get('backend', '?')}, "
            f"{model.get('model', '?')}"
            + (f" (the int8 graph was not used on this host: {refused})" if refused else "")
            + "; the three calls take turns query by query.",
            "",
        ]
        for mode, label in (
            ("v4_lean", "V4 retrieval-only, no candidate list (REST, MCP, CLI)"),
            ("v4", "V4 retrieval-only, with the candidate list"),
            ("v4_ranked", "V4 with ranking (the library's default call)"),
        ):
            if mode in s["model"]:
                rows.append(pct_row(f"{label}: total_ms", s["model"][mode]["total_ms"]))
                rows.append(pct_row(f"{label}: embedding_ms", s["model"][mode]["embedding_ms"]))
        L += table(["metric", "p50", "p95", "p99", "n"], rows)
    else:
        L += ["Not run (--no-model).", ""]

    L += ["## EXPLAIN ANALYZE evidence (slowest query per worker; full plans in plans.md)", ""]
    L += table(
        ["what", "query", "shard", "in-query ms", "server planning+execution ms", "scans"],
        [
            [
                p["what"],
                p["query"][:50],
                p["shard"] or "*",
                p["in_query_worker_ms"],
                p["execution_ms"],
                _top_node(p["plan"]),
            ]
            for p in results["plans"]
        ],
    )
    cache = [c for c in results.get("plan_cache", []) if c["generic_plans"]]
    L += [
        "Prepared statements on the pool's connections (psycopg prepares a statement after 5 executions; "
        "the server may then switch to a generic plan): "
        + (
            "; ".join(
                f"`{c['statement'][:60]}...` generic {c['generic_plans']}, custom {c['custom_plans']}"
                for c in cache[:6]
            )
            if cache
            else "no generic plans were used"
        )
        + ".",
        "",
    ]
    return "\n".join(L)


def _top_node(plan: list[str]) -> str:
    """The plan's scan nodes (what each statement reads), deduplicated, for the summary table."""
    scans: list[str] = []
    for line in plan:
        node = line.strip().removeprefix("->").strip().split("  (")[0]
        if "Scan" in node and not node.startswith("CTE Scan") and node not in scans:
            scans.append(
                node.replace(" on ", " ")
                .replace("Index Only Scan using", "IOS")
                .replace("Index Scan using", "IS")
                .replace("Bitmap Heap Scan", "BHS")
                .replace("Bitmap Index Scan", "BIS")
                .replace("Seq Scan", "Seq")
            )
    extra = f" (+{len(scans) - 3})" if len(scans) > 3 else ""
    return ("; ".join(scans[:3]) + extra).replace("|", "/") or "?"


def plans_markdown(plans: list[dict[str, Any]]) -> str:
    out = ["# EXPLAIN (ANALYZE, BUFFERS) of the slowest statements", ""]
    for p in plans:
        out += [
            f"## {p['what']}: {p['query']!r} (tenant {p['tenant']}, shard {p['shard'] or '*'}, {p['category']})",
            "",
            f"In the query: {f(p['in_query_worker_ms'])} ms; server planning + execution: {f(p['execution_ms'])} ms.",
            "",
            "```",
            *p["plan"],
            "```",
            "",
        ]
    return "\n".join(out)
