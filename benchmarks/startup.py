"""Start-up benchmark: the wall time of a whole `memoria-pg query` process against a running server.

    python benchmarks/startup.py --dsn DSN --tenant t [--runs 10] [--before /path/to/old/tree] [--out results/embedding]

Each variant is a fresh process (`python -m memoria_pg.cli --dsn DSN query TEXT --tenant T`, output
discarded), timed from before its start to its exit by this process (time.perf_counter), with its CPU
(user + system, from getrusage of the children). Variants: this tree with each embedding backend,
and, with --before, another checkout of memoria-pg (the previous state; run with its default
backend, torch), imported through PYTHONPATH. The variants alternate run by run, so the machine's
load falls on all alike. The ONNX graph must have been exported before (`memoria-pg model export-onnx`):
exporting is a one-time step, not start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import report
from embedding import environment
from timing import LoadMonitor, log

HERE = Path(__file__).resolve().parent.parent
QUERY = "where does Maya live?"


def variants(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """{label: environment additions}."""
    out: dict[str, dict[str, str]] = {}
    if args.before:
        out["before (torch)"] = {"PYTHONPATH": str(Path(args.before).resolve())}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        out[f"after ({backend})"] = {"PYTHONPATH": str(HERE), "MEMORIA_EMBEDDING_BACKEND": backend}
    return out


def run_once(extra: dict[str, str], args: argparse.Namespace) -> tuple[float, float, int]:
    env = {**os.environ, **extra}
    cmd = [sys.executable, "-m", "memoria_pg.cli", "--dsn", args.dsn, "query", args.text, "--tenant", args.tenant]
    if args.import_only:  # the imports alone: what lazy imports save, whatever the model costs
        cmd = [sys.executable, "-c", "import memoria_pg.cli"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        log(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return wall, cpu, done.returncode


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    L = [
        "# Start-up: wall time of "
        + ("`python -c 'import memoria_pg.cli'`" if results["import_only"] else "a `memoria-pg query` process"),
        "",
        f"Run {results['started']} on {env['cpus']} CPUs ({env['cpu']}); git {env['git']}. Query "
        f"{results['text']!r} for tenant {results['tenant']!r} on database {results['database']} (a running "
        f"server, same machine); {results['runs']} runs per variant, alternating. Machine load (1-minute "
        f"average): {results['load'][0]['load_mean']:.1f} (max {results['load'][0]['load_max']:.1f}) on "
        f"{env['cpus']} CPUs"
        + (
            ": other work shared them, so the walls are pessimistic."
            if results["load"][0]["load_max"] > env["cpus"]
            else "."
        ),
        "",
        "| variant | wall p50 s | wall min s | wall max s | CPU s/process (median) | p50 vs first | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    first = None
    for name, s in results["variants"].items():
        w, c = s["wall_s"], s["cpu_s"]
        first = first or w["p50"]
        L.append(
            f"| {name} | {w['p50']:.2f} | {min(s['raw_wall_s']):.2f} | {w['max']:.2f} | {c['p50']:.2f} | "
            f"{w['p50'] / first:.2f}x | {s['failed']} |"
        )
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True, help="DSN of a migrated memoria database")
    p.add_argument("--tenant", default="t")
    p.add_argument("--text", default=QUERY)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--backends", default="onnx,onnx-int8,torch", help="backends of this tree to run")
    p.add_argument("--before", help="another checkout of memoria-pg (the previous state)")
    p.add_argument("--import-only", action="store_true", help="time `import memoria_pg.cli` instead of a query")
    p.add_argument("--out", default="results/embedding")
    args = p.parse_args(argv)
    load = LoadMonitor()
    started = time.strftime("%Y%m%dT%H%M%S")
    chosen = variants(args)
    raw: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in chosen}
    failed = dict.fromkeys(chosen, 0)
    with load.phase("start-up runs"):
        for i in range(args.runs):
            names = list(chosen)
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                wall, cpu, code = run_once(chosen[name], args)
                raw[name]["wall"].append(wall)
                raw[name]["cpu"].append(cpu)
                failed[name] += code != 0
            log(f"run {i + 1}/{args.runs}: " + ", ".join(f"{n} {raw[n]['wall'][-1]:.2f} s" for n in names))
    load.stop()
    results: dict[str, Any] = {
        "started": started,
        "environment": environment(),
        "database": args.dsn.rsplit("/", 1)[-1],
        "tenant": args.tenant,
        "text": args.text,
        "runs": args.runs,
        "import_only": args.import_only,
        "load": load.phases,
        "variants": {
            n: {
                "wall_s": report.summary(r["wall"]),
                "cpu_s": report.summary(r["cpu"]),
                "raw_wall_s": r["wall"],
                "failed": failed[n],
            }
            for n, r in raw.items()
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "imports" if args.import_only else "startup"
    (out / f"{kind}-{started}.json").write_text(json.dumps(results, indent=2))
    (out / f"{kind}-{started}.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
