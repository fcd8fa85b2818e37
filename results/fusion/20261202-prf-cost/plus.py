import sys, math
sys.path[:0] = ["/work/main", "/work/main/benchmarks", "/work/main/results/fusion/20261201-prf-lab"]
import numpy as np
from collections import Counter
from prf_lab import Ctx, SETS, K1, B

def escore(bm, extra, P):
    s = np.zeros(bm.n); hit = np.zeros(bm.n, bool)
    for term in extra:
        p = bm.post.get(term)
        if p is None: continue
        idx, tf, keep = p
        if len(idx) > P:
            impact = tf * (K1 + 1) / (tf + K1 * (1 - B + B * bm.doc_len[idx] / bm.avgdl))
            k2 = np.lexsort((idx, -impact))[:P]; idx, tf = idx[k2], tf[k2]
        idf = math.log(1 + (bm.n - len(p[0]) + 0.5) / (len(p[0]) + 0.5))
        s[idx] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * bm.doc_len[idx] / bm.avgdl)); hit[idx] = True
    return s, hit

def lex(c, q, m, t, P, T0, mode):
    mids, pos, mat, bm = c.tenants[q["tenant"]]
    qset = set(q["tokens"]); weight = Counter()
    for sd in q["ids0"][:m]:
        i = pos[sd]; dl = bm.doc_len[i] or 1.0
        for term, tf in bm.tfs[i].items():
            if term not in qset: weight[term] += tf / dl
    cand = weight.most_common(T0)
    scored = sorted(((w * bm.idf(term), term) for term, w in cand), key=lambda x: (-x[0], x[1]))
    extra = [term for _, term in scored[:t]]
    s, hit = escore(bm, extra, P)
    if mode == "plus":
        for h in q["hits"].get("bm25", ()):
            i = pos[h[0]]; s[i] += h[3]; hit[i] = True
    s[~hit] = -np.inf
    if not hit.any(): return []
    return c.top_list(q, s, False, q["K"])

ctxs = {n: Ctx(n) for n in SETS}
for mode in ("plus", "only"):
  for t in (10, 20):
    for P in (30, 50, 100, 300):
        lists = {n: [lex(c, q, 3, t, P, 40, mode) for q in c.q] for n, c in ctxs.items()}
        for w in (0.1, 0.2, 0.3):
            per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf_bm25"))) for n, c in ctxs.items()}
            d = {n: per[n]["main"] - ctxs[n].before["main"] for n in per}
            print(f"{mode} t={t} P={P} w={w} " + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d) + f" | multi={per['locomo']['multi-hop']:.4f} min={min(d.values()):+.4f}", flush=True)
