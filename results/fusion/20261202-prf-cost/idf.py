import sys, math
sys.path[:0] = ["/work/main", "/work/main/benchmarks", "/work/main/results/fusion/20261201-prf-lab"]
import numpy as np
from collections import Counter
import prf_lab
from prf_lab import Ctx, SETS, K1, B

def scores(bm, terms, mode):
    s = np.zeros(bm.n); hit = np.zeros(bm.n, bool)
    if mode == "okapi_avg" and not hasattr(bm, "_avg"):
        idfs = [math.log((bm.n - len(p[0]) + 0.5) / (len(p[0]) + 0.5)) for p in bm.post.values()]
        bm._avg = sum(idfs) / len(idfs)
    for term, qtf in Counter(terms).items():
        p = bm.post.get(term)
        if p is None: continue
        idx, tf, keep = p
        if keep is not None: idx, tf = idx[keep], tf[keep]
        df = len(p[0])
        if mode == "lucene": idf = math.log(1 + (bm.n - df + 0.5) / (df + 0.5))
        else:
            idf = math.log((bm.n - df + 0.5) / (df + 0.5))
            if idf < 0: idf = 0.25 * bm._avg if mode == "okapi_avg" else 0.0
        s[idx] += qtf * idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * bm.doc_len[idx] / bm.avgdl)); hit[idx] = True
    s[~hit] = -np.inf
    return s

ctxs = {n: Ctx(n) for n in SETS}
for mode in ("lucene", "okapi_avg", "okapi0"):
    per = {}
    for n, c in ctxs.items():
        def rank(i, q):
            lst = c.top_list(q, scores(c.tenants[q["tenant"]][3], q["tokens"], mode), False, len(q["hits"].get("bm25", ())) or q["K"])
            lst = [h for h in lst if np.isfinite(h[3])]
            return c.fuse(q, lst, 0, "bm25", replace="bm25")
        per[n] = c.metrics(c.run_from(rank))
    d = {n: per[n]["main"] - ctxs[n].before["main"] for n in per}
    print(f"{mode:10s} " + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d) + f" | multi={per['locomo']['multi-hop']:.4f}", flush=True)
