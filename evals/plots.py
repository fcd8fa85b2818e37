"""recall@k curves, one line per configuration, one PNG per data set (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import DatasetResult

# A reference shares its SQL counterpart's colour (vector ~ ref_dense, bm25 ~ ref_bm25), dashed.
COLORS = {
    "v3": "tab:gray",
    "vector": "tab:blue",
    "bm25": "tab:green",
    "v4": "tab:red",
    "v4_ranking": "tab:purple",
    "v4_cross_encoder": "tab:orange",
    "ref_dense": "tab:blue",
    "ref_bm25": "tab:green",
    "ref_rrf": "black",
    "ref_rrf_full": "tab:brown",
}
WHAT = {"locomo": "evidence turns (categories 1-4)", "beir": "relevant documents", "longmemeval": "has_answer turns"}


def plot_recall_curves(ds: DatasetResult, path: Path) -> bool:
    """Write the plot; False when no configuration has a curve."""
    curves = [(r.name, r.curve) for r in ds.configurations if r.status == "ok" and r.curve]
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, curve in curves:
        ks = sorted(int(k) for k in curve)
        style = "--" if name.startswith("ref_") else "-"
        ax.plot(ks, [curve[k] for k in ks], style, marker="o", markersize=3, label=name, color=COLORS.get(name))
    ax.set_xscale("log")
    ticks = sorted({int(k) for _, c in curves for k in c})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(k) for k in ticks])
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{ds.name}: recall@k of {WHAT.get(ds.kind, 'answers')}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
