"""How often the label-free `ctx` relation (one's content inside the other's stored context) equals the
metadata adjacency (same session, |turn distance| <= 2) over LoCoMo's top-30 pairs.

    cd /work/main && PYTHONPATH=.:benchmarks python results/fusion/20261202-diversity-lab/agree.py
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diversity_lab as d  # noqa: E402

c = d.Ctx("locomo")
both = only_ctx = only_meta = pairs = 0
for q in c.q:
    a = d.sim_matrix(c, q, 30, "ctx") > 0
    b = d.sim_matrix(c, q, 30, "meta") > 0
    iu = np.triu_indices(len(a), 1)
    a, b = a[iu], b[iu]
    pairs += len(a)
    both += int((a & b).sum())
    only_ctx += int((a & ~b).sum())
    only_meta += int((~a & b).sum())
print(f"LoCoMo top-30 pairs {pairs}: adjacent by both {both}, ctx only {only_ctx}, metadata only {only_meta}")
