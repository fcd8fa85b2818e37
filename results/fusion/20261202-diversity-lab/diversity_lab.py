"""Redundancy in the top k (issue 14: LoCoMo multi-hop R@10, LongMemEval R_any@5): an offline lab.

In process, over the fusion lab's captures (benchmarks/fusion_capture.py -> ~/.cache/memoria-pg/fusion-lab)
and the evaluation's cached MiniLM vectors. The baseline is the lab's replay of today's SQL fusion
(fusion_lab.today + order, equal to the engine's rankings: fusion_lab.py --check). Every rule here
re-orders that final list (after the type filter) within its top W and leaves the rest as it is.

    cd /work/main && PYTHONPATH=.:benchmarks python results/fusion/20261202-diversity-lab/diversity_lab.py \
        [--part oracle|sweep|all] > results/fusion/20261202-diversity-lab/run.log

Greedy re-ranking (MMR form): over the top W, repeatedly take the candidate with the highest
    rel(c) - p * max over the already taken t of sim(c, t)
where rel = fused score / the list's best fused score. With a 0/1 sim and p large this is "demote":
the candidates redundant with a higher taken one keep their order but go after all the others of
the window. sim (label-free, from what the engine stores):
  ctx      1 when one's content occurs (as a substring) in the other's stored context
  shingle  1 when the Jaccard of the word 3-shingle sets of content + context >= t
  cos      1 when the cosine of the stored vectors (content + context) >= t
  mmr      the cosine itself (continuous MMR, lambda = 1 / (1 + p))
  ent      not a similarity: a bonus p for a candidate that brings a query entity (core.entities)
           not yet covered by the taken ones (entity keys found in its content)
Oracle (uses dataset metadata only, never in a proposed rule):
  meta     1 when same session and |turn distance| <= D (D = the set's context turns)
  label    demote only the non-evidence neighbours (metadata + labels): the ceiling
No dataset text is written anywhere: ids and numbers only.
"""

from __future__ import annotations

import argparse
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
from fusion_lab import DEFAULT_DIR, SETS, WEIGHTS, best_single, load, main_metric, order, today, leave_one_out, engine_run
from memoria_pg.core.entities import entity_key, extract_entities
from memoria_pg.core.text import normalize, tokenize

ROOT = Path("/work/shared/eval")
HERE = Path(__file__).resolve().parent
GROUPS = ("single-hop", "multi-hop", "temporal", "open-domain")
CONTEXT_TURNS = {"locomo": 2, "longmemeval": 1}
BIG = 1e6
NEAR, SLOPE = 0.3, 2.0  # today's ConfidenceShift (query/workers/registry.py, DEFAULT_SHIFT)


def engine_today(hits) -> dict[int, float]:
    """Today's fusion as final_candidates.sql computes it, with the ConfidenceShift: fusion_lab.today
    with BM25's weight moved to the vector's by min(0.5, SLOPE * (NEAR - d1)) when d1 < NEAR."""
    v = hits.get("vector", ())
    d1 = v[0][3] if v else 1.0
    shift = min(WEIGHTS["bm25"], SLOPE * max(0.0, NEAR - d1))
    w = dict(WEIGHTS, vector=WEIGHTS["vector"] + shift, bm25=WEIGHTS["bm25"] - shift)
    return today(hits, w)


def session_turn(name: str, doc_id: str) -> tuple[str, int] | None:
    if name == "locomo":  # "D3:5"
        s, t = doc_id.split(":")
        return s, int(t)
    if name == "longmemeval":  # "<session id>:<turn index>"
        s, t = doc_id.rsplit(":", 1)
        return s, int(t)
    return None


# A set captured with another embedding backend: {set: backend}; its capture is in fusion-lab-<backend>.
BACKEND: dict[str, str] = {}


class Ctx:
    def __init__(self, name: str):
        import os

        t0 = time.perf_counter()
        self.name = name
        backend = BACKEND.get(name)
        folder = DEFAULT_DIR if backend is None else DEFAULT_DIR.parent / f"fusion-lab-{backend}"
        old = os.environ.get("MEMORIA_EMBEDDING_BACKEND")
        if backend:
            os.environ["MEMORIA_EMBEDDING_BACKEND"] = backend
        else:
            os.environ.pop("MEMORIA_EMBEDDING_BACKEND", None)
        self.lab = load(name, ROOT, folder)
        cap = pickle.load(open(folder / f"{name}.pkl", "rb"))
        cache = EmbeddingCache(default_cache_dir() / f"{name}-{model_label(None)}.npz", dim=384)
        dv, qv = embed(self.lab.dataset, cache)
        assert cache.embedded == 0, "embedding cache incomplete"
        docs = {(d.tenant, d.doc_id): d for d in self.lab.dataset.documents}
        self.mem = {mid: (tenant, doc_id) for mid, tenant, doc_id, _ in cap["memories"]}
        self.docs = docs
        self.dv = dv
        self.qtext = {q.query_id: q.text for q in self.lab.dataset.queries}
        self.qobj = {q.query_id: q for q in self.lab.dataset.queries}
        self._shingles: dict[int, frozenset] = {}
        self._lower: dict[int, str] = {}
        self.q = []
        err = 0.0
        for cq in self.lab.queries:
            hits = cq["hits"]
            fused = engine_today(hits)
            ids = order(hits, fused, cq["hint"])
            # check the cached vectors against the captured distances (first 40 queries)
            if len(self.q) < 40:
                qvec = np.asarray(qv[cq["query_id"]], dtype=np.float64)
                for h in hits.get("vector", ())[:20]:
                    v = np.asarray(dv[self.mem[h[0]]], dtype=np.float64)
                    err = max(err, abs((1 - v @ qvec) - h[3]))
            self.q.append(dict(id=cq["query_id"], ids=ids, fused=fused, v4=cq["v4"]))
        self.vec_err = err
        self.cache_label = model_label(None)
        if old is None:
            os.environ.pop("MEMORIA_EMBEDDING_BACKEND", None)
        else:
            os.environ["MEMORIA_EMBEDDING_BACKEND"] = old
        same = sum(
            [self.lab.doc[m] for m in q["ids"][: self.lab.depth]] == q["v4"] for q in self.q
        )
        self.before = self.metrics(self.run_from(lambda q: q["ids"]))
        print(
            f"[{name}] {len(self.q)} queries, replay identical {same}/{len(self.q)} (engine's own "
            f"{main_metric(self.lab, engine_run(self.lab)):.4f}), vector err {err:.1e}, "
            f"loaded {time.perf_counter() - t0:.1f}s: {fmt(self.before)}",
            flush=True,
        )

    # -- stored things --
    def doc(self, mid: int):
        return self.docs[self.mem[mid]]

    def vec(self, mids) -> np.ndarray:
        m = np.stack([np.asarray(self.dv[self.mem[x]], dtype=np.float32) for x in mids])
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    def shingles(self, mid: int) -> frozenset:
        s = self._shingles.get(mid)
        if s is None:
            d = self.doc(mid)
            toks = tokenize(d.content + "\n" + (d.context or ""))
            s = frozenset(zip(toks, toks[1:], toks[2:])) if len(toks) >= 3 else frozenset([tuple(toks)])
            self._shingles[mid] = s
        return s

    def lower(self, mid: int) -> str:
        s = self._lower.get(mid)
        if s is None:
            s = self._lower[mid] = normalize(self.doc(mid).content).casefold()
        return s

    def content_score(self, qid: str, mids: list[int]) -> np.ndarray:
        """sum of the Lucene IDF of the query's distinct terms found in each candidate's content (not its
        context): which member of a lit-up region matches by its own words."""
        if not hasattr(self, "_df"):
            self._df = {}
            self._ndocs = Counter()
            for d in self.lab.dataset.documents:
                self._ndocs[d.tenant] += 1
                for tok in set(tokenize(d.content + "\n" + (d.context or ""))):
                    self._df[(d.tenant, tok)] = self._df.get((d.tenant, tok), 0) + 1
            self._qtok = {}
            self._ctok = {}
        qo = self.qobj[qid]
        qt = self._qtok.get(qid)
        if qt is None:
            qt = self._qtok[qid] = set(tokenize(normalize(qo.text)))
        n = self._ndocs[qo.tenant]
        out = np.zeros(len(mids))
        for i, m in enumerate(mids):
            ct = self._ctok.get(m)
            if ct is None:
                ct = self._ctok[m] = frozenset(tokenize(self.doc(m).content))
            for tok in qt & ct:
                df = self._df.get((qo.tenant, tok), 0)
                out[i] += math.log(1 + (n - df + 0.5) / (df + 0.5))
        return out

    # -- runs and metrics --
    def run_from(self, ranker) -> dict[str, list[str]]:
        return {q["id"]: [self.lab.doc[m] for m in ranker(q)[: self.lab.depth]] for q in self.q}

    def metrics(self, run) -> dict[str, float]:
        out = {"main": main_metric(self.lab, run)}
        if self.name == "locomo":
            for g in GROUPS:
                out[g] = main_metric(self.lab, run, g)
        return out


def fmt(m: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4f}" for k, v in m.items())


# -- similarity matrices over a query's top W (cached per query, W and kind) ------------------------
SIMCACHE: dict = {}


WMAX = 50


def sim_matrix(c: Ctx, q: dict, W: int, kind: str, t: float | None = None) -> np.ndarray:
    """sim over the top W; the raw matrices are computed once per query over the top WMAX."""
    if kind == "cos":
        return (sim_matrix(c, q, W, "cosraw") >= t).astype(float)
    if kind == "shingle":
        return (sim_matrix(c, q, W, "jac") >= t).astype(float)
    if kind == "cosctx":  # cos, counted only between memories that were both stored with a context
        has = np.array([bool(c.doc(x).context) for x in q["ids"][:W]], dtype=float)
        return (sim_matrix(c, q, W, "cosraw") >= t).astype(float) * has[:, None] * has[None, :]
    if kind == "meta" and t is not None:
        raise ValueError("meta uses the set's context turns")
    key = (c.name, q["id"], kind)
    got = SIMCACHE.get(key)
    if got is None:
        got = SIMCACHE[key] = raw_matrix(c, q["ids"][:WMAX], kind)
    return got[:W, :W]


def raw_matrix(c: Ctx, ids: list[int], kind: str) -> np.ndarray:
    n = len(ids)
    if kind == "cosraw":
        v = c.vec(ids) if n else np.zeros((0, 384), np.float32)
        m = (v @ v.T).astype(np.float32)
    elif kind == "ctx":
        docs = [c.doc(x) for x in ids]
        m = np.zeros((n, n), np.float32)
        for i in range(n):
            ci = docs[i].context or ""
            if not ci:
                continue
            for j in range(n):
                if i != j and docs[j].content and docs[j].content in ci:
                    m[i, j] = m[j, i] = 1.0
    elif kind == "jac":
        sh = [c.shingles(x) for x in ids]
        m = np.zeros((n, n), np.float32)
        for i in range(n):
            for j in range(i + 1, n):
                u = len(sh[i] | sh[j])
                m[i, j] = m[j, i] = len(sh[i] & sh[j]) / u if u else 0.0
    elif kind == "meta":
        st = [session_turn(c.name, c.lab.doc[x]) for x in ids]
        D = CONTEXT_TURNS.get(c.name, 0)
        m = np.zeros((n, n), np.float32)
        for i in range(n):
            for j in range(n):
                if i != j and st[i] and st[j] and st[i][0] == st[j][0] and abs(st[i][1] - st[j][1]) <= D:
                    m[i, j] = 1.0
    else:
        raise ValueError(kind)
    np.fill_diagonal(m, 0.0)
    return m


def greedy(
    ids: list[int], rel: np.ndarray, sim: np.ndarray, p: float, W: int, c: int = 1, keep: int = 0
) -> list[int]:
    """c > 1 (0/1 sims only): penalized once c already-taken candidates are similar to it.
    keep: the first `keep` places stay as they are (taken first, in order)."""
    head = ids[:W]
    n = len(head)
    if n <= 1:
        return ids
    taken: list[int] = []
    free = np.ones(n, bool)
    acc = np.zeros(n)
    for i in range(min(keep, n)):
        taken.append(i)
        free[i] = False
        acc = np.maximum(acc, sim[i]) if c == 1 else acc + sim[i]
    for _ in range(n - len(taken)):
        pen = acc if c == 1 else (acc >= c).astype(float)
        score = np.where(free, rel - p * pen, -np.inf)
        i = int(np.argmax(score))  # ties: the earlier (higher-ranked) one
        taken.append(i)
        free[i] = False
        acc = np.maximum(acc, sim[i]) if c == 1 else acc + sim[i]
    return [head[i] for i in taken] + ids[W:]


def rel_of(q: dict, W: int) -> np.ndarray:
    f = np.array([q["fused"][m] for m in q["ids"][:W]], dtype=float)
    top = f.max() if len(f) and f.max() > 0 else 1.0
    return f / top


def rule_run(
    c: Ctx, kind: str, W: int, p: float, t: float | None = None, cap: int = 1, a: float = 0.0, keep: int = 0
) -> dict[str, list[str]]:
    def ranker(q):
        if kind == "none" or (p == 0 and not a):
            return q["ids"]
        rel = rel_of(q, W)
        if a and kind.startswith("entb"):
            ents = query_entities(c, q)
            cov = np.array([sum(e in c.lower(m) for e in ents) / len(ents) if ents else 0.0 for m in q["ids"][:W]])
            rel = rel + a * cov
            if kind == "entb" or p == 0:
                order_ = np.lexsort((np.arange(len(rel)), -rel))
                return [q["ids"][i] for i in order_] + q["ids"][W:]
            sim = sim_matrix(c, q, W, "cosctx", t) if kind == "entbcos" else sim_matrix(c, q, W, "ctx")
            return greedy(q["ids"], rel, sim, p, W, cap, keep)
        if a:
            cs = c.content_score(q["id"], q["ids"][:W])
            rel = rel + a * (cs / cs.max() if cs.max() > 0 else cs)
            if p == 0:
                order_ = np.lexsort((np.arange(len(rel)), -rel))
                return [q["ids"][i] for i in order_] + q["ids"][W:]
        if kind == "ent":
            return entity_greedy(c, q, rel, p, W)
        if kind == "mmr":
            sim = sim_matrix(c, q, W, "cosraw")
        else:
            sim = sim_matrix(c, q, W, kind, t)
        return greedy(q["ids"], rel, sim, p, W, cap, keep)

    return c.run_from(ranker)


QENT: dict = {}


def query_entities(c: Ctx, q: dict) -> list[str]:
    ents = QENT.get(q["id"])
    if ents is None:
        ents = QENT[q["id"]] = [k for k in (entity_key(e) for e in extract_entities(normalize(c.qtext[q["id"]]))) if k]
    return ents


def entity_greedy(c: Ctx, q: dict, rel: np.ndarray, p: float, W: int) -> list[int]:
    ents = QENT.get(q["id"])
    if ents is None:
        ents = QENT[q["id"]] = [k for k in (entity_key(e) for e in extract_entities(normalize(c.qtext[q["id"]]))) if k]
    ids = q["ids"]
    if len(ents) < 2:
        return ids
    head = ids[:W]
    cover = [frozenset(e for e in ents if e in c.lower(m)) for m in head]
    covered: set = set()
    free = list(range(len(head)))
    taken = []
    while free:
        best = max(free, key=lambda i: (rel[i] + p * bool(cover[i] - covered), -i))
        taken.append(best)
        free.remove(best)
        covered |= cover[best]
    return [head[i] for i in taken] + ids[W:]


# -- (a) oracle and diagnosis ----------------------------------------------------------------------
def oracle(ctxs: dict[str, Ctx]) -> dict:
    out: dict = {}
    for name in [n for n in ("locomo", "longmemeval") if n in ctxs]:
        c = ctxs[name]
        D = CONTEXT_TURNS[name]
        k = 10 if name == "locomo" else 5
        # diagnosis per group
        diag: dict = defaultdict(lambda: Counter())
        for q in c.q:
            qo = c.qobj[q["id"]]
            if not qo.relevant or qo.group == "adversarial":
                continue
            top = [c.lab.doc[m] for m in q["ids"][:k]]
            st = [session_turn(name, d) for d in top]
            nb = 0
            nb_ev = 0
            for j in range(len(top)):
                is_nb = any(st[i][0] == st[j][0] and abs(st[i][1] - st[j][1]) <= D for i in range(j))
                if is_nb and top[j] not in qo.relevant:
                    nb += 1
                if is_nb and top[j] in qo.relevant:
                    nb_ev += 1
            g = diag[qo.group]
            g["questions"] += 1
            g["slots_nonev_neighbour"] += nb
            g["slots_ev_neighbour"] += nb_ev
            g["with_any"] += nb > 0
            g["evidence"] += len(qo.relevant)
            g["ev_in_topk"] += len(set(top) & qo.relevant)
            for W in (20, 30, 50, 100):
                g[f"ev_in_top{W}"] += len({c.lab.doc[m] for m in q["ids"][:W]} & qo.relevant)
            # evidence turns missing from top k that are in another session than every top-k evidence
            found_sessions = {session_turn(name, d)[0] for d in set(top) & qo.relevant}
            missing = qo.relevant - set(top)
            g["missing"] += len(missing)
            g["missing_other_session"] += sum(session_turn(name, d)[0] not in found_sessions for d in missing)
            g["ev_pairs_adjacent"] += sum(
                1
                for a in qo.relevant
                for b in qo.relevant
                if a < b
                and session_turn(name, a)[0] == session_turn(name, b)[0]
                and abs(session_turn(name, a)[1] - session_turn(name, b)[1]) <= D
            )
        out[f"{name}_diagnosis"] = {g: dict(v) for g, v in diag.items()}

        # oracle re-rankings (window 50 / 100: the list's depth)
        res = {"replay": c.before}
        W = c.lab.depth

        def label_ranker(q):
            qo = c.qobj[q["id"]]
            ids = q["ids"]
            st = [session_turn(name, c.lab.doc[m]) for m in ids[:W]]
            keep, demoted = [], []
            for j, m in enumerate(ids[:W]):
                is_nb = any(st[i][0] == st[j][0] and abs(st[i][1] - st[j][1]) <= D for i in range(j))
                (demoted if is_nb and c.lab.doc[m] not in qo.relevant else keep).append(m)
            return keep + demoted + ids[W:]

        res["label: demote non-evidence neighbours of any higher-ranked"] = c.metrics(c.run_from(label_ranker))
        for WW in (10, 20, 30, 50):
            res[f"meta: demote neighbours of a kept higher-ranked, W={WW}"] = c.metrics(rule_run(c, "meta", WW, BIG))
        for cap in (2, 3):
            for WW in (15, 20, 30):
                res[f"meta: demote when >= {cap} kept higher-ranked neighbours, W={WW}"] = c.metrics(
                    rule_run(c, "meta", WW, BIG, cap=cap)
                )
        for keep in (3, 5, 7):
            for WW in (15, 30):
                res[f"meta: top {keep} kept, then demote neighbours of a kept higher-ranked, W={WW}"] = c.metrics(
                    rule_run(c, "meta", WW, BIG, keep=keep)
                )
        for p in (0.02, 0.05, 0.1, 0.2):
            res[f"meta: soft penalty p={p} per kept neighbour (max), W=30"] = c.metrics(rule_run(c, "meta", 30, p))
        out[f"{name}_oracle"] = res
    return out


# -- (b)/(c) the label-free families ----------------------------------------------------------------
FAMKIND = {"ctxc": "ctx", "content": "ctx", "ctxkeep": "ctx", "coskeep": "cos"}
FAMILIES = {
    "ctx": [dict(W=W, p=p) for W in (15, 20, 30, 50) for p in (0.02, 0.05, 0.1, 0.2, 0.3, BIG)]
    + [dict(W=W, p=p, cap=cap) for W in (15, 20, 30) for p in (0.05, 0.1, 0.2, BIG) for cap in (2, 3)],
    "ctxkeep": [dict(W=W, p=p, keep=keep) for W in (15, 30) for p in (0.05, 0.2, BIG) for keep in (3, 5, 7)],
    "shingle": [dict(W=W, p=p, t=t) for W in (15, 30) for t in (0.2, 0.3, 0.4, 0.5, 0.6) for p in (0.1, 0.3, BIG)],
    "cos": [dict(W=W, p=p, t=t) for W in (15, 30) for t in (0.7, 0.75, 0.8, 0.85, 0.9) for p in (0.1, 0.3, BIG)],
    "coskeep": [dict(W=W, p=BIG, t=t, keep=keep) for W in (15, 30) for t in (0.8, 0.85, 0.9) for keep in (3, 5)],
    "cosctx": [dict(W=W, p=p, t=t) for W in (12, 15, 20) for t in (0.65, 0.7, 0.75, 0.8) for p in (0.03, 0.05, 0.1, 0.15, 0.2)],
    "mmr": [dict(W=W, p=p) for W in (15, 20, 30) for p in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)],
    "ent": [dict(W=W, p=p) for W in (15, 30) for p in (0.05, 0.1, 0.2, 0.5, BIG)],
    "entb": [dict(W=W, p=0, a=a) for W in (15, 20, 30) for a in (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)],
    "entbcos": [dict(W=15, p=p, t=t, a=a) for p in (0.05, 0.1) for t in (0.75, 0.8) for a in (0.05, 0.1, 0.2, 0.3)],
    "entbctx": [dict(W=W, p=p, a=a) for W in (15, 20) for p in (0.05, 0.1, 0.2) for a in (0.05, 0.1, 0.2)],
    "content": [dict(W=W, p=0, a=a) for W in (20, 30) for a in (0.05, 0.1, 0.2, 0.3, 0.5)],
    "ctxc": [dict(W=W, p=p, a=a) for W in (20, 30) for p in (0.05, 0.2, BIG) for a in (0.1, 0.3)],
}


def sweep(ctxs: dict[str, Ctx], families) -> list[dict]:
    rows = []
    for fam in families:
        for params in FAMILIES[fam]:
            t0 = time.perf_counter()
            runs = {
                n: rule_run(c, FAMKIND.get(fam, fam), params["W"], params["p"], params.get("t"), params.get("cap", 1), params.get("a", 0.0), params.get("keep", 0))
                for n, c in ctxs.items()
            }
            per = {n: c.metrics(runs[n]) for n, c in ctxs.items()}
            row = {"family": fam, "params": params, "metrics": per}
            if "longmemeval" in ctxs:
                row["lme_hits"] = lme_hits(ctxs["longmemeval"], runs["longmemeval"])
            rows.append(row)
            d = {n: per[n]["main"] - ctxs[n].before["main"] for n in per}
            loc = per.get("locomo", {})
            print(
                f"{fam:8s} {json.dumps(params):40s} "
                + " ".join(f"{n[:5]}{d[n]:+.4f}" for n in d)
                + " | loc "
                + " ".join(f"{g[:6]}={loc[g]:.4f}" for g in GROUPS if g in loc)
                + f"  ({time.perf_counter() - t0:.1f}s)",
                flush=True,
            )
    return rows


def lme_hits(c: Ctx, run) -> list[str]:
    return sorted(q.query_id for q in c.lab.dataset.queries if q.relevant and set(run.get(q.query_id, ())[:5]) & q.relevant)


def lme_study(c: Ctx) -> dict:
    """(d) the LongMemEval questions ref_rrf finds in its top 5 and the replay does not."""
    from evals.reference import reference_runs

    cache = EmbeddingCache(default_cache_dir() / f"longmemeval-{c.cache_label}.npz", dim=384)
    dv, qv = embed(c.lab.dataset, cache)
    assert cache.embedded == 0
    refs = reference_runs(c.lab.dataset, dv, qv, names=["ref_dense", "ref_bm25", "ref_rrf"], depth=100)
    replay = c.run_from(lambda q: q["ids"])
    caps = {cq["query_id"]: cq for cq in c.lab.queries}
    out = {"ref_rrf": main_metric(c.lab, refs["ref_rrf"]), "replay": main_metric(c.lab, replay), "questions": []}
    for qo in c.lab.dataset.queries:
        if not qo.relevant:
            continue
        r_hit = bool(set(refs["ref_rrf"][qo.query_id][:5]) & qo.relevant)
        e_hit = bool(set(replay[qo.query_id][:5]) & qo.relevant)
        if r_hit == e_hit:
            continue
        cq = caps[qo.query_id]

        def ranks(lst):
            return sorted(i + 1 for i, d in enumerate(lst) if d in qo.relevant)

        src = {s: ranks([c.lab.doc[h[0]] for h in hs]) for s, hs in cq["hits"].items()}
        q = next(x for x in c.q if x["id"] == qo.query_id)
        fused_top = [(c.lab.doc[m], round(q["fused"][m], 4), c.lab.doc[m] in qo.relevant) for m in q["ids"][:8]]
        out["questions"].append(
            {
                "query_id": qo.query_id,
                "type": qo.group,
                "ref_rrf_hit5": r_hit,
                "replay_hit5": e_hit,
                "n_evidence": len(qo.relevant),
                "replay_ranks": ranks(replay[qo.query_id]),
                "ref_rrf_ranks": ranks(refs["ref_rrf"][qo.query_id]),
                "ref_dense_ranks": ranks(refs["ref_dense"][qo.query_id]),
                "ref_bm25_ranks": ranks(refs["ref_bm25"][qo.query_id]),
                "engine_source_ranks": src,
                "replay_top8 (doc id, fused, evidence)": fused_top,
                "hint": cq["hint"],
            }
        )
    return out


def loso_tables(ctxs: dict[str, Ctx], rows: list[dict]) -> dict:
    """fusion_lab.leave_one_out per family (with the no-op point in the grid) and over all families."""
    labs = [c.lab for c in ctxs.values()]
    out = {}
    noop = {"family": "none", "params": {}, "metrics": {n: c.before for n, c in ctxs.items()}}
    groups = {fam: [r for r in rows if r["family"] == fam] for fam in dict.fromkeys(r["family"] for r in rows)}
    groups["all families"] = rows
    for fam, rs in groups.items():
        rs = [noop, *rs]
        table = [((r["family"], json.dumps(r["params"])), {n: r["metrics"][n]["main"] for n in ctxs}) for r in rs]
        chosen = leave_one_out(labs, table)
        res = {}
        for held, (params, value) in chosen.items():
            row = next(r for r in rs if (r["family"], json.dumps(r["params"])) == params)
            res[held] = {
                "params": params,
                "held_out": value,
                "delta": (value - ctxs[held].before["main"]) if held != "all" else math.nan,
                "all_metrics": {n: row["metrics"][n] for n in ctxs},
            }
        out[fam] = res
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="all")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--backend", action="append", default=[], help="SET=BACKEND: a set captured with another embedding backend")
    args = ap.parse_args()
    for item in args.backend:
        k, v = item.split("=")
        BACKEND[k] = v
    ctxs = {n: Ctx(n) for n in args.sets.split(",")}
    result: dict = {"before": {n: c.before for n, c in ctxs.items()}, "single": {}}
    for n, c in ctxs.items():
        result["single"][n] = best_single(c.lab)
    if args.part in ("oracle", "all") and {"locomo", "longmemeval"} & set(ctxs):
        t0 = time.perf_counter()
        result["oracle"] = oracle(ctxs)
        print(json.dumps(result["oracle"], indent=1), flush=True)
        print(f"oracle in {time.perf_counter() - t0:.1f}s", flush=True)
        (HERE / ("oracle5.json" if BACKEND else "oracle.json")).write_text(json.dumps(result["oracle"], indent=1) + "\n")
    if args.part in ("lme", "all") and "longmemeval" in ctxs:
        result["lme"] = lme_study(ctxs["longmemeval"])
        print(json.dumps(result["lme"], indent=1), flush=True)
        (HERE / "lme.json").write_text(json.dumps(result["lme"], indent=1) + "\n")
    if args.part in ("sweep", "all"):
        rows = sweep(ctxs, args.families.split(","))
        result["rows"] = rows
        if len(ctxs) >= 2:
            result["loso"] = loso_tables(ctxs, rows)
            for fam, res in result["loso"].items():
                print(f"LOSO {fam}:")
                for held, r in res.items():
                    print(f"   held {held:12s} {r['params']} held-out {r['held_out']:.4f} ({r['delta']:+.4f})")
        (HERE / f"{'sweep5' if BACKEND else 'sweep'}-{args.families.replace(',', '_')}.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
