"""Coverage lab: does the share of the query's IDF mass that BM25's best hits match tell when BM25 is
weak evidence? In process over the fusion lab's captures; BM25 rebuilt in process (prf_lab.BM25)."""

from __future__ import annotations

import itertools
import math
import pickle
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path[:0] = ["/work/main/benchmarks", "/work/main/results/fusion/20261201-prf-lab"]
import fusion_lab as fl  # noqa: E402
from prf_lab import BM25  # noqa: E402

from memoria_pg import indexed_tokens, normalize, tokenize  # noqa: E402

ROOT = Path("/work/shared/eval")
K1 = 1.2


def coverage_features(lab: fl.LabSet) -> dict[str, dict[str, float]]:
    cap = pickle.load(open(fl.DEFAULT_DIR / f"{lab.name}.pkl", "rb"))
    docs = {(d.tenant, d.doc_id): d for d in lab.dataset.documents}
    qtext = {q.query_id: q.text for q in lab.dataset.queries}
    by_tenant: dict[str, list] = defaultdict(list)
    for mid, tenant, doc_id, _mtype in sorted(cap["memories"]):
        by_tenant[tenant].append((mid, doc_id))
    tenants = {}
    for tenant, rows in by_tenant.items():
        toks = [indexed_tokens(docs[(tenant, r[1])].content, docs[(tenant, r[1])].context) for r in rows]
        tenants[tenant] = ({int(r[0]): i for i, r in enumerate(rows)}, BM25(toks))
    out = {}
    for q in lab.queries:
        pos, bm = tenants[q["tenant"]]
        qtf = Counter(tokenize(normalize(qtext[q["query_id"]])))
        idf = {t: bm.idf(t) for t in qtf}
        mass = sum(qtf[t] * idf[t] for t in qtf if idf[t] > 0)
        bh = q["hits"].get("bm25", ())
        f: dict[str, float] = {"nterms": float(sum(1 for t in qtf if idf[t] > 0))}
        if not bh or mass <= 0:
            f.update(m1=math.nan, m10=math.nan, c1=math.nan)
        else:
            def matched(mid: int) -> float:
                tf = bm.tfs[pos[mid]]
                return sum(qtf[t] * idf[t] for t in qtf if idf[t] > 0 and tf.get(t, 0) > 0) / mass

            f["m1"] = matched(bh[0][0])
            top = [matched(h[0]) for h in bh[:10]]
            f["m10"] = float(np.mean(top))
            f["mmax"] = max(top)
            f["c1"] = bh[0][3] / (mass * (K1 + 1))
        out[q["query_id"]] = f
    return out


def rule(params):
    def weights(f):
        d1 = 1.0 if math.isnan(f["d1"]) else f["d1"]
        shift = min(0.5, params["slope"] * max(0.0, params["near"] - d1))
        feat = f.get(params["feat"], math.nan)
        if not math.isnan(feat):
            shift = min(0.5, shift + params["slope2"] * max(0.0, params["c0"] - feat))
        return 0.5 + shift, 0.5 - shift

    return weights


def main() -> None:
    sets = sys.argv[1].split(",") if len(sys.argv) > 1 else list(fl.SETS)
    labs = [fl.load(n, ROOT) for n in sets]
    prepared = {}
    for lab in labs:
        feats = coverage_features(lab)
        prep = fl.prepare(lab)
        for p in prep:
            p.features.update(feats[p.query_id])
        prepared[lab.name] = prep
        vals = [p.features for p in prep]
        for key in ("m1", "m10", "mmax", "c1", "nterms"):
            xs = [v[key] for v in vals if key in v and not math.isnan(v[key])]
            print(f"{lab.name} {key}: median {np.median(xs):.3f} p10 {np.percentile(xs, 10):.3f} p90 {np.percentile(xs, 90):.3f}")
        if lab.name == "longmemeval":
            for p in prep:
                if p.query_id.startswith("1a1907b4"):
                    print("1a1907b4", {k: round(v, 3) for k, v in p.features.items()})
    space = {
        "near": [0.25, 0.3, 0.35],
        "slope": [1.0, 2.0, 3.0],
        "feat": ["m1", "m10", "mmax", "c1"],
        "c0": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
        "slope2": [0.0, 0.25, 0.5, 1.0, 2.0],
    }
    rows = []
    for p in fl.grid(space):
        if p["slope2"] == 0.0 and (p["feat"] != "m1" or p["c0"] != 0.2):
            continue
        rows.append((p, {lab.name: fl.main_metric(lab, fl.fast_run(lab, prepared[lab.name], rule(p))) for lab in labs}))
    base = next(v for p, v in rows if p["near"] == 0.3 and p["slope"] == 2.0 and p["slope2"] == 0.0)
    print("base (today)", {k: round(v, 4) for k, v in base.items()})
    chosen = fl.leave_one_out(labs, rows)
    for held, (params, value) in chosen.items():
        if held == "all":
            final = next(v for p, v in rows if p == params)
            print("final", params, {k: round(v, 4) for k, v in final.items()})
        else:
            print(f"held out {held}: {params} -> {value:.4f} (today {base[held]:.4f})")
    # best LME rows that keep the others within 0.002 of today
    ok = [
        (p, v) for p, v in rows
        if all(v[n] >= base[n] - 0.002 for n in v if n != "longmemeval") and v.get("longmemeval", 0) > base.get("longmemeval", 1)
    ]
    lifts = [(p, v) for p, v in rows if v.get("longmemeval", 0) > base.get("longmemeval", 1)]
    print(f"{len(lifts)} of {len(rows)} rows lift LongMemEval at all; the 5 that lose least elsewhere:")
    for p, v in sorted(lifts, key=lambda r: -min(r[1][n] - base[n] for n in r[1] if n != "longmemeval"))[:5]:
        print(" ", p, {k: round(x - base[k], 4) for k, x in v.items()})
    print(f"{len(ok)} rows lift LongMemEval and hold the others within 0.002:")
    for p, v in sorted(ok, key=lambda r: -sum(r[1].values()))[:15]:
        print(" ", p, {k: round(x, 4) for k, x in v.items()})


if __name__ == "__main__":
    main()
