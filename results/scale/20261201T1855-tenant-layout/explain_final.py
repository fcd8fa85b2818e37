"""EXPLAIN ANALYZE of the final CTE (generic plan, run 3x: last kept) and of the vector statement
(custom plan) for one tenant on a database: which leaves are scanned, planning and execution time."""
import re, sys, json
sys.path.insert(0, "/work/wt-layout/benchmarks")
from evidence import explain, explain_generic
import library
from memoria_pg import Config, MemorySystem
from memoria_pg.core.types import SourceHit
from memoria_pg.db import load_sql

db, tenant = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tenant_03"
dsn = f"postgresql://postgres@127.0.0.1:55432/{db}"
embed = library.hash_embed()
vec = embed("When did Alice meet the budget team in Lisbon?")
out = {}
with MemorySystem(Config(dsn=dsn, use_age=False, pool_min_size=1, pool_max_size=2), auto_migrate=False) as system:
    with system.db.transaction(tenant) as conn:
        ids = conn.execute("SELECT id, memory_type FROM memoria.memories WHERE tenant = %s ORDER BY embedding <=> %s LIMIT 200", (tenant, vec)).fetchall()
    hits = {"vector": [SourceHit(i, "vector", r + 1, 0.3 + r / 1000, t) for r, (i, t) in enumerate(ids[:50])],
            "bm25": [SourceHit(i, "bm25", r + 1, 10 - r / 100, t) for r, (i, t) in enumerate(ids[30:200])]}
    statement, params = system.pipeline.candidate_statement(hits)
    params["tenant"] = tenant  # as build_candidates passes it
    for mode, fn in (("final_generic", explain_generic), ("final_custom", explain)):
        for _ in range(3):
            with system.db.transaction(tenant) as conn:
                ms, lines = fn(conn, statement, params)
        text = "\n".join(lines)
        out[mode] = {"ms": ms, "leaves": len(re.findall(r"Index Scan using \S+ on ", text)), "removed": re.findall(r"Subplans Removed: \d+", text),
                     "planning": re.findall(r"Planning Time: [\d.]+ ms", text), "execution": re.findall(r"Execution Time: [\d.]+ ms", text)}
        if mode == "final_generic":
            out["final_generic_plan"] = [l for l in lines if "memories" in l or "Removed" in l][:20]
    vparams = {"embedding": vec, "memory_type": None, "limit": 50, "tenant": tenant}
    for _ in range(3):
        with system.db.transaction(tenant) as conn:
            ms, lines = explain(conn, load_sql("workers/vector"), vparams)
    text = "\n".join(lines)
    out["vector_custom"] = {"ms": ms, "scans": re.findall(r"Index Scan using (\S+)", text), "planning": re.findall(r"Planning Time: [\d.]+ ms", text), "execution": re.findall(r"Execution Time: [\d.]+ ms", text)}
print(json.dumps(out, indent=1))
