"""Markdown tables from diversity_lab.py's JSON (oracle.json, sweep-*.json) for the README.

    cd /work/main && python results/fusion/20261202-diversity-lab/summarize.py > results/fusion/20261202-diversity-lab/tables.md
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
G = ("single-hop", "multi-hop", "temporal", "open-domain")
TOL = 0.005

rows, loso, before = [], {}, None
PREFIX = sys.argv[1] if len(sys.argv) > 1 else "sweep"  # "sweep5": the five-set run (LongMemEval on ONNX int8)
for path in sorted(HERE.glob(f"{PREFIX}-*.json")):
    r = json.loads(path.read_text())
    before = r["before"]
    seen = {(x["family"], json.dumps(x["params"])) for x in rows}
    rows += [x for x in r.get("rows", []) if (x["family"], json.dumps(x["params"])) not in seen]
    for fam, res in r.get("loso", {}).items():
        if fam != "all families":
            loso.setdefault(fam, res)
sets = list(before)


def cells(m):
    return [f"{m[n]['main']:.4f}" for n in sets] + [f"{m['locomo'][g]:.4f}" for g in G]


def deltas(m):
    return [f"{m[n]['main'] - before[n]['main']:+.4f}" for n in sets] + [
        f"{m['locomo'][g] - before['locomo'][g]:+.4f}" for g in G
    ]


def ok(m):
    return all(m[n]["main"] >= before[n]["main"] - TOL for n in sets) and all(
        m["locomo"][g] >= before["locomo"][g] - TOL for g in G
    )


head = "| rule | params | " + " | ".join(sets) + " | " + " | ".join(f"LoCoMo {g}" for g in G) + " |"
sep = "|---|---|" + "---|" * (len(sets) + len(G))
print("### Baseline (the lab's replay of today's engine)\n")
print(head)
print(sep)
print("| replay | today (ConfidenceShift 0.3 / 2.0) | " + " | ".join(cells(before)) + " |")

print("\n### Oracle (a): LoCoMo\n")
o = json.loads((HERE / ("oracle5.json" if PREFIX == "sweep5" else "oracle.json")).read_text())
print("| re-ranking | overall | " + " | ".join(G) + " |")
print("|---|---|" + "---|" * len(G))
for k, v in o["locomo_oracle"].items():
    print(f"| {k} | {v['main']:.4f} | " + " | ".join(f"{v[g]:.4f}" for g in G) + " |")
print("\nDiagnosis (top 10 of the replay; a neighbour: same session, |turn distance| <= 2, of a higher-ranked memory):\n")
print("| category | questions | non-evidence neighbour slots / question | evidence in top 10 | of which below a neighbour | evidence in top 20 / 30 / 50 | all evidence | missing evidence in a session with no found evidence |")
print("|---|---|---|---|---|---|---|---|")
for g in G:
    d = o["locomo_diagnosis"][g]
    print(
        f"| {g} | {d['questions']} | {d['slots_nonev_neighbour'] / d['questions']:.2f} | {d['ev_in_topk']} | "
        f"{d['slots_ev_neighbour']} ({d['slots_ev_neighbour'] / d['ev_in_topk']:.0%}) | "
        f"{d['ev_in_top20']} / {d['ev_in_top30']} / {d['ev_in_top50']} | {d['evidence']} | "
        f"{d['missing_other_session']} of {d['missing']} |"
    )

if "longmemeval_oracle" in o:
    print("\n### Oracle (a): LongMemEval (R_any@5; neighbour: same session, |turn distance| <= 1)\n")
    print("| re-ranking | R_any@5 |")
    print("|---|---|")
    for k, v in o["longmemeval_oracle"].items():
        print(f"| {k} | {v['main']:.4f} |")
    dg = o["longmemeval_diagnosis"]
    for g, d in dg.items():
        pass
    q = sum(d["questions"] for d in dg.values())
    print(f"\nTop 5 of the replay: {sum(d['slots_nonev_neighbour'] for d in dg.values()) / q:.2f} non-evidence neighbour slots "
          f"per question ({q} questions with evidence).")

print("\n### Label-free families (b/c): deltas against the replay\n")
print("Per family: the point with the highest LoCoMo multi-hop, and the one with the highest multi-hop among those that lose")
print(f"at most {TOL} on every set and every LoCoMo category (\"within floors\"), with how many points of the grid are within.\n")
print("| family | which | params | " + " | ".join(sets) + " | " + " | ".join(f"LoCoMo {g}" for g in G) + " |")
print("|---|---|---|" + "---|" * (len(sets) + len(G)))
for fam in dict.fromkeys(x["family"] for x in rows):
    rs = [x for x in rows if x["family"] == fam]
    best = max(rs, key=lambda x: x["metrics"]["locomo"]["multi-hop"])
    good = [x for x in rs if ok(x["metrics"])]
    print(f"| {fam} | max multi-hop | `{json.dumps(best['params'])}` | " + " | ".join(deltas(best["metrics"])) + " |")
    if good:
        bo = max(good, key=lambda x: (x["metrics"]["locomo"]["multi-hop"], x["metrics"]["locomo"]["main"]))
        print(f"| {fam} | within floors ({len(good)}/{len(rs)}) | `{json.dumps(bo['params'])}` | " + " | ".join(deltas(bo["metrics"])) + " |")
    else:
        print(f"| {fam} | within floors (0/{len(rs)}) | - |" + " |" * (len(sets) + len(G)))

print("\n### Leave-one-set-out (fusion_lab.leave_one_out, the no-op in every grid): held-out figure (delta)\n")
print("| family | " + " | ".join(f"held {n}" for n in sets) + " | LoCoMo categories held out (single / multi / temporal / open) | chosen on all |")
print("|---|" + "---|" * (len(sets) + 2))
for fam, res in loso.items():
    cs = []
    for n in sets:
        r = res[n]
        cs.append(f"{r['held_out']:.4f} ({r['delta']:+.4f}) `{r['params'][0]} {r['params'][1]}`")
    lm = res["locomo"]["all_metrics"]["locomo"]
    mh = " / ".join(f"{lm[g]:.4f}" for g in G)
    allp = res["all"]["params"]
    print(f"| {fam} | " + " | ".join(cs) + f" | {mh} | `{allp[0]} {allp[1]}` |")
