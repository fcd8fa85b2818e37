"""The best label-free rule (cosctx W=15, p=0.1, t=0.75) question by question on LoCoMo: how many questions
gain or lose recall@10, per category, and what the rule costs in process per query.

    cd /work/main && PYTHONPATH=.:benchmarks python results/fusion/20261202-diversity-lab/wins.py
"""
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diversity_lab as d  # noqa: E402

c = d.Ctx("locomo")
base = c.run_from(lambda q: q["ids"])
RULES = {
    "cosctx W=15 p=0.1 t=0.75": d.rule_run(c, "cosctx", 15, 0.1, 0.75),
    "entb W=15 a=0.2 (LoCoMo's held-out choice)": d.rule_run(c, "entb", 15, 0, None, a=0.2),
    "entbcos W=15 p=0.1 t=0.8 a=0.3": d.rule_run(c, "entbcos", 15, 0.1, 0.8, a=0.3),
}
for name, rule in RULES.items():
    wins, losses = Counter(), Counter()
    for qo in c.lab.dataset.queries:
        if not qo.relevant or qo.group == "adversarial":
            continue
        a = len(set(base[qo.query_id][:10]) & qo.relevant)
        b = len(set(rule[qo.query_id][:10]) & qo.relevant)
        if b > a:
            wins[qo.group] += 1
        elif b < a:
            losses[qo.group] += 1
    print(name + ": " + "; ".join(f"{g} {wins[g]} up {losses[g]} down" for g in d.GROUPS)
          + f"; all {sum(wins.values())} up {sum(losses.values())} down")
# cost: the rule alone over the top 15 (vectors given), per query
qs = c.q[:300]
vecs = [c.vec(q["ids"][:15]) for q in qs]
has = [np.array([bool(c.doc(m).context) for m in q["ids"][:15]], float) for q in qs]
t0 = time.perf_counter()
for q, v, h in zip(qs, vecs, has):
    sim = ((v @ v.T) >= 0.75) * h[:, None] * h[None, :]
    np.fill_diagonal(sim, 0)
    d.greedy(q["ids"], d.rel_of(q, 15), sim, 0.1, 15)
print(f"rule in process (numpy): {(time.perf_counter() - t0) / len(qs) * 1e6:.0f} us per query over the top 15")
