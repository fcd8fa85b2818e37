"""Query embedding benchmark: torch (sentence-transformers) vs ONNX Runtime (float, int8), side by side.

    python benchmarks/embedding.py [--queries 200] [--backends torch,onnx,onnx-int8] [--out results/embedding]
    python benchmarks/embedding.py --parity [--cache-dir ~/.cache/memoria-pg/eval]   # vectors per eval set

Latency: the scale benchmark's queries (benchmarks/corpus.py, seed 7, 10 tenants), each embedded alone
(as MemorySystem.query does: one text, one thread) by every backend in turn, the order rotated per
query so that the machine's load falls on all alike. Wall and CPU (this thread's) per query.

With --e2e-dsn (a database built by benchmarks/scale.py, at head), the same queries also run end to end
(MemorySystem.query, no vector supplied, a one-entry query cache so every query embeds) per backend.

Parity (--parity): the embedding cache files of the evaluation harness (evals/cache.py: one per set
and backend, keyed by a hash of each text) joined on their keys: 1 - cosine between the torch vector
and the ONNX one of every text both hold.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import corpus
import numpy as np
import report
from timing import LoadMonitor, log

from memoria_pg import Config, MemorySystem
from memoria_pg.core.text import normalize

BACKENDS = ("torch", "onnx", "onnx-int8")
SETS = ("locomo", "scifact", "hotpotqa", "longmemeval", "msmarco")


def make_embedder(backend: str) -> Any:
    if backend == "torch":
        from memoria_pg import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    from memoria_pg.core.embedding_onnx import OnnxEmbedder

    return OnnxEmbedder(quantized=backend == "onnx-int8")


def latency(embedders: dict[str, Any], texts: list[str], rounds: int) -> dict[str, dict[str, list[float]]]:
    """{backend: {"wall_ms": [...], "cpu_ms": [...]}}, every text embedded alone by every backend."""
    names = list(embedders)
    out: dict[str, dict[str, list[float]]] = {n: {"wall_ms": [], "cpu_ms": []} for n in names}
    for name in names:  # warm-up
        for text in ("warm up the model", "a second warm-up sentence", "and a third one"):
            embedders[name].embed([text])
    for r, (i, text) in itertools.product(range(rounds), enumerate(texts)):
        shift = (i + r) % len(names)
        for name in names[shift:] + names[:shift]:
            c0, t0 = time.thread_time(), time.perf_counter()
            embedders[name].embed([text])
            out[name]["wall_ms"].append((time.perf_counter() - t0) * 1000)
            out[name]["cpu_ms"].append((time.thread_time() - c0) * 1000)
    return out


def end_to_end(embedders: dict[str, Any], queries: list[corpus.Query], dsn: str) -> dict[str, Any]:
    """MemorySystem.query per backend, alternating per query: total wall, and the diagnostics' embedding_ms."""
    config = Config(dsn=dsn, query_cache_size=1)
    systems = {n: MemorySystem(config, embedder=e, auto_migrate=False) for n, e in embedders.items()}
    names = list(systems)
    out: dict[str, dict[str, list[float]]] = {n: {"wall_ms": [], "embedding_ms": [], "total_ms": []} for n in names}
    try:
        for name in names:
            systems[name].query("warm up", tenant=queries[0].tenant)
        for i, q in enumerate(queries):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                r = systems[name].query(q.text, tenant=q.tenant, memory_type=q.memory_type)
                out[name]["wall_ms"].append((time.perf_counter() - t0) * 1000)
                d = r.diagnostics.as_dict()
                out[name]["embedding_ms"].append(float(d.get("embedding_ms") or 0.0))
                out[name]["total_ms"].append(float(d.get("total_ms") or 0.0))
    finally:
        for system in systems.values():
            system.close()
    return {n: {k: report.summary(v) for k, v in series.items()} for n, series in out.items()}


def parity(cache_dir: Path, backends: list[str]) -> dict[str, dict[str, Any]]:
    """Per set and ONNX backend: 1 - cosine to the torch vector of the same text (keys joined)."""
    out: dict[str, dict[str, Any]] = {}
    for name in SETS:
        torch_path = cache_dir / f"{name}-all-MiniLM-L6-v2.npz"
        if not torch_path.exists():
            continue
        base = _load_cache(torch_path)
        out[name] = {"torch_texts": len(base)}
        for backend in backends:
            path = cache_dir / f"{name}-all-MiniLM-L6-v2-{backend}.npz"
            if not path.exists():
                continue
            other = _load_cache(path)
            common = sorted(set(base) & set(other))
            a = np.stack([base[k] for k in common])
            b = np.stack([other[k] for k in common])
            diff = 1.0 - (a * b).sum(axis=1)
            out[name][backend] = {
                "texts": len(common),
                "max": float(diff.max()),
                "mean": float(diff.mean()),
                "p99": float(np.percentile(diff, 99)),
            }
    return out


def _load_cache(path: Path) -> dict[bytes, np.ndarray]:
    with np.load(path) as data:
        return {bytes(k): v for k, v in zip(data["keys"], data["vectors"].astype(np.float32))}


def git_state() -> str:
    def run(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()

    dirty = run("git", "status", "--porcelain", "--", "memoria_pg")
    return run("git", "rev-parse", "--short", "HEAD") + (" with uncommitted changes in memoria_pg/" if dirty else "")


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    L = [
        "# Query embedding: torch vs ONNX Runtime",
        "",
        f"Run {results['started']} on {env['cpus']} CPUs ({env['cpu']}); git {env['git']}; onnxruntime "
        f"{env.get('onnxruntime')}, torch {env.get('torch')}. Machine load (1-minute average): "
        + ", ".join(f"{p['phase']} {p['load_mean']:.1f} (max {p['load_max']:.1f})" for p in results["load"])
        + (
            f". The load was above the {env['cpus']} CPUs: other work shared them, so absolute figures are pessimistic"
            if max(p["load_max"] for p in results["load"]) > (env["cpus"] or 1)
            else ""
        )
        + ". The ratios come from the same queries, the backends alternating per query.",
        "",
    ]
    lat = results.get("latency")
    if lat:
        L += [
            f"## One query embedded alone ({lat['queries']} scale-benchmark queries x {lat['rounds']} rounds)",
            "",
            "| backend | p50 ms | p95 ms | p99 ms | mean ms | CPU ms/query (mean) | p50 vs torch | p95 vs torch |",
            "|---|---|---|---|---|---|---|---|",
        ]
        base = lat["backends"].get("torch", {}).get("wall_ms")
        for name, s in lat["backends"].items():
            w, c = s["wall_ms"], s["cpu_ms"]
            L.append(
                f"| {name} | {w['p50']:.2f} | {w['p95']:.2f} | {w['p99']:.2f} | {w['mean']:.2f} | {c['mean']:.2f} | "
                f"{_ratio(base, w, 'p50')} | {_ratio(base, w, 'p95')} |"
            )
        L.append("")
    L += _e2e_md(results.get("end_to_end")) + _parity_md(results.get("parity"))
    return "\n".join(L) + "\n"


def _ratio(base: dict[str, float] | None, s: dict[str, float], key: str) -> str:
    return f"{s[key] / base[key]:.2f}x" if base and base[key] else "-"


def _e2e_md(e2e: dict[str, Any] | None) -> list[str]:
    if not e2e:
        return []
    L = [
        f"## End to end with the real query embedding ({e2e['database']}, {e2e['queries']} queries, alternating)",
        "",
        "| backend | wall p50 ms | wall p95 ms | embedding p50 ms | embedding p95 ms | total_ms p95 (diagnostics, embedding included) |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in e2e["backends"].items():
        w, e, t = s["wall_ms"], s["embedding_ms"], s["total_ms"]
        L.append(f"| {name} | {w['p50']:.1f} | {w['p95']:.1f} | {e['p50']:.2f} | {e['p95']:.2f} | {t['p95']:.1f} |")
    return [*L, ""]


def _parity_md(par: dict[str, Any] | None) -> list[str]:
    if not par:
        return []
    L = [
        "## Parity of the vectors (every text of each evaluation set, 1 - cosine to torch's vector)",
        "",
        "| set | backend | texts | max | p99 | mean |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in par.items():
        for backend in BACKENDS[1:]:
            if backend in row:
                s = row[backend]
                L.append(f"| {name} | {backend} | {s['texts']:,} | {s['max']:.2e} | {s['p99']:.2e} | {s['mean']:.2e} |")
    return [*L, ""]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2, help="passes over the queries")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--e2e-dsn", help="a scale-benchmark database (at head) to also query end to end")
    p.add_argument("--parity", action="store_true", help="also compare the eval sets' cached vectors")
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "memoria-pg" / "eval"))
    p.add_argument("--out", default="results/embedding")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    load = LoadMonitor()
    started = time.strftime("%Y%m%dT%H%M%S")
    results: dict[str, Any] = {"started": started, "environment": environment()}
    queries = corpus.queries(args.queries, seed=7, n_tenants=10)
    embedders: dict[str, Any] = {}
    if not args.no_latency or args.e2e_dsn:
        with load.phase("load the models"):
            embedders = {b: make_embedder(b) for b in backends}
    if not args.no_latency:
        with load.phase("query embedding latency"):
            raw = latency(embedders, [normalize(q.text) for q in queries], args.rounds)
        results["latency"] = {
            "queries": len(queries),
            "rounds": args.rounds,
            "backends": {n: {k: report.summary(v) for k, v in s.items()} for n, s in raw.items()},
        }
    if args.e2e_dsn:
        with load.phase("end to end"):
            results["end_to_end"] = {
                "database": args.e2e_dsn.rsplit("/", 1)[-1],
                "queries": len(queries),
                "backends": end_to_end(embedders, queries, args.e2e_dsn),
            }
    if args.parity:
        with load.phase("parity"):
            results["parity"] = parity(Path(args.cache_dir), [b for b in backends if b != "torch"])
    load.stop()
    results["load"] = load.phases
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{started}.json").write_text(json.dumps(results, indent=2))
    (out / f"{started}.md").write_text(markdown(results))
    log(f"wrote {out / started}.md")
    print(markdown(results))
    return 0


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"cpus": os.cpu_count(), "git": git_state(), "cpu": _cpu_model()}
    for module in ("onnxruntime", "torch"):
        try:
            env[module] = __import__(module).__version__
        except ImportError:
            env[module] = None
    return env


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
