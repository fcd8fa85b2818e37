"""BM25 terms are Snowball English stems: every memory's postings, document frequencies and lengths are derived again.

The tokenizer (memoria_pg/core/text.py) stems each word with the Snowball English (Porter 2) stemmer
instead of stripping a plural "s": "painting", "painted" and "paints" become one term, "hiking" and
"hike", "visited" and "visit". On the dev sets BM25 alone and the V4 answer both gained (README, "Why
these defaults"). A query's terms must be the stored terms' kind, so this migration derives the BM25
data of every memory again from its stored content and context with the new tokenizer:

    memoria.memory_terms   every posting (term, tf, doc_len, impact)
    memoria.bm25_terms     every document frequency
    memoria.bm25_docs      sum_len (n_docs, the number of memories, does not change)

`impact` (which only orders a term's postings) is computed as ingestion computes it, with the
configuration's default k1 and b and the shard's average length. Nothing else changes: memories,
entities, attributes, the graph, the phrase worker's tsvector.

The upgrade reads every memory once (a server-side cursor, 2,000 rows a fetch) and rewrites the three
tables in one transaction; queries and writes of every tenant wait for it from its first statement
(the ALTER TABLEs that lift row-level security lock the four tables until it commits, so no write can
slip between the read and the rewrite). On the benchmarks' 100k realistic memories (5.69M postings) it
took 75 s on two loaded cores, on their 1M short ones (11.8M postings) 163 s: on a large database run
it in a quiet period. The downgrade derives them again with the light plural stemmer the tokenizer had before
(kept here as it was), for the library versions before this one. Library versions before this
migration tokenize queries the old way: upgrade the library and the schema together.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import psycopg
from alembic import op

from memoria_pg.config import Config
from memoria_pg.core.text import indexed_term_counts

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

BATCH = 2_000
# Read and rewritten by the owner for every tenant: row-level security is lifted for the
# transaction's statements (NO FORCE: the owner bypasses the policies) and restored at its end.
TABLES = ("memories", "memory_terms", "bm25_terms", "bm25_docs")


def light_stem(token: str) -> str:
    """The tokenizer's stemmer before this migration (a plural "s" off), for the downgrade."""
    if token.endswith("s"):
        if len(token) > 4 and token.endswith("ies"):
            return token[:-3] + "y"
        if len(token) > 3 and not token.endswith(("ss", "us", "is")):
            return token[:-1]
    return token


def upgrade() -> None:
    rebuild(None)  # the tokenizer's own stemmer: Snowball English


def downgrade() -> None:
    rebuild(light_stem)


def rebuild(stem: Callable[[str], str] | None) -> None:
    """Every memory's BM25 postings, document frequencies and lengths, from its content and context
    tokenized with `stem` (None: the tokenizer's)."""
    conn: psycopg.Connection = op.get_bind().connection.driver_connection
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    for table in TABLES:
        conn.execute(f"ALTER TABLE memoria.{table} NO FORCE ROW LEVEL SECURITY")
    conn.execute(
        "CREATE TEMP TABLE rebuilt_docs (tenant text, memory_type text, memory_id bigint, doc_len integer) "
        "ON COMMIT DROP"
    )
    conn.execute(
        "CREATE TEMP TABLE rebuilt_terms (tenant text, memory_type text, memory_id bigint, term text, tf integer) "
        "ON COMMIT DROP"
    )
    with conn.cursor(name="memoria_0021_memories") as memories:
        memories.execute("SELECT tenant, memory_type, id, content, context FROM memoria.memories")
        while rows := memories.fetchmany(BATCH):
            derive(conn, rows, stem)
    conn.execute("TRUNCATE memoria.memory_terms, memoria.bm25_terms")
    conn.execute(
        """
        INSERT INTO memoria.memory_terms (tenant, memory_type, term, memory_id, tf, doc_len, impact)
        SELECT t.tenant, t.memory_type, t.term, t.memory_id, t.tf, d.doc_len,
               t.tf * (%(k1)s + 1) / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * d.doc_len / greatest(s.avg_len, 1e-9)))
        FROM rebuilt_terms t
        JOIN rebuilt_docs d ON d.tenant = t.tenant AND d.memory_id = t.memory_id
        JOIN (
            SELECT tenant, memory_type, avg(doc_len)::float8 AS avg_len FROM rebuilt_docs GROUP BY tenant, memory_type
        ) s ON s.tenant = t.tenant AND s.memory_type = t.memory_type
        ORDER BY t.tenant, t.term
        """,
        {"k1": float(defaults["bm25_k1"]), "b": float(defaults["bm25_b"])},
    )
    conn.execute(
        "INSERT INTO memoria.bm25_terms (tenant, memory_type, term, df) "
        "SELECT tenant, memory_type, term, count(*) FROM rebuilt_terms GROUP BY tenant, term, memory_type "
        "ORDER BY tenant, term, memory_type"
    )
    conn.execute(
        "UPDATE memoria.bm25_docs b SET sum_len = s.sum_len "
        "FROM (SELECT tenant, memory_type, sum(doc_len) AS sum_len FROM rebuilt_docs GROUP BY tenant, memory_type) s "
        "WHERE b.tenant = s.tenant AND b.memory_type = s.memory_type"
    )
    for table in TABLES:
        conn.execute(f"ALTER TABLE memoria.{table} FORCE ROW LEVEL SECURITY")
    # TRUNCATE reset the tables' statistics: without them the planner would pick other plans for the
    # BM25 and phrase workers until autovacuum's next ANALYZE.
    conn.execute("ANALYZE memoria.memory_terms, memoria.bm25_terms, memoria.bm25_docs")


def derive(conn: psycopg.Connection, rows: list[tuple], stem: Callable[[str], str] | None) -> None:
    """One fetch of memories' postings and lengths into the temporary tables."""
    with conn.cursor() as cur:
        with cur.copy("COPY rebuilt_docs (tenant, memory_type, memory_id, doc_len) FROM STDIN") as docs:
            terms: list[tuple[str, str, int, str, int]] = []
            for tenant, memory_type, memory_id, content, context in rows:
                counts, doc_len = indexed_term_counts(content, context, stem=stem)
                docs.write_row((tenant, memory_type, memory_id, doc_len))
                terms.extend((tenant, memory_type, memory_id, term, tf) for term, tf in counts.items())
        with cur.copy("COPY rebuilt_terms (tenant, memory_type, memory_id, term, tf) FROM STDIN") as out:
            for row in terms:
                out.write_row(row)
