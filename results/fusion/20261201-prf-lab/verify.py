import sys, pickle, numpy as np
from pathlib import Path
from fusion_lab import load, SETS, DEFAULT_DIR
from evals.cache import EmbeddingCache, default_cache_dir, model_label
from evals.runner import embed
from memoria_pg import indexed_tokens, normalize, tokenize
from rank_bm25 import BM25Okapi
root = Path('/work/shared/eval')
for name in SETS:
    lab = load(name, root)
    cap = pickle.load(open(DEFAULT_DIR / f"{name}.pkl", 'rb'))
    mem = {r[0]: (r[1], r[2]) for r in cap['memories']}
    cache = EmbeddingCache(default_cache_dir() / f"{name}-{model_label(None)}.npz", dim=384)
    dv, qv = embed(lab.dataset, cache)
    print(name, 'docs', len(lab.dataset.documents), 'mems', len(mem), 'cache embedded', cache.embedded,
          'sources', sorted({s for q in lab.queries for s in q['hits']}),
          'vlen', max(len(q['hits'].get('vector', ())) for q in lab.queries))
    err = 0; n = 0
    for q in lab.queries[:50]:
        for h in q['hits'].get('vector', ()):
            t, d = mem[h[0]]
            dist = 1 - float(dv[(t, d)] @ qv[q['query_id']])
            err = max(err, abs(dist - h[3])); n += 1
    print('  vector max abs err', err, 'over', n)
    # bm25
    docs = {}
    for d in lab.dataset.documents: docs[(d.tenant, d.doc_id)] = d
    bytenant = {}
    for mid, (t, d) in sorted(mem.items()):
        bytenant.setdefault(t, []).append(mid)
    qs = {q.query_id: q for q in lab.dataset.queries}
    errb = 0; n = 0; ranks_same = 0
    cache_bm = {}
    for q in lab.queries[:20]:
        t = q['tenant']
        if t not in cache_bm:
            mids = bytenant[t]
            cache_bm[t] = (mids, BM25Okapi([indexed_tokens(docs[(t, mem[m][1])].content, docs[(t, mem[m][1])].context) for m in mids], k1=1.2, b=0.75))
        mids, bm = cache_bm[t]
        s = bm.get_scores(tokenize(normalize(qs[q['query_id']].text)))
        pos = {m: i for i, m in enumerate(mids)}
        for h in q['hits'].get('bm25', ()):
            errb = max(errb, abs(s[pos[h[0]]] - h[3])); n += 1
        if n < 60: print('   ', [(round(h[3],3), round(s[pos[h[0]]],3)) for h in q['hits']['bm25'][:4]])
    print('  bm25 max abs err', errb, 'over', n)
