"""Pseudo-relevance feedback (PRF) lab for issue 14 point 4 (LoCoMo multi-hop evidence recall).

Offline, in process, over the fusion-lab captures (benchmarks/fusion_lab.py): the engine's fused
order (today + order) seeds a second retrieval round whose list is fused as one more source.

    cd /work/main && PYTHONPATH=/work/main:/work/main/benchmarks python /work/lab-mh/prf_lab.py

Variants:
  vec      Rocchio: q2 = normalize(q + beta * mean(vectors of the top-m fused results)); exact cosine
           over the tenant's memories, top K (= the vector worker's depth), fused as source "prf"
           with weight w (minmax_norm, lower distance better), added to today's sources.
  vecrep   the same q2 list replacing the vector list (weight 0.5, as the vector source).
  lex      RM3-style: the top-t expansion terms of the top-m fused results (term weight: sum over the
           seeds of tf / doc_len, times the term's Lucene IDF; terms already in the query excluded)
           appended to the query's tokens (the original tokens repeated `r` times), BM25 as the
           engine computes it (sql/workers/bm25.sql, verified against the captured scores), top K
           fused as source "prf_bm25" with weight w.
  gated    vec only when the first round's vector and BM25 top-10 overlap <= g (label-free).
"""

from __future__ import annotations

import json
import math
import pickle
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from evals.cache import EmbeddingCache, default_cache_dir, model_label
from evals.runner import embed
from fusion_lab import CAP, DEFAULT_DIR, SETS, features, load, main_metric, minmax_norm, order, today
from memoria_pg import indexed_tokens, normalize, tokenize

ROOT = Path("/work/shared/eval")
OUT = Path("/work/lab-mh")
GROUPS = ("single-hop", "multi-hop", "temporal", "open-domain")
K1, B, PER_TERM = 1.2, 0.75, 2000
TOL = 0.005


# -- in-process BM25, as sql/workers/bm25.sql ----------------------------------------------------
class BM25:
    def __init__(self, token_lists: list[list[str]]):
        self.n = len(token_lists)
        self.doc_len = np.array([len(t) for t in token_lists], dtype=np.float64)
        self.avgdl = self.doc_len.sum() / max(self.n, 1)
        post: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        self.tfs: list[Counter] = []
        for i, toks in enumerate(token_lists):
            c = Counter(toks)
            self.tfs.append(c)
            for term, tf in c.items():
                post[term][0].append(i)
                post[term][1].append(tf)
        self.post = {}
        for term, (idx, tf) in post.items():
            idx_a, tf_a = np.array(idx), np.array(tf, dtype=np.float64)
            if len(idx_a) > PER_TERM:  # impact order cut (impact: the tf factor)
                impact = tf_a * (K1 + 1) / (tf_a + K1 * (1 - B + B * self.doc_len[idx_a] / self.avgdl))
                keep = np.lexsort((idx_a, -impact))[:PER_TERM]
                self.post[term] = (idx_a, tf_a, keep)
            else:
                self.post[term] = (idx_a, tf_a, None)

    def idf(self, term: str) -> float:
        p = self.post.get(term)
        if p is None:
            return 0.0
        df = len(p[0])
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, terms: list[str]) -> np.ndarray:
        s = np.zeros(self.n)
        hit = np.zeros(self.n, bool)
        for term, qtf in Counter(terms).items():
            p = self.post.get(term)
            if p is None:
                continue
            idx, tf, keep = p
            if keep is not None:
                idx, tf = idx[keep], tf[keep]
            idf = math.log(1 + (self.n - len(p[0]) + 0.5) / (len(p[0]) + 0.5))
            s[idx] += qtf * idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.doc_len[idx] / self.avgdl))
            hit[idx] = True
        s[~hit] = -np.inf
        return s


# -- per-set context -----------------------------------------------------------------------------
class Ctx:
    def __init__(self, name: str):
        t0 = time.perf_counter()
        self.name = name
        self.lab = load(name, ROOT)
        cap = pickle.load(open(DEFAULT_DIR / f"{name}.pkl", "rb"))
        cache = EmbeddingCache(default_cache_dir() / f"{name}-{model_label(None)}.npz", dim=384)
        dv, qv = embed(self.lab.dataset, cache)
        assert cache.embedded == 0
        docs = {(d.tenant, d.doc_id): d for d in self.lab.dataset.documents}
        qtext = {q.query_id: q.text for q in self.lab.dataset.queries}
        by_tenant: dict[str, list] = defaultdict(list)
        self.mtype = {}
        for mid, tenant, doc_id, mtype in sorted(cap["memories"]):
            by_tenant[tenant].append((mid, doc_id))
            self.mtype[mid] = mtype
        self.tenants = {}
        for tenant, rows in by_tenant.items():
            mids = np.array([r[0] for r in rows])
            mat = np.stack([dv[(tenant, r[1])] for r in rows]).astype(np.float32)
            bm = BM25([indexed_tokens(docs[(tenant, r[1])].content, docs[(tenant, r[1])].context) for r in rows])
            self.tenants[tenant] = (mids, {int(m): i for i, m in enumerate(mids)}, mat, bm)
        self.q = []
        for cq in self.lab.queries:
            hits = cq["hits"]
            fused0 = today(hits)
            ids0 = order(hits, fused0, cq["hint"])
            self.q.append(
                dict(
                    id=cq["query_id"],
                    tenant=cq["tenant"],
                    hits=hits,
                    hint=cq["hint"],
                    fused0=fused0,
                    ids0=ids0,
                    qv=np.asarray(qv[cq["query_id"]], dtype=np.float32),
                    tokens=tokenize(normalize(qtext[cq["query_id"]])),
                    K=len(hits.get("vector", ())) or self.lab.depth,
                    feat=features(hits),
                )
            )
        self.verify()
        self.before = self.metrics(self.run_from(lambda i, q: q["ids0"]))
        print(f"[{name}] loaded in {time.perf_counter() - t0:.1f}s: {self.before}", flush=True)

    def verify(self) -> None:
        ev = eb = 0.0
        for q in self.q[:40]:
            mids, pos, mat, bm = self.tenants[q["tenant"]]
            for h in q["hits"].get("vector", ()):
                ev = max(ev, abs((1 - float(mat[pos[h[0]]] @ q["qv"])) - h[3]))
            s = bm.scores(q["tokens"])
            for h in q["hits"].get("bm25", ()):
                eb = max(eb, abs(s[pos[h[0]]] - h[3]))
        print(f"[{self.name}] verify: max |vector distance err| {ev:.2e}, max |bm25 score err| {eb:.2e}")
        self.verified = (ev, eb)

    def run_from(self, ranker) -> dict[str, list[str]]:
        """ranker(i, q) -> ranked memory ids."""
        return {q["id"]: [self.lab.doc[m] for m in ranker(i, q)[: self.lab.depth]] for i, q in enumerate(self.q)}

    def metrics(self, run) -> dict[str, float]:
        out = {"main": main_metric(self.lab, run)}
        if self.name == "locomo":
            for g in GROUPS:
                out[g] = main_metric(self.lab, run, g)
        return out

    # -- second-round lists --
    def top_list(self, q, score: np.ndarray, lower: bool, k: int):
        mids = self.tenants[q["tenant"]][0]
        if lower:
            idx = np.lexsort((mids, score))
        else:
            idx = np.lexsort((mids, -score))
            idx = idx[np.isfinite(score[idx])]
        idx = idx[:k]
        return [(int(mids[i]), self.mtype[int(mids[i])], r + 1, float(score[i]), {}) for r, i in enumerate(idx)]

    def vec_list(self, q, m: int, beta: float, seeds=None):
        mids, pos, mat, _ = self.tenants[q["tenant"]]
        seeds = q["ids0"][:m] if seeds is None else seeds
        rows = [pos[s] for s in seeds]
        q2 = q["qv"] + beta * mat[rows].mean(axis=0)
        q2 = q2 / np.linalg.norm(q2)
        return self.top_list(q, 1.0 - mat @ q2, True, q["K"])

    def vecmax_list(self, q, m: int, beta: float):
        """Per-seed Rocchio: distance 1 - max over the top-m seeds s of cos(d, normalize(q + beta * s))."""
        mids, pos, mat, _ = self.tenants[q["tenant"]]
        rows = [pos[s] for s in q["ids0"][:m]]
        q2 = q["qv"][None, :] + beta * mat[rows]
        q2 = q2 / np.linalg.norm(q2, axis=1, keepdims=True)
        return self.top_list(q, 1.0 - (mat @ q2.T).max(axis=1), True, q["K"])

    def lex_list(self, q, m: int, t: int, r: int):
        mids, pos, mat, bm = self.tenants[q["tenant"]]
        qset = set(q["tokens"])
        weight: Counter = Counter()
        for s in q["ids0"][:m]:
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
        return self.top_list(q, bm.scores(terms), False, q["K"])

    def fuse(self, q, extra: list, w: float, source: str, replace: str | None = None, also=None) -> list[int]:
        """`extra` fused as `source` with weight w, or replacing the `replace` list; `also`:
        (list, weight, source) fused on top (with a replacement)."""
        hits = dict(q["hits"])
        if replace:
            hits[replace] = extra
            fused = today(hits)
            if also is not None and also[0]:
                lst, w2, src = also
                for h, v in zip(lst, minmax_norm([h[3] for h in lst], src == "prf"), strict=True):
                    fused[h[0]] = fused.get(h[0], 0.0) + w2 * v
                hits[src] = lst
            return order(hits, fused, q["hint"])
        if not extra or w == 0:
            return q["ids0"]
        fused = dict(q["fused0"])
        for h, v in zip(extra, minmax_norm([h[3] for h in extra], source == "prf"), strict=True):
            fused[h[0]] = fused.get(h[0], 0.0) + w * v
        hits[source] = extra
        return order(hits, fused, q["hint"])


def fmt(m: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4f}" for k, v in m.items())


def sweep(ctxs: dict[str, Ctx]) -> list[dict]:
    rows = []

    def record(variant: str, params: dict, per_set: dict[str, dict[str, float]], keep: bool = True) -> None:
        if keep:
            rows.append({"variant": variant, "params": params, "metrics": per_set})
        d = {n: per_set[n]["main"] - ctxs[n].before["main"] for n in per_set}
        loc = per_set["locomo"]
        print(
            f"{variant:10s} {json.dumps(params):62s} "
            + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d)
            + " | loc "
            + " ".join(f"{g[:6]}={loc[g]:.4f}" for g in GROUPS),
            flush=True,
        )

    W = [0.1, 0.2, 0.3, 0.5, 0.8]
    # 1. vector Rocchio
    for m in (3, 5, 10):
        for beta in (0.5, 1.0, 2.0, 4.0):
            lists = {n: [c.vec_list(q, m, beta) for q in c.q] for n, c in ctxs.items()}
            for w in W:
                per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf"))) for n, c in ctxs.items()}
                record("vec", {"m": m, "beta": beta, "w": w}, per)
            per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], 0, "prf", "vector"))) for n, c in ctxs.items()}
            record("vecrep", {"m": m, "beta": beta}, per)
            # 3. gated by the first round's vector/BM25 top-10 overlap
            for g in (2, 4):
                for w in (0.2, 0.3, 0.5):
                    per = {
                        n: c.metrics(
                            c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf") if q["feat"]["overlap10"] <= g else q["ids0"])
                        )
                        for n, c in ctxs.items()
                    }
                    record("gated", {"m": m, "beta": beta, "w": w, "g": g}, per)
    # 2. lexical RM3-style
    for m in (3, 5, 10):
        for t in (5, 10, 20):
            for r in (1, 2):
                lists = {n: [c.lex_list(q, m, t, r) for q in c.q] for n, c in ctxs.items()}
                for w in (0.1, 0.2, 0.3, 0.5):
                    per = {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf_bm25"))) for n, c in ctxs.items()}
                    record("lex", {"m": m, "t": t, "r": r, "w": w}, per)
    rows += sweep2(ctxs, record)
    return rows


def sweep2(ctxs: dict[str, Ctx], record) -> list[dict]:
    """Variant 3: per-seed Rocchio (max over seeds), smaller-beta replacement, lexical PRF replacing
    the BM25 list, and vector replacement + lexical PRF together."""
    out_rows: list[dict] = []

    def rec(v, p, per):
        out_rows.append({"variant": v, "params": p, "metrics": per})
        record(v, p, per, keep=False)

    for m in (2, 3, 5):
        for beta in (0.5, 1.0, 2.0):
            lists = {n: [c.vecmax_list(q, m, beta) for q in c.q] for n, c in ctxs.items()}
            for w in (0.1, 0.2, 0.3):
                rec("vecmax", {"m": m, "beta": beta, "w": w},
                    {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], w, "prf"))) for n, c in ctxs.items()})
            rec("vecmaxrep", {"m": m, "beta": beta},
                {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, lists[n][i], 0, "prf", "vector"))) for n, c in ctxs.items()})
    for m in (2, 3, 5):
        for beta in (0.25, 0.5, 1.0):
            vl = {n: [c.vec_list(q, m, beta) for q in c.q] for n, c in ctxs.items()}
            if beta != 0.5 or m == 2:
                rec("vecrep", {"m": m, "beta": beta},
                    {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, vl[n][i], 0, "prf", "vector"))) for n, c in ctxs.items()})
            for lm, lt in ((3, 20), (10, 5)):
                ll = {n: [c.lex_list(q, lm, lt, 1) for q in c.q] for n, c in ctxs.items()}
                for w in (0.1, 0.2, 0.3):
                    rec("vecrep+lex", {"m": m, "beta": beta, "lm": lm, "t": lt, "r": 1, "w": w},
                        {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, vl[n][i], 0, "prf", "vector", (ll[n][i], w, "prf_bm25")))) for n, c in ctxs.items()})
    for m in (3, 5, 10):
        for t in (5, 10, 20):
            for r in (1, 2, 3):
                ll = {n: [c.lex_list(q, m, t, r) for q in c.q] for n, c in ctxs.items()}
                rec("lexrep", {"m": m, "t": t, "r": r},
                    {n: c.metrics(c.run_from(lambda i, q: c.fuse(q, ll[n][i], 0, "prf_bm25", "bm25"))) for n, c in ctxs.items()})
    return out_rows


def loso(ctxs: dict[str, Ctx], rows: list[dict], variants: set[str] | None = None, maximin: bool = False) -> dict:
    """Tune on four sets: feasible = no set's main metric (and, with LoCoMo among the four, no LoCoMo
    category) below today's by more than TOL; then maximize the mean main-metric gain (plus, with
    LoCoMo among the four, the multi-hop gain as a fifth term). The no-op (today) is always feasible."""
    names = list(ctxs)
    cand = [r for r in rows if variants is None or r["variant"] in variants]
    noop = {"variant": "today", "params": {}, "metrics": {n: ctxs[n].before for n in names}}
    cand = [noop, *cand]

    def score(r, train):
        gains = []
        for n in train:
            for k, v in r["metrics"][n].items():
                if v < ctxs[n].before[k] - TOL:
                    return None
            gains.append(r["metrics"][n]["main"] - ctxs[n].before["main"])
        if "locomo" in train:
            gains.append(r["metrics"]["locomo"]["multi-hop"] - ctxs["locomo"].before["multi-hop"])
        mean = sum(gains) / len(gains)
        return (min(gains), mean) if maximin else mean

    out = {}
    for held in [*names, "all"]:
        train = [n for n in names if n != held]
        scored = [(s, i) for i, r in enumerate(cand) if (s := score(r, train)) is not None]
        best = cand[max(scored)[1]]
        out[held] = {
            "variant": best["variant"],
            "params": best["params"],
            "held_out": best["metrics"][held] if held != "all" else best["metrics"],
            "before": ctxs[held].before if held != "all" else None,
        }
    return out


def cost(ctxs: dict[str, Ctx], m: int = 3, t: int = 20) -> dict[str, dict[str, float]]:
    """What the lexical PRF (m, t) reads, per query: the seeds' postings (distinct terms of the top-m
    memories), the postings the original BM25 statement reads (sum over its distinct terms of
    min(df, per_term)) and those the expanded statement reads; and the vector PRF's rows."""
    out = {}
    for n, c in ctxs.items():
        seed_rows = orig = expanded = 0.0
        for q in c.q:
            mids, pos, mat, bm = c.tenants[q["tenant"]]
            seeds = [pos[s] for s in q["ids0"][:m]]
            seed_rows += sum(len(bm.tfs[i]) for i in seeds)
            qset = set(q["tokens"])
            weight: Counter = Counter()
            for i in seeds:
                for term, tf in bm.tfs[i].items():
                    if term not in qset:
                        weight[term] += tf / (bm.doc_len[i] or 1.0)
            extra = [x for _, x in sorted(((w * bm.idf(x), x) for x, w in weight.items()), key=lambda y: (-y[0], y[1]))[:t]]
            reads = lambda terms: sum(min(len(bm.post[x][0]), PER_TERM) for x in set(terms) if x in bm.post)
            orig += reads(q["tokens"])
            expanded += reads(q["tokens"] + extra)
        k = len(c.q)
        out[n] = {
            "lex_seed_term_rows": seed_rows / k,
            "bm25_postings_today": orig / k,
            "bm25_postings_expanded": expanded / k,
            "vec_prf_rows": float(np.mean([q["K"] for q in c.q])),
            "tenant_memories": float(np.mean([len(c.tenants[q["tenant"]][0]) for q in c.q])),
        }
    return out


def main() -> int:
    t0 = time.perf_counter()
    ctxs = {n: Ctx(n) for n in SETS}
    rows = sweep(ctxs)
    result = {"before": {n: c.before for n, c in ctxs.items()}, "verify": {n: c.verified for n, c in ctxs.items()}, "rows": rows}
    result["loso"] = loso(ctxs, rows)
    for v in ("vec", "vecrep", "gated", "lex", "vecmax", "vecmaxrep", "vecrep+lex", "lexrep"):
        result[f"loso_{v}"] = loso(ctxs, rows, {v})
    result["loso_maximin"] = loso(ctxs, rows, maximin=True)
    result["cost"] = cost(ctxs)
    (OUT / "prf_results.json").write_text(json.dumps(result, indent=1) + "\n")
    for key in [k for k in result if k.startswith("loso")]:
        print("==", key)
        for held, r in result[key].items():
            if held == "all":
                print(f"  all: {r['variant']} {r['params']}")
            else:
                print(f"  {held:12s} {r['variant']:7s} {json.dumps(r['params']):40s} {fmt(r['held_out'])}  (before {fmt(r['before'])})")
    print("== cost (means per query)")
    for n, v in result["cost"].items():
        print(f"  {n:12s} " + " ".join(f"{k}={x:.0f}" for k, x in v.items()))
    print(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
