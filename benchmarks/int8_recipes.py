"""Int8 recipes for the ONNX embedder (all-MiniLM-L6-v2) against the float graph: vector parity,
single-query latency and CPU, and the dense retrieval metric of every evaluation set.

    PYTHONPATH=. python benchmarks/int8_recipes.py [--recipes baseline,no-ffn-out,...] [--stages sensitivity,parity,latency,retrieval]
        [--retrieval-recipes R1,R2] [--per-set 600] [--queries 200] [--longmemeval-tenants N]

Every recipe is ONNX Runtime's dynamic quantization (`quantize_dynamic`: weights int8 ahead of time,
activations quantized per call, no calibration data) of the float graph that `ensure_onnx` exports
from the packaged model (nothing is downloaded), with different options or MatMul nodes left in float
(`nodes_to_exclude`). Each candidate graph is written to <onnx cache>/<model>/bench-int8-<recipe>.onnx.

Stages:
- sensitivity: the baseline recipe with one group of weight MatMuls left in float (each kind over the
  6 layers, and each layer), on a small sample (`--sensitivity-per-set` texts per set): which MatMuls
  carry the error.
- parity: `--per-set` texts drawn (seed 1) from each evaluation set's embedded texts (queries, memory
  contents, content + context, as evals/runner.embed makes them), 1 - cosine between the float graph's
  vector (read from the evaluation's cache, <eval cache>/<set>-all-MiniLM-L6-v2-onnx.npz) and each recipe's.
- latency: `--queries` evaluation queries (short), each embedded alone by the float graph and every
  recipe in turn (order rotated per query), one ONNX Runtime thread as OnnxEmbedder does for a query;
  wall p50/p95 and the calling thread's CPU (time.thread_time) per query.
- retrieval: for `--retrieval-recipes`, every document and query of the five sets embedded by the recipe
  (cached in <eval cache>/<set>-all-MiniLM-L6-v2-onnx-int8-<recipe>.npz), ranked by exact cosine per
  tenant (evals.reference, ref_dense) and scored as the evaluation does; compared with the float
  graph's vectors from the evaluation's cache.

- throughput: `--throughput-per-set` memory texts per set embedded in batches (ingestion's path).

Writes results/embedding/<UTC timestamp>-int8-recipes.md and .json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEMORIA_EVAL_DATA") or "/work/shared/eval")
SETS = ("locomo", "scifact", "hotpotqa", "longmemeval", "msmarco")
KINDS = {
    "qkv": ("attention/self/query/", "attention/self/key/", "attention/self/value/"),
    "attn_out": ("attention/output/dense/",),
    "ffn_in": ("intermediate/dense/",),
    "ffn_out": ("/output/dense/MatMul",),  # the FFN's second projection (its input is GELU's output)
}
LAYERS = 6


def weight_matmuls(fp32: Path) -> list[str]:
    """Names of the MatMul nodes whose second input is a weight (initializer)."""
    import onnx

    model = onnx.load(str(fp32), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def of_kind(names: list[str], kind: str) -> list[str]:
    if kind == "ffn_out":
        return [n for n in names if n.endswith("/output/dense/MatMul") and "attention" not in n]
    return [n for n in names if any(p in n for p in KINDS[kind])]


def of_layer(names: list[str], layer: int) -> list[str]:
    return [n for n in names if f"/layer.{layer}/" in n]


def recipes(fp32: Path) -> dict[str, dict[str, Any]]:
    """Name -> quantize_dynamic options (besides the model paths). The baseline is the shipped recipe."""
    from onnxruntime.quantization import QuantType

    names = weight_matmuls(fp32)
    base = {"weight_type": QuantType.QInt8, "per_channel": True, "op_types_to_quantize": ["MatMul"]}
    last = of_layer(names, LAYERS - 1)
    ffn_out = of_kind(names, "ffn_out")
    out: dict[str, dict[str, Any]] = {
        "baseline": base,
        "per-tensor": {**base, "per_channel": False},
        "reduce-range": {**base, "reduce_range": True},
        "quint8": {**base, "weight_type": QuantType.QUInt8},
        "constb-only": {**base, "extra_options": {"MatMulConstBOnly": True}},
        "no-ffn-out": {**base, "nodes_to_exclude": ffn_out},
        "no-last-layer": {**base, "nodes_to_exclude": last},
        "no-ffn-out-last": {**base, "nodes_to_exclude": sorted(set(ffn_out) | set(last))},
    }
    for block in (32, 64, 128):
        out[f"nbits8-b{block}"] = {"nbits": True, "block_size": block, "accuracy_level": 4}
    # the same weights, dequantized and computed in float (weight-only quantization)
    out["nbits8-b128-fp32"] = {"nbits": True, "block_size": 128, "accuracy_level": 0}
    for kind in KINDS:
        out[f"sens-no-{kind}"] = {**base, "nodes_to_exclude": of_kind(names, kind)}
    for layer in range(LAYERS):
        out[f"sens-no-layer{layer}"] = {**base, "nodes_to_exclude": of_layer(names, layer)}
    return out


def add_derived(table: dict[str, dict[str, Any]], fp32: Path, spec: str) -> None:
    """--extra-recipes NAME=kind:ffn_out+layer:0+layer:5 (nodes left in float, over the baseline)."""
    names = weight_matmuls(fp32)
    for item in filter(None, spec.split(",")):
        name, _, parts = item.partition("=")
        excluded: set[str] = set()
        for part in parts.split("+"):
            what, _, value = part.partition(":")
            excluded |= set(of_kind(names, value) if what == "kind" else of_layer(names, int(value)))
        table[name] = {**table["baseline"], "nodes_to_exclude": sorted(excluded)}


def quantize_nbits8(fp32: Path, out: Path, *, block_size: int, accuracy_level: int, nodes_to_exclude=()) -> None:
    """Every weight MatMul as ONNX Runtime's MatMulNBits with 8-bit symmetric weights per block of
    `block_size` rows (its MatMulNBitsQuantizer, as the library's quantize_onnx runs it at block 128);
    accuracy_level 0 computes in float, 4 in int8 (activations quantized per row and block at run time)."""
    import onnx

    from memoria_pg.core.embedding_onnx import _nbits_quantizer

    q = _nbits_quantizer()(
        onnx.load(str(fp32)), bits=8, block_size=block_size, is_symmetric=True,
        accuracy_level=accuracy_level or None, nodes_to_exclude=list(nodes_to_exclude),
    )  # fmt: skip
    q.process()
    onnx.save(q.model.model, str(out))


def build(fp32: Path, name: str, options: dict[str, Any]) -> Path:
    from onnxruntime.quantization import quantize_dynamic

    out = fp32.with_name(f"bench-int8-{name}.onnx")
    if options.get("nbits") and not out.exists():
        quantize_nbits8(fp32, out, **{k: v for k, v in options.items() if k != "nbits"})
    if not out.exists():
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(fp32), str(out), **options)
        finally:
            root.setLevel(level)
    return out


def embedder(graph: Path | None):
    """An OnnxEmbedder running `graph` (None: the float graph)."""
    from memoria_pg.core.embedding_onnx import OnnxEmbedder

    e = OnnxEmbedder(quantized=False)
    if graph is not None:
        e.graph = graph
        e._single = e._session(1)
        e._batch = None
        e.name = f"{e.folder.name}-{graph.stem}"
    return e


def set_texts(dataset) -> tuple[list[str], list[str]]:
    """(memory texts, query texts) as evals/runner.embed sends them to the model."""
    from memoria_pg import normalize

    docs = [normalize(d.content) for d in dataset.documents]
    docs += [normalize(f"{d.content}\n{d.context}") for d in dataset.documents if d.context]
    return docs, [normalize(q.text) for q in dataset.queries]


def load_sets(names=SETS) -> dict[str, Any]:
    from evals.runner import LOADERS

    return {n: LOADERS[n](DATA, None) for n in names}


def float_cache(name: str):
    from evals.cache import EmbeddingCache, default_cache_dir

    cache = EmbeddingCache(default_cache_dir() / f"{name}-all-MiniLM-L6-v2-onnx.npz")
    return cache


def one_minus_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return 1.0 - np.sum(a * b, axis=1)


def parity(graphs: dict[str, Path], datasets: dict[str, Any], per_set: int, seed: int, log) -> dict[str, Any]:
    rng = random.Random(seed)
    texts: list[str] = []
    origin: list[str] = []
    reference = []
    for name, ds in datasets.items():
        docs, queries = set_texts(ds)
        pool = sorted(set(docs + queries))
        sample = rng.sample(pool, min(per_set, len(pool)))
        cache = float_cache(name)
        cache._model = embedder(None) if any(k not in cache._rows for k in map(_key, sample)) else None
        reference.append(cache.embed(sample))
        texts += sample
        origin += [name] * len(sample)
    ref = np.concatenate(reference)
    origin_arr = np.array(origin)
    out: dict[str, Any] = {"texts": len(texts), "per_set": {n: int((origin_arr == n).sum()) for n in datasets}}
    for name, graph in graphs.items():
        t0 = time.perf_counter()
        vectors = embedder(graph).embed(texts)
        d = one_minus_cos(ref, vectors)
        row = {"max": float(d.max()), "mean": float(d.mean()), "p99": float(np.quantile(d, 0.99))}
        row["sets"] = {
            n: {"max": float(d[origin_arr == n].max()), "mean": float(d[origin_arr == n].mean())} for n in datasets
        }
        out[name] = row
        log(f"parity {name}: max {row['max']:.2e} mean {row['mean']:.2e} ({time.perf_counter() - t0:.0f} s)")
    return out


def _key(text: str) -> bytes:
    from evals.cache import text_key

    return text_key(text)


def latency(
    graphs: dict[str, Path], datasets: dict[str, Any], n: int, seed: int, log, rounds: int = 1
) -> dict[str, Any]:
    from memoria_pg import normalize

    pool = [normalize(q.text) for ds in datasets.values() for q in ds.queries]
    queries = random.Random(seed).sample(pool, min(n, len(pool)))
    models = {"float": embedder(None), **{k: embedder(g) for k, g in graphs.items()}}
    names = list(models)
    for m in models.values():
        for _ in range(5):
            m.embed(["warm up the session"])
    raw: dict[str, dict[str, list[float]]] = {k: {"wall_ms": [], "cpu_ms": []} for k in names}
    loads = [os.getloadavg()[0]]
    for i, text in enumerate(queries * rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            c0, t0 = time.thread_time(), time.perf_counter()
            models[name].embed([text])
            raw[name]["wall_ms"].append((time.perf_counter() - t0) * 1000)
            raw[name]["cpu_ms"].append((time.thread_time() - c0) * 1000)
        if i % 50 == 0:
            loads.append(os.getloadavg()[0])
    loads.append(os.getloadavg()[0])
    out: dict[str, Any] = {
        "queries": len(queries),
        "rounds": rounds,
        "mean_chars": statistics.mean(map(len, queries)),
        "load_1min": loads,
    }
    for name in names:
        w, c = raw[name]["wall_ms"], raw[name]["cpu_ms"]
        out[name] = {
            "p50_ms": float(np.percentile(w, 50)),
            "p95_ms": float(np.percentile(w, 95)),
            "cpu_ms": float(statistics.mean(c)),
            "cpu_p50_ms": float(np.percentile(c, 50)),
        }
    for name in names:
        out[name]["cpu_speedup"] = out["float"]["cpu_ms"] / out[name]["cpu_ms"]
        out[name]["p50_speedup"] = out["float"]["p50_ms"] / out[name]["p50_ms"]
        log(
            f"latency {name}: p50 {out[name]['p50_ms']:.2f} p95 {out[name]['p95_ms']:.2f} ms, "
            f"CPU {out[name]['cpu_ms']:.2f} ms ({out[name]['cpu_speedup']:.2f}x)"
        )
    return out


def throughput(graphs: dict[str, Path], datasets: dict[str, Any], n: int, seed: int, log) -> dict[str, Any]:
    """Batch embedding (the path memories take on ingestion): `n` memory texts per set drawn at random,
    embedded by each graph's batch session (OnnxEmbedder.embed: one thread per core, batches of 64),
    graphs alternating per set; texts per second and process CPU per text."""
    rng = random.Random(seed + 1)
    models = {"float": embedder(None), **{k: embedder(g) for k, g in graphs.items()}}
    for m in models.values():
        m.embed(["warm up", "the batch session"])
    totals = {k: {"wall_s": 0.0, "cpu_s": 0.0, "texts": 0} for k in models}
    names = list(models)
    for i, ds in enumerate(datasets.values()):
        docs, _ = set_texts(ds)
        sample = rng.sample(docs, min(n, len(docs)))
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            c0, t0 = time.process_time(), time.perf_counter()
            models[name].embed(sample)
            totals[name]["wall_s"] += time.perf_counter() - t0
            totals[name]["cpu_s"] += time.process_time() - c0
            totals[name]["texts"] += len(sample)
    out: dict[str, Any] = {"per_set": n}
    for name, t in totals.items():
        out[name] = {
            "texts_per_s": t["texts"] / t["wall_s"],
            "cpu_ms_per_text": 1000 * t["cpu_s"] / t["texts"],
            "texts": t["texts"],
        }
    for name in names:
        out[name]["cpu_speedup"] = out["float"]["cpu_ms_per_text"] / out[name]["cpu_ms_per_text"]
        log(
            f"throughput {name}: {out[name]['texts_per_s']:.1f} texts/s, CPU {out[name]['cpu_ms_per_text']:.1f} ms/text"
        )
    return out


def retrieval(graphs: dict[str, Path], datasets: dict[str, Any], lme_tenants: int | None, log) -> dict[str, Any]:
    from evals.cache import EmbeddingCache, default_cache_dir
    from evals.data import select
    from evals.metrics import MAIN_METRIC, score
    from evals.reference import reference_runs
    from evals.runner import DEPTH, embed

    out: dict[str, Any] = {}
    float_model = None
    for name, ds in datasets.items():
        if name == "longmemeval" and lme_tenants:
            ds = select(ds, max_tenants=lme_tenants)
        group, main = MAIN_METRIC[ds.kind]
        metrics = [main] + (["recall@5"] if name == "locomo" else [])
        entry: dict[str, Any] = {
            "documents": len(ds.documents),
            "queries": len(ds.queries),
            "tenants": len(ds.tenants),
            "metrics": metrics,
            "notes": [n for n in ds.notes if "restricted" in n],
        }
        sides = {"float": None, **graphs}
        for side, graph in sides.items():
            if side == "float":
                cache = float_cache(name)
                float_model = float_model or embedder(None)
                cache._model = float_model
            else:
                path = default_cache_dir() / f"{name}-all-MiniLM-L6-v2-onnx-int8-{side}.npz"
                cache = EmbeddingCache(path, log=log)
                cache._model = embedder(graph)
            t0 = time.perf_counter()
            docs, queries = embed(ds, cache)
            run = reference_runs(ds, docs, queries, names=["ref_dense"], depth=DEPTH[name])["ref_dense"]
            scores = score(ds, run)[group]
            entry[side] = {m: float(scores[m]) for m in metrics}
            entry[side]["embedded"] = cache.embedded
            log(f"retrieval {name} {side}: {entry[side]} ({time.perf_counter() - t0:.0f} s)")
        out[name] = entry
    return out


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout
        return head + (" (uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "unknown"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Int8 recipes for the ONNX embedder (all-MiniLM-L6-v2) vs the float graph",
        "",
        f"`{report['command']}`, {report['started']} - {report['finished']} UTC, commit {report['commit']}, "
        f"onnxruntime {report['onnxruntime']}, {report['cpu']}; load (1 min) {report['load_start']} at the start, "
        f"{report['load_end']} at the end.",
        "",
        "No recipe uses calibration data. `baseline` is the earlier shipped recipe: `quantize_dynamic` (QInt8 "
        "weights per output channel, MatMul; activations uint8, one scale per tensor, quantized per call); the "
        "other quantize_dynamic recipes change one option or leave MatMuls in float. `nbits8-b<B>`: every weight "
        "MatMul as ORT's MatMulNBits, 8-bit symmetric weights with one scale per block of B rows, accuracy_level "
        "4 (int8 compute, activations quantized per row and block at run time); `-fp32`: the same weights "
        "computed in float (accuracy_level 0). nbits8-b128 is the library's recipe from this change "
        "(memoria_pg/core/embedding_onnx.quantize_onnx).",
        "",
        "## Recipes",
        "",
        "| recipe | options | MatMuls int8 / float |",
        "|---|---|---|",
    ]
    for name, r in report["recipes"].items():
        lines.append(f"| {name} | {r['options']} | {r['int8_matmuls']} / {r['float_matmuls']} |")
    p, lat = report.get("parity"), report.get("latency")
    if p or lat:
        lines += ["", "## Vector parity and single-query speed", ""]
        if p:
            lines.append(
                f"Parity: {p['texts']} texts ({', '.join(f'{k} {v}' for k, v in p['per_set'].items())}), drawn (seed "
                f"{report['seed']}) from the texts each set embeds; 1 - cosine to the float graph's vector."
            )
        if lat:
            lines.append(
                f"Speed: {lat['queries']} evaluation queries (mean {lat['mean_chars']:.0f} characters) x "
                f"{lat.get('rounds', 1)} round(s), each embedded "
                "alone by every graph in turn (order rotated per query), one ONNX Runtime thread; CPU = the calling "
                f"thread's time per query. Load (1 min) during the run: {', '.join(f'{x:.2f}' for x in lat['load_1min'])}."
            )
        lines += [
            "",
            "| recipe | max 1-cos | p99 1-cos | mean 1-cos | p50 ms | p95 ms | CPU ms/query | CPU speedup vs float |",
            "|---|---|---|---|---|---|---|---|",
        ]
        names = ["float", *report["recipes"]] if lat else list(report["recipes"])
        for name in names:
            pr = (p or {}).get(name)
            lr = (lat or {}).get(name)
            cells = (
                [f"{pr['max']:.2e}", f"{pr['p99']:.2e}", f"{pr['mean']:.2e}"]
                if pr
                else (["0", "0", "0"] if name == "float" else ["", "", ""])
            )
            cells += (
                [f"{lr['p50_ms']:.2f}", f"{lr['p95_ms']:.2f}", f"{lr['cpu_ms']:.2f}", f"{lr['cpu_speedup']:.2f}x"]
                if lr
                else ["", "", "", ""]
            )
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if p:
            lines += [
                "",
                "Per set, max / mean 1 - cosine:",
                "",
                "| recipe | " + " | ".join(p["per_set"]) + " |",
                "|---|" + "---|" * len(p["per_set"]),
            ]
            for name in report["recipes"]:
                if name in p:
                    lines.append(
                        f"| {name} | "
                        + " | ".join(
                            f"{p[name]['sets'][s]['max']:.1e} / {p[name]['sets'][s]['mean']:.1e}" for s in p["per_set"]
                        )
                        + " |"
                    )
    tp = report.get("throughput")
    if tp:
        lines += [
            "",
            "## Batch embedding (ingestion's path)",
            "",
            f"{tp['per_set']} memory texts drawn from each set, embedded by each graph's batch session (one thread "
            "per core, batches of 64, longest first), graphs alternating per set; CPU = the process's.",
            "",
            "| graph | texts/s | CPU ms/text | CPU speedup vs float |",
            "|---|---|---|---|",
        ]
        for name, row in tp.items():
            if isinstance(row, dict):
                lines.append(
                    f"| {name} | {row['texts_per_s']:.1f} | {row['cpu_ms_per_text']:.1f} | {row['cpu_speedup']:.2f}x |"
                )
    ret = report.get("retrieval")
    if ret:
        sides = [
            s
            for s in next(iter(ret.values()))
            if s not in ("documents", "queries", "tenants", "metrics", "notes", "float")
        ]
        lines += [
            "",
            "## Retrieval (ref_dense: exact cosine per tenant, in process)",
            "",
            "The bar: every set's main metric within 0.005 of the float graph's.",
            "",
            "| set | docs | queries | metric | float | " + " | ".join(f"{s} | Δ" for s in sides) + " |",
            "|---|---|---|---|---|" + "---|---|" * len(sides),
        ]
        for name, e in ret.items():
            for m in e["metrics"]:
                row = f"| {name} | {e['documents']:,} | {e['queries']:,} | {m} | {e['float'][m]:.4f} | "
                row += " | ".join(f"{e[s][m]:.4f} | {e[s][m] - e['float'][m]:+.4f}" for s in sides)
                lines.append(row + " |")
        for name, e in ret.items():
            for note in e["notes"]:
                lines.append(f"\n{name}: {note}.")
        for s in sides:
            worst = max(abs(e[s][m] - e["float"][m]) for e in ret.values() for m in e["metrics"][:1])
            lines.append(
                f"\n{s}: largest |Δ| of a main metric {worst:.4f} ({'meets' if worst <= 0.005 else 'misses'} the bar)."
            )
    if report.get("sensitivity"):
        lines += [
            "",
            "## Sensitivity (baseline with one group left in float)",
            "",
            f"{report['sensitivity']['texts']} texts ({report['sensitivity']['per_set_n']} per set), 1 - cosine to float.",
            "",
            "| left in float | MatMuls int8 | max 1-cos | mean 1-cos |",
            "|---|---|---|---|",
        ]
        for name, row in report["sensitivity"].items():
            if isinstance(row, dict) and "max" in row:
                lines.append(f"| {name} | {row['int8_matmuls']} | {row['max']:.2e} | {row['mean']:.2e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--recipes",
        default="baseline,per-tensor,reduce-range,quint8,constb-only,no-ffn-out,no-last-layer,no-ffn-out-last",
    )
    parser.add_argument("--extra-recipes", default="", help="NAME=kind:ffn_out+layer:5,... (left in float)")
    parser.add_argument("--stages", default="parity,latency")
    parser.add_argument("--retrieval-recipes", default="")
    parser.add_argument("--per-set", type=int, default=600)
    parser.add_argument("--sensitivity-per-set", type=int, default=150)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="latency: the queries this many times")
    parser.add_argument("--throughput-per-set", type=int, default=128)
    parser.add_argument("--longmemeval-tenants", type=int, default=0, help="retrieval on the first N tenants (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "results" / "embedding"))
    parser.add_argument("--render", help="rewrite the .md beside this report .json (nothing is measured)")
    args = parser.parse_args()
    if args.render:
        path = Path(args.render)
        path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
        return

    import onnxruntime

    from memoria_pg.core.embedding import _packaged_model
    from memoria_pg.core.embedding_onnx import ensure_onnx

    def log(message: str) -> None:
        print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {message}", flush=True)

    started = dt.datetime.now(dt.UTC)
    stages = set(args.stages.split(","))
    fp32 = ensure_onnx(Path(_packaged_model()))
    table = recipes(fp32)
    add_derived(table, fp32, args.extra_recipes)
    all_names = weight_matmuls(fp32)
    chosen = [r for r in args.recipes.split(",") if r]
    retrieval_names = [r for r in args.retrieval_recipes.split(",") if r]
    for r in retrieval_names:
        if r not in chosen:
            chosen.append(r)
    report: dict[str, Any] = {
        "command": "python benchmarks/int8_recipes.py " + " ".join(os.sys.argv[1:]),
        "started": f"{started:%Y-%m-%d %H:%M}",
        "commit": commit(),
        "onnxruntime": onnxruntime.__version__,
        "cpu": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "seed": args.seed,
        "recipes": {},
    }

    def describe(name: str) -> dict[str, Any]:
        o = table[name]
        excluded = o.get("nodes_to_exclude") or []
        options = {
            k: (v.name if hasattr(v, "name") else v)
            for k, v in o.items()
            if k not in ("nodes_to_exclude", "op_types_to_quantize")
        }
        if excluded:
            options["float"] = f"{len(excluded)} MatMuls"
        int8 = len(all_names)
        return {
            "options": json.dumps(options),
            "int8_matmuls": int8 - len(excluded),
            "float_matmuls": len(excluded),
            "nodes_to_exclude": excluded,
        }

    datasets = load_sets()
    if "sensitivity" in stages:
        names = ["baseline"] + [n for n in table if n.startswith("sens-")]
        graphs = {n: build(fp32, n, table[n]) for n in names}
        sens = parity(graphs, datasets, args.sensitivity_per_set, args.seed, log)
        for n in names:
            sens[n]["int8_matmuls"] = describe(n)["int8_matmuls"]
        sens["per_set_n"] = args.sensitivity_per_set
        report["sensitivity"] = sens
    graphs = {n: build(fp32, n, table[n]) for n in chosen}
    report["recipes"] = {n: describe(n) for n in chosen}
    if "parity" in stages:
        report["parity"] = parity(graphs, datasets, args.per_set, args.seed, log)
    if "latency" in stages:
        report["latency"] = latency(graphs, datasets, args.queries, args.seed, log, rounds=args.rounds)
    if "throughput" in stages:
        report["throughput"] = throughput(graphs, datasets, args.throughput_per_set, args.seed, log)
    if "retrieval" in stages and retrieval_names:
        report["retrieval"] = retrieval(
            {n: graphs[n] for n in retrieval_names}, datasets, args.longmemeval_tenants or None, log
        )
    finished = dt.datetime.now(dt.UTC)
    report["finished"] = f"{finished:%Y-%m-%d %H:%M}"
    report["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{started:%Y%m%dT%H%M%S}-int8-recipes"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown(report))
    log(f"wrote {stem}.md")


if __name__ == "__main__":
    main()
