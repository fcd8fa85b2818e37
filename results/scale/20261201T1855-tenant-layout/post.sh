#!/bin/bash
# Waits for the 1M ingest to finish, stops build.py before its HNSW build, then:
# VACUUM ANALYZE old; copy old -> new; in parallel: HNSW on old | migrate new to 0014 + HNSW + VACUUM ANALYZE.
set -u
A=postgresql://postgres@127.0.0.1:55432
ts() { date -u +%H:%M:%S; }

psql $A/postgres -Atc "select pg_cancel_backend(pid) from pg_stat_activity where datname='memoria_layout_1m_old' and query like 'CREATE INDEX%'"
sleep 2
psql $A/memoria_layout_1m_old -Atc "DROP INDEX IF EXISTS memoria.memories_embedding_hnsw"
echo "$(ts) vacuum old start"; s=$(date +%s)
psql $A/memoria_layout_1m_old -c "VACUUM (ANALYZE)"
echo "$(ts) vacuum old done $(( $(date +%s)-s ))s"
s=$(date +%s)
psql $A/postgres -c "CREATE DATABASE memoria_layout_1m_new TEMPLATE memoria_layout_1m_old"
echo "$(ts) copy done $(( $(date +%s)-s ))s"
(
  s=$(date +%s)
  psql $A/memoria_layout_1m_old -c "SET maintenance_work_mem='2GB'" -c "CREATE INDEX memories_embedding_hnsw ON memoria.memories USING hnsw (embedding vector_cosine_ops) WITH (m = 8, ef_construction = 64)"
  echo "$(ts) old hnsw done $(( $(date +%s)-s ))s"
) &
(
  s=$(date +%s)
  cd /work/wt-layout && PYTHONPATH=/work/wt-layout python -c "
from memoria_pg.db import migrate
migrate.upgrade('$A/memoria_layout_1m_new', '0014')"
  echo "$(ts) new migrate (no HNSW) done $(( $(date +%s)-s ))s"
  s=$(date +%s)
  psql $A/memoria_layout_1m_new -c "SET maintenance_work_mem='2GB'" -c "CREATE INDEX memories_embedding_hnsw ON memoria.memories USING hnsw (embedding vector_cosine_ops) WITH (m = 8, ef_construction = 64)"
  echo "$(ts) new hnsw done $(( $(date +%s)-s ))s"
  s=$(date +%s)
  psql $A/memoria_layout_1m_new -c "VACUUM (ANALYZE) memoria.memories"
  echo "$(ts) new vacuum done $(( $(date +%s)-s ))s"
) &
wait
echo "$(ts) all done"
