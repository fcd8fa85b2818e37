import random, time, statistics, psycopg, sys
from pathlib import Path
dsn = sys.argv[1]; tenant = sys.argv[2]
bm25 = Path("/work/main/sql/workers/bm25.sql").read_text()
fb = Path(sys.argv[4] if len(sys.argv) > 4 else "/work/main/sql/workers/bm25_feedback.sql").read_text()
conn = psycopg.connect(dsn, autocommit=True)
conn.execute("select set_config('memoria.tenant', %s, false)", (tenant,))
ids = [r[0] for r in conn.execute("select id from memoria.memories where tenant=%s order by random() limit 60", (tenant,))]
random.seed(1)
t1, t2, n1, n2 = [], [], [], []
base = dict(types=None, memory_type=None, k1=1.2, b=0.75, per_term=2000, limit=100)
for mid in ids:
    terms = [r[0] for r in conn.execute("select term from memoria.memory_terms where memory_id=%s and tenant=%s", (mid, tenant))]
    terms = random.sample(terms, min(4, len(terms)))
    p = dict(base, terms=terms)
    for _ in range(2):
        s = time.perf_counter(); rows = conn.execute(bm25, p, prepare=True).fetchall(); e1 = time.perf_counter() - s
    seeds = [r[0] for r in rows[:3]]; p.update(first_ids=[r[0] for r in rows], first_types=[r[1] for r in rows], first_scores=[float(r[2]) for r in rows])
    q = dict(p, seeds=seeds, feedback_terms=int(sys.argv[5]) if len(sys.argv) > 5 else 20, feedback_pool=40, feedback_per_term=int(sys.argv[3]))
    for _ in range(2):
        s = time.perf_counter(); rows2 = conn.execute(fb, q, prepare=True).fetchall(); e2 = time.perf_counter() - s
    t1.append(e1 * 1000); t2.append(e2 * 1000); n1.append(len(rows)); n2.append(len(rows2))
print(f"bm25 p50 {statistics.median(t1):.2f} ms, feedback p50 {statistics.median(t2):.2f} ms p90 {sorted(t2)[int(.9*len(t2))]:.2f}; rows {statistics.mean(n1):.0f} {statistics.mean(n2):.0f}")
