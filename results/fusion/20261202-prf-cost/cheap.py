import sys, math
sys.path[:0] = ["/work/main", "/work/main/benchmarks", "/work/main/results/fusion/20261201-prf-lab"]
import numpy as np
from collections import Counter
from prf_lab import Ctx, SETS, K1, B

def scores_limited(bm, qterms, extra, P):
    s = np.zeros(bm.n); hit = np.zeros(bm.n, bool)
    for term, qtf in Counter(qterms + extra).items():
        p = bm.post.get(term)
        if p is None: continue
        idx, tf, keep = p
        lim = 2000 if term in qterms else P
        if len(idx) > lim:
            impact = tf * (K1 + 1) / (tf + K1 * (1 - B + B * bm.doc_len[idx] / bm.avgdl))
            keep2 = np.lexsort((idx, -impact))[:lim]
            idx, tf = idx[keep2], tf[keep2]
        idf = math.log(1 + (bm.n - len(p[0]) + 0.5) / (len(p[0]) + 0.5))
        s[idx] += qtf * idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * bm.doc_len[idx] / bm.avgdl))
        hit[idx] = True
    s[~hit] = -np.inf
    return s

def lex(c, q, m, t, P, T0):
    mids, pos, mat, bm = c.tenants[q["tenant"]]
    qset = set(q["tokens"]); weight = Counter()
    for sd in q["ids0"][:m]:
        i = pos[sd]; dl = bm.doc_len[i] or 1.0
        for term, tf in bm.tfs[i].items():
            if term not in qset: weight[term] += tf / dl
    cand = weight.most_common(T0) if T0 else weight.items()
    scored = sorted(((w * bm.idf(term), term) for term, w in cand), key=lambda x: (-x[0], x[1]))
    extra = [term for _, term in scored[:t]]
    if not q["tokens"] and not extra: return []
    return c.top_list(q, scores_limited(bm, list(q["tokens"]), extra, P), False, q["K"])

ctxs = {n: Ctx(n) for n in SETS}
for (m, t) in ((3, 20), (3, 10)):
    for P in (50, 100, 300, 2000):
        for T0 in (0, 40):
            lists = {n: [lex(c, q, m, t, P, T0) for q in c.q] for n, c in ctxs.items()}
            for w in (0.1, 0.2):
                per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf_bm25"))) for n, c in ctxs.items()}
                d = {n: per[n]["main"] - ctxs[n].before["main"] for n in per}
                print(f"m={m} t={t} P={P} T0={T0} w={w} " + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d) + f" | multi={per['locomo']['multi-hop']:.4f} min={min(d.values()):+.4f}", flush=True)
