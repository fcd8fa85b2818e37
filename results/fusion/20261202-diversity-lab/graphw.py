"""Control for the entity boost: the captured `graph` worker's hits (entity matches, weight 0 in today's
fusion) given a weight w in the fused score, everything else as today's engine (with the shift).

    cd /work/main && PYTHONPATH=.:benchmarks python results/fusion/20261202-diversity-lab/graphw.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diversity_lab as d  # noqa: E402
from fusion_lab import WEIGHTS, order, today  # noqa: E402

ctxs = {n: d.Ctx(n) for n in ("locomo", "scifact", "hotpotqa", "msmarco")}
for n, c in ctxs.items():
    lens = [len(cq["hits"].get("graph", ())) for cq in c.lab.queries]
    print(f"{n}: graph hits per query mean {sum(lens) / len(lens):.1f}, queries with any {sum(x > 0 for x in lens)}/{len(lens)}")


def rule(w):
    def fuse(hits):
        v = hits.get("vector", ())
        d1 = v[0][3] if v else 1.0
        shift = min(0.5, d.SLOPE * max(0.0, d.NEAR - d1))
        return today(hits, dict(WEIGHTS, vector=0.5 + shift, bm25=0.5 - shift, graph=w))

    return fuse


for w in (0.0, 0.05, 0.1, 0.2, 0.3):
    out = []
    for n, c in ctxs.items():
        run = {cq["query_id"]: [c.lab.doc[m] for m in order(cq["hits"], rule(w)(cq["hits"]), cq["hint"])[: c.lab.depth]] for cq in c.lab.queries}
        m = c.metrics(run)
        out.append(f"{n} {m['main'] - c.before['main']:+.4f}")
        if n == "locomo":
            loc = " ".join(f"{g[:6]}={m[g]:.4f}" for g in d.GROUPS)
    print(f"graph weight {w}: " + " ".join(out) + " | " + loc)
