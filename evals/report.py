"""The evaluation report: one Markdown file, one JSON file and recall@k plots per run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .configurations import describe
from .metrics import ALL, MAIN_METRIC, OVERALL
from .targets import check_targets

if TYPE_CHECKING:
    from .results import DatasetResult, EvalReport

# Columns per kind of data set: (group, metric, header).
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "locomo": [
        (OVERALL, "recall@5", "R@5"),
        (OVERALL, "recall@10", "R@10"),
        (OVERALL, "recall@20", "R@20"),
        ("single-hop", "recall@10", "single-hop R@10"),
        ("multi-hop", "recall@10", "multi-hop R@10"),
        ("temporal", "recall@10", "temporal R@10"),
        ("open-domain", "recall@10", "open-domain R@10"),
        ("adversarial", "recall@10", "adversarial R@10 (apart)"),
    ],
    "beir": [(ALL, "ndcg@10", "nDCG@10"), (ALL, "recall@10", "R@10"), (ALL, "recall@100", "R@100")],
    "longmemeval": [
        (ALL, "turn_recall_any@5", "turn R_any@5"),
        (ALL, "turn_recall_any@10", "turn R_any@10"),
        (ALL, "turn_recall@5", "turn R@5"),
        (ALL, "turn_recall@10", "turn R@10"),
        (ALL, "all_sessions@5", "all sessions in top 5"),
        (ALL, "all_sessions@10", "all sessions in top 10"),
        ("knowledge-update", "turn_recall_any@5", "knowledge-update turn R_any@5"),
        ("knowledge-update", "all_sessions@5", "knowledge-update all sessions in top 5"),
    ],
}
MAIN_HEADERS = {
    "locomo": "LoCoMo R@10",
    "scifact": "SciFact nDCG@10",
    "hotpotqa": "HotpotQA nDCG@10",
    "longmemeval": "LongMemEval turn R_any@5",
    "msmarco": "MS MARCO nDCG@10",
}


def render_markdown(report: EvalReport) -> str:
    s = report.settings
    lines = [f"# memoria-pg retrieval quality ({report.started})", ""]
    lines.append(f"- data: `{s['data']}`; model: {s['model']} (embeddings cached in `{s['cache_dir']}`)")
    lines.append(
        f"- server: {s.get('server', '?')} ({'embedded, temporary' if s['embedded_server'] else 'DSN'}); "
        f"graph backend: {'AGE when present' if s['use_age'] else 'SQL (use_age off)'}; code: {s.get('code')}"
    )
    limits = {k: s[k] for k in ("limit_queries", "max_tenants", "corpus_limit") if s.get(k) is not None}
    if limits or s.get("config_overrides"):
        lines.append(f"- subset: {limits or 'none'}; Config overrides: {s.get('config_overrides') or 'none'}")
    lines.append(f"- total time: {report.seconds:.0f} s")
    lines += ["", "## Summary", "", *_summary(report), "", "## Targets", "", *_targets(report)]
    lines += ["", "## Fusion: leave-one-set-out", "", *_fusion_protocol(report)]
    lines += ["", "Then the lexical feedback, chosen the same way on top of the shift above:", ""]
    lines += _fusion_protocol(report, FEEDBACK_LOSO_FILE, "benchmarks/feedback_lab.py")
    for ds in report.datasets:
        lines += ["", *_dataset_section(ds)]
    lines += ["", "## Timings (seconds)", "", *_timings(report), "", "## Configurations", ""]
    for name in s["configurations"]:
        lines.append(f"- `{name}`: {describe(name)}")
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _summary(report: EvalReport) -> list[str]:
    names = report.settings["configurations"]
    header = ["configuration", *(MAIN_HEADERS.get(ds.name, ds.name) for ds in report.datasets)]
    rows = []
    for name in names:
        row = [f"`{name}`"]
        for ds in report.datasets:
            group, metric = MAIN_METRIC[ds.kind]
            r = ds.result(name)
            row.append(
                "-" if r is None else _fmt(r.metrics.get(group, {}).get(metric)) if r.status == "ok" else r.status
            )
        rows.append(row)
    return _table(header, rows)


def _targets(report: EvalReport) -> list[str]:
    checks = check_targets(report)
    if not checks:
        return ["(no target's data set was evaluated)"]
    subset = any(report.settings.get(k) is not None for k in ("limit_queries", "max_tenants", "corpus_limit"))
    rows = [
        [
            c.label,
            f"`{c.configuration}`",
            _fmt(c.value, 4),
            {True: "pass", False: "**FAIL**", None: "-"}[c.passed],
            c.baseline,
        ]
        for c in checks
    ]
    note = ["", "Targets are set for the full development data; this run used a subset."] if subset else []
    return _table(["target", "configuration", "value", "result", "baselines"], rows) + note


# The leave-one-set-out choices of the fusion's parameters: the per-query shift (benchmarks/fusion_lab.py
# --loso writes it) and the lexical feedback (benchmarks/feedback_lab.py --loso).
LOSO_FILE = Path(__file__).resolve().parent.parent / "results" / "fusion" / "loso.json"
FEEDBACK_LOSO_FILE = LOSO_FILE.with_name("feedback_loso.json")


def _fusion_protocol(report: EvalReport, path: Path = LOSO_FILE, lab: str = "benchmarks/fusion_lab.py") -> list[str]:
    """How the fusion's parameters were chosen: for each dev set, the parameters chosen on the four
    others and that set's figure with them (in the lab, on captured hit lists), beside the final
    parameters' figure there and in this run."""
    if not path.exists():
        return [f"({path} not found: run {lab} --loso)"]
    loso = json.loads(path.read_text(encoding="utf-8"))
    final = ", ".join(f"{k} {v:g}" for k, v in loso["final_params"].items())
    rows = []
    for name, row in loso["sets"].items():
        ds = report.dataset(name)
        group_metric = MAIN_METRIC[ds.kind] if ds else None
        here = ds.result("v4") if ds else None
        value = here.metrics.get(group_metric[0], {}).get(group_metric[1]) if here and here.status == "ok" else None
        params = ", ".join(f"{k} {v:g}" for k, v in row["held_out_params"].items())
        rows.append(
            [
                name,
                params,
                _fmt(row["held_out"]),
                _fmt(row["final"]),
                _fmt(value),
                _fmt(row["vector"]),
                _fmt(row["bm25"]),
                _fmt(row["before"]),
            ]
        )
    header = [
        "held-out set",
        "chosen on the other four",
        "held-out figure",
        "final (lab)",
        "final (this run)",
        "vector alone",
        "BM25 alone",
        "the engine when captured",
    ]
    return [f"Family: {loso['family']}; final parameters, chosen on all five: {final}.", "", *_table(header, rows)]


def _dataset_section(ds: DatasetResult) -> list[str]:
    title = (
        f"## {ds.name}: {ds.documents} memories in {ds.tenants} tenant(s), {ds.queries} queries, "
        f"top_k {ds.depth}, worker_limit {ds.config.get('worker_limit')}"
    )
    lines = [title, ""]
    lines += [f"- {note}" for note in ds.notes]
    columns = COLUMNS[ds.kind]
    header = ["configuration", *(h for _, _, h in columns), "ms/query mean", "p95", "note"]
    rows = []
    for r in ds.configurations:
        row = [f"`{r.name}`"]
        if r.status == "ok":
            row += [_fmt(r.metrics.get(g, {}).get(m)) for g, m, _ in columns]
            row += [_fmt(r.latency_ms.get("mean"), 1), _fmt(r.latency_ms.get("p95"), 1), _diag_note(r)]
        else:
            row += ["-"] * len(columns) + ["-", "-", f"{r.status}: {r.error}"]
        rows.append(row)
    lines += ["", *_table(header, rows)]
    if ds.kind == "locomo":
        counts = {
            g: int(v.get("queries", 0)) for g, v in (ds.configurations[0].metrics.items() if ds.configurations else [])
        }
        lines += ["", f"Questions per group: {counts}"]
    v4 = ds.result("v4")
    if v4 is not None and v4.status == "ok":
        lines += [
            "",
            (
                f"V4 routes (from the query's memory-type hint): {v4.diagnostics.get('routes')}; "
                f"queries per submitted worker: {v4.diagnostics.get('submitted_sources')}"
            ),
        ]
    return lines


def _diag_note(r) -> str:
    d = r.diagnostics
    if not d:
        return "in process"
    parts = []
    finish = {k: v for k, v in d.get("finish_reasons", {}).items() if k not in ("all_completed", "-")}
    if finish:
        parts.append(f"finish {finish}")
    if d.get("failed_sources"):
        parts.append(f"failed {d['failed_sources']}")
    if d.get("pending_sources"):
        parts.append(f"pending {d['pending_sources']}")
    if d.get("errors"):
        parts.append(f"{d['errors']} query errors ({d.get('first_error')})")
    return "; ".join(parts)


def _timings(report: EvalReport) -> list[str]:
    keys: list[str] = []
    for ds in report.datasets:
        for k in ds.timings:
            if k not in keys:
                keys.append(k)
    rows = [[ds.name, *(_fmt(ds.timings.get(k), 1) for k in keys)] for ds in report.datasets]
    return _table(["dataset", *(k.removesuffix("_s") for k in keys)], rows)


def as_json(report: EvalReport) -> dict[str, Any]:
    data = dataclasses.asdict(report)
    data["targets"] = [dataclasses.asdict(c) for c in check_targets(report)]
    return data


def write_report(report: EvalReport, out: Path, started: dt.datetime) -> dict[str, str]:
    """results.md, results.json and <dataset>-recall.png in out/<timestamp>/; out/latest.md."""
    from .plots import plot_recall_curves

    folder = out / started.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": str(folder / "results.md"), "json": str(folder / "results.json")}
    for ds in report.datasets:
        png = folder / f"{ds.name}-recall.png"
        if plot_recall_curves(ds, png):
            paths[f"plot_{ds.name}"] = str(png)
    report.paths = paths
    Path(paths["markdown"]).write_text(report.markdown, encoding="utf-8")
    Path(paths["json"]).write_text(
        json.dumps(_finite(as_json(report)), indent=2, default=_json_default) + "\n", encoding="utf-8"
    )
    shutil.copyfile(paths["markdown"], out / "latest.md")
    return paths


def _finite(value: Any) -> Any:
    """NaN (a metric with no query to average) becomes null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
