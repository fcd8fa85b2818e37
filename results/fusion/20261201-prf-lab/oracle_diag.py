"""Diagnostic (uses labels, NOT a rule): how far could a PRF second round go on LoCoMo multi-hop if
its seeds were perfect (the gold evidence found in today's top 10)? And how alike are the gold turns
of one question to each other, compared with the question?"""
import sys
sys.path.insert(0, '/work/lab-mh')
import numpy as np
import prf_lab as P
c = P.Ctx('locomo')
qs = {q.query_id: q for q in c.lab.dataset.queries}
docid = c.lab.doc
rev = {}
for mid, d in docid.items():
    rev.setdefault(d, []).append(mid)
tenant_of = {}
def gold_mids(cq, q):
    mids, pos, mat, bm = c.tenants[cq['tenant']]
    return [m for m in mids if docid[int(m)] in q.relevant]
sims_gg, sims_qg, sims_qr = [], [], []
for cq in c.q:
    q = qs[cq['id']]
    if q.group != 'multi-hop' or len(q.relevant) < 2: continue
    mids, pos, mat, bm = c.tenants[cq['tenant']]
    g = [pos[int(m)] for m in gold_mids(cq, q)]
    G = mat[g]
    S = G @ G.T
    iu = np.triu_indices(len(g), 1)
    sims_gg.append(S[iu].mean()); sims_qg.append((G @ cq['qv']).mean())
    sims_qr.append(np.sort(mat @ cq['qv'])[-10])
print('multi-hop: mean cos gold-gold %.3f, query-gold %.3f, query-10th best %.3f' % (np.mean(sims_gg), np.mean(sims_qg), np.mean(sims_qr)))
for variant in ('vec', 'vecrep'):
    for beta in (0.5, 1.0, 2.0):
        for w in ((0.2, 0.5) if variant == 'vec' else (0,)):
            vals = {}
            def rank(i, cq):
                q = qs[cq['id']]
                seeds = [m for m in cq['ids0'][:10] if docid[m] in q.relevant]
                if not seeds: return cq['ids0']
                lst = c.vec_list(cq, 0, beta, seeds=seeds)
                return c.fuse(cq, lst, w, 'prf', 'vector' if variant == 'vecrep' else None)
            r = c.metrics(c.run_from(rank))
            print('ORACLE seeds', variant, beta, w, P.fmt(r))

# heavier vector weight, the lexical PRF and both, all with oracle seeds
def oracle_seeds(cq):
    q = qs[cq['id']]
    return [m for m in cq['ids0'][:10] if docid[m] in q.relevant]

def lex_oracle(cq, seeds, t, r):
    saved = cq['ids0']
    cq['ids0'] = seeds
    try:
        return c.lex_list(cq, len(seeds), t, r)
    finally:
        cq['ids0'] = saved

for beta, w in ((2.0, 0.8), (2.0, 1.5), (4.0, 1.0)):
    r = c.metrics(c.run_from(lambda i, cq: c.fuse(cq, c.vec_list(cq, 0, beta, seeds=oracle_seeds(cq)), w, 'prf') if oracle_seeds(cq) else cq['ids0']))
    print('ORACLE vec', beta, w, P.fmt(r))
for t in (5, 10, 20):
    for w in (0.2, 0.5, 1.0):
        r = c.metrics(c.run_from(lambda i, cq: c.fuse(cq, lex_oracle(cq, oracle_seeds(cq), t, 1), w, 'prf_bm25') if oracle_seeds(cq) else cq['ids0']))
        print('ORACLE lex', t, w, P.fmt(r))
for t, w in ((10, 0.3), (10, 0.5)):
    r = c.metrics(c.run_from(lambda i, cq: c.fuse(cq, c.vec_list(cq, 0, 1.0, seeds=oracle_seeds(cq)), 0, 'prf', 'vector', (lex_oracle(cq, oracle_seeds(cq), t, 1), w, 'prf_bm25')) if oracle_seeds(cq) else cq['ids0']))
    print('ORACLE vecrep+lex', t, w, P.fmt(r))
