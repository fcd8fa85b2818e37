"""Vector recall of the HNSW path (workers/vector.sql, the library's HNSW settings) against the exact
top-k (cosine_distance over every row of the tenant), per database; the exact lists are computed once
(the databases hold the same rows). Usage: recall.py N_QUERIES DB...   (prints JSON)"""
import json, statistics, sys
sys.path.insert(0, "/work/wt-layout/benchmarks")
import corpus, library, psycopg
from pgvector.psycopg import register_vector
from memoria_pg.db import load_sql

n, dbs = int(sys.argv[1]), sys.argv[2:]
K = 50
queries = corpus.queries(n, seed=7, n_tenants=10, world=corpus.universe(7, 10))
embed = library.hash_embed()
vecs = [embed(q.text) for q in queries]
def conn(db):
    c = psycopg.connect(f"postgresql://postgres@127.0.0.1:55432/{db}", autocommit=True)
    register_vector(c)
    c.execute("SET hnsw.ef_search = 100"); c.execute("SET hnsw.iterative_scan = relaxed_order")
    c.execute("SET plan_cache_mode = force_custom_plan")
    return c
exact = []
with conn(dbs[0]) as c:
    c.execute("SET enable_indexscan = off"); c.execute("SET enable_bitmapscan = off"); c.execute("SET enable_indexonlyscan = off")
    for q, v in zip(queries, vecs):
        exact.append([(r[0], r[1]) for r in c.execute(
            "SELECT id, cosine_distance(embedding, %s) FROM memoria.memories WHERE tenant = %s AND (%s::text IS NULL OR memory_type = %s::text) "
            "ORDER BY cosine_distance(embedding, %s), id LIMIT %s", (v, q.tenant, q.memory_type, q.memory_type, v, K))])
out = {"queries": n, "k": K}
for db in dbs:
    r10, r50, t10, t50 = [], [], [], []
    with conn(db) as c:
        for q, v, ex in zip(queries, vecs, exact):
            c.execute("SELECT set_config('memoria.tenant', %s, false)", (q.tenant,))
            res = [(r[0], r[2]) for r in c.execute(load_sql("workers/vector"), {"embedding": v, "memory_type": q.memory_type, "limit": K, "tenant": q.tenant})]
            got = [i for i, _ in res]; exi = [i for i, _ in ex]
            r10.append(len(set(got[:10]) & set(exi[:10])) / max(1, min(10, len(ex))))
            r50.append(len(set(got) & set(exi)) / max(1, len(ex)))
            # tie-aware: hits at most as far as the exact k-th neighbour (synthetic vectors tie a lot)
            for kk, acc in ((10, t10), (K, t50)):
                if len(ex) >= kk:
                    acc.append(sum(d <= ex[kk - 1][1] + 1e-6 for _, d in res[:kk]) / kk)
    out[db] = {"id_recall@10": statistics.mean(r10), "id_recall@50": statistics.mean(r50),
               "distance_recall@10": statistics.mean(t10), "distance_recall@50": statistics.mean(t50),
               "min_distance_recall@10": min(t10)}
print(json.dumps(out, indent=1))
