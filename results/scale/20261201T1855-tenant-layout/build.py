"""Build a scale database at revision 0013: ingest with the HNSW index dropped, build it after (timed)."""
import sys, time, argparse
sys.path.insert(0, "/work/wt-layout/benchmarks")
import psycopg
import scale, ingestion, corpus
from timing import log
from memoria_pg import Config, MemorySystem, DEFAULT_MEMORY_TYPES
from memoria_pg.db import migrate

n = int(sys.argv[1]); name = sys.argv[2]
admin = "postgresql://postgres@127.0.0.1:55432/postgres"
with psycopg.connect(admin, autocommit=True) as c:
    c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    c.execute(f'CREATE DATABASE "{name}"')
dsn = scale.with_db(admin, name)
migrate.upgrade(dsn, "0013", memory_types=DEFAULT_MEMORY_TYPES, use_age=False)
with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("DROP INDEX memoria.memories_embedding_hnsw")
args = scale.parse_args(["--n", str(n), "--profile", "short"])
config = Config.from_env(dsn=dsn, use_age=False, pool_min_size=2, pool_max_size=8)
world = corpus.universe(args.seed, args.tenants)
with MemorySystem(config, auto_migrate=False) as system:
    r = ingestion.ingest(system, args, world)
    log(f"ingest done {r['elapsed_s']:.0f}s {r['rate']:.0f}/s")
t0 = time.perf_counter()
with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("SET maintenance_work_mem = '3GB'")
    c.execute("CREATE INDEX memories_embedding_hnsw ON memoria.memories USING hnsw (embedding vector_cosine_ops) WITH (m = 8, ef_construction = 64)")
log(f"hnsw build {time.perf_counter()-t0:.0f}s")
t0 = time.perf_counter()
ingestion.vacuum_analyze(dsn)
log(f"vacuum analyze {time.perf_counter()-t0:.0f}s")
