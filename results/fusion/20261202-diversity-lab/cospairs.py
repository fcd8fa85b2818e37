"""Which LoCoMo pairs the cosctx rule (cos >= 0.75 over the top 15) calls redundant: adjacent or not, how
long their contents are, and whether the demoted one is evidence.

    cd /work/main && PYTHONPATH=.:benchmarks python results/fusion/20261202-diversity-lab/cospairs.py
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diversity_lab as d  # noqa: E402

c = d.Ctx("locomo")
W, T = 15, 0.75
pairs = adjacent = 0
lens_pair, lens_all = [], []
lower_ev = lower_nonev = 0
for q in c.q:
    qo = c.qobj[q["id"]]
    if not qo.relevant or qo.group == "adversarial":
        continue
    ids = q["ids"][:W]
    cos = d.sim_matrix(c, q, W, "cosraw")
    meta = d.sim_matrix(c, q, W, "meta")
    lens_all += [len(c.doc(m).content) for m in ids]
    for j in range(len(ids)):
        for i in range(j):
            if cos[i, j] >= T:
                pairs += 1
                adjacent += meta[i, j] > 0
                lens_pair.append(len(c.doc(ids[j]).content))
                if c.lab.doc[ids[j]] in qo.relevant:
                    lower_ev += 1
                else:
                    lower_nonev += 1
n = sum(1 for q in c.q if c.qobj[q["id"]].relevant and c.qobj[q["id"]].group != "adversarial")
print(f"questions {n}; pairs with cos >= {T} in the top {W}: {pairs} ({pairs / n:.2f} per question), "
      f"adjacent (same session, <= 2 turns) {adjacent} ({adjacent / max(pairs, 1):.0%}); "
      f"lower one's content length median {np.median(lens_pair):.0f} chars vs {np.median(lens_all):.0f} over the top {W}; "
      f"lower one is evidence {lower_ev}, not evidence {lower_nonev}")
