import sys, json
sys.path[:0] = ["/work/main", "/work/main/benchmarks", "/work/main/results/fusion/20261201-prf-lab"]
import prf_lab
from prf_lab import Ctx, SETS, Counter
from collections import Counter

def lex_list_seeds(c, q, seeds, t, r=1):
    mids, pos, mat, bm = c.tenants[q["tenant"]]
    qset = set(q["tokens"])
    weight = Counter()
    for s in seeds:
        i = pos[s]
        dl = bm.doc_len[i] or 1.0
        for term, tf in bm.tfs[i].items():
            if term not in qset:
                weight[term] += tf / dl
    scored = sorted(((w * bm.idf(term), term) for term, w in weight.items()), key=lambda x: (-x[0], x[1]))
    extra = [term for _, term in scored[:t]]
    terms = q["tokens"] * r + extra
    if not terms:
        return []
    return c.top_list(q, bm.scores(terms), False, q["K"])

ctxs = {n: Ctx(n) for n in SETS}
for seedsrc in ("fused", "bm25", "vector"):
    for m in (2, 3, 5):
        for t in (10, 20, 30):
            lists = {}
            for n, c in ctxs.items():
                L = []
                for q in c.q:
                    if seedsrc == "fused":
                        seeds = q["ids0"][:m]
                    else:
                        seeds = [h[0] for h in q["hits"].get(seedsrc, ())][:m]
                    L.append(lex_list_seeds(c, q, seeds, t))
                lists[n] = L
            for w in (0.1, 0.2, 0.3):
                per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf_bm25"))) for n, c in ctxs.items()}
                d = {n: per[n]["main"] - ctxs[n].before["main"] for n in per}
                print(f"{seedsrc:6s} m={m} t={t} w={w} " + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d) + f" | multi={per['locomo']['multi-hop']:.4f} min={min(d.values()):+.4f}", flush=True)
