"""The schema's layout under Citus, distributed by tenant (docs/scale-out.md), and its check.

Every table of schema `memoria` has one place in the layout: distributed by its `tenant` column and
co-located with `memoria.memories` (a tenant's rows of every table on the same node, so each query of a
tenant runs on one node), or a reference table (small, no tenant key: copied to every node). No Citus
package is installable here, so the layout is checked against what Citus requires, as its
documentation states it, on the migrated schema itself (`layout_problems`; tests/test_replicas_citus.py
runs it on every migration head): a table outside the layout, a distributed table without the tenant
column, a primary key, unique constraint or foreign key that does not include it, a foreign key to a
table that is neither distributed nor a reference table, a partitioned table more than one level
deep, a sequence narrower than bigint.

    python -m memoria_pg.db.distribution DSN    # the problems (none: exit 0), then the Citus statements
"""

from __future__ import annotations

import sys

import psycopg

DISTRIBUTION_COLUMN = "tenant"
ANCHOR = "memories"  # the co-location group's first table
# In an order create_distributed_table accepts: a table a foreign key references comes first.
DISTRIBUTED = (
    "memories",
    "memory_terms",
    "bm25_docs",
    "bm25_terms",
    "entities",
    "memory_entities",
    "entity_edges",
    "memory_attributes",
    "memory_access",
    "memory_history",
    "query_traces",
    "query_trace_candidates",
    "vector_indexes",
)
REFERENCE = ("memory_types", "api_keys")  # the shard list; API keys, looked up by hash for any tenant

_TABLES = """
SELECT c.relname, c.relkind = 'p',
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = %(column)s AND NOT a.attisdropped)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""
_CONSTRAINTS = """
SELECT c.conrelid::regclass::text, c.conname, c.contype,
       %(column)s = ANY (SELECT a.attname::text FROM pg_attribute a
                         WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)),
       coalesce(%(column)s = ANY (SELECT a.attname::text FROM pg_attribute a
                                  WHERE a.attrelid = c.confrelid AND a.attnum = ANY (c.confkey)), true),
       rc.relname
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid AND NOT t.relispartition
JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = %(schema)s
LEFT JOIN pg_class rc ON rc.oid = c.confrelid
WHERE c.contype IN ('p', 'u', 'f', 'x')
ORDER BY 1, 2
"""
_UNIQUE_INDEXES = """
SELECT i.indexrelid::regclass::text, t.relname,
       %(column)s = ANY (SELECT a.attname::text FROM pg_attribute a
                         WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey))
FROM pg_index i
JOIN pg_class t ON t.oid = i.indrelid AND NOT t.relispartition
JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = %(schema)s
WHERE i.indisunique AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
ORDER BY 1
"""
_NESTED_PARTITIONS = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relispartition AND c.relkind = 'p'
"""
_SEQUENCES = """
SELECT s.seqrelid::regclass::text, format_type(s.seqtypid, NULL)
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND s.seqtypid <> 'bigint'::regtype
"""


def citus_statements(schema: str = "memoria") -> list[str]:
    """The statements that lay the migrated schema out on a Citus coordinator (run once, as the
    owner, after `memoria-pg db upgrade`): reference tables, then the anchor, then the tables
    co-located with it, referenced tables first."""
    out = [f"SELECT create_reference_table('{schema}.{t}');" for t in REFERENCE]
    out.append(f"SELECT create_distributed_table('{schema}.{ANCHOR}', '{DISTRIBUTION_COLUMN}');")
    colocated = f"colocate_with => '{schema}.{ANCHOR}'"
    out += [
        f"SELECT create_distributed_table('{schema}.{t}', '{DISTRIBUTION_COLUMN}', {colocated});"
        for t in DISTRIBUTED
        if t != ANCHOR
    ]
    return out


def layout_problems(conn: psycopg.Connection, schema: str = "memoria") -> list[str]:
    """What Citus would refuse (or could not enforce) in the schema under this layout; [] when nothing."""
    params = {"schema": schema, "column": DISTRIBUTION_COLUMN}
    problems: list[str] = []
    placed = set(DISTRIBUTED) | set(REFERENCE)
    for name, _partitioned, has_tenant in conn.execute(_TABLES, params).fetchall():
        if name not in placed:
            problems.append(f"{schema}.{name} is neither distributed nor a reference table in db/distribution.py")
        elif name in DISTRIBUTED and not has_tenant:
            problems.append(f"{schema}.{name} is distributed by {DISTRIBUTION_COLUMN} but has no such column")
    problems += _key_problems(conn, params)
    problems += [f"{schema}.{n} is a partition that is partitioned itself (one level only)" for (n,) in
                 conn.execute(_NESTED_PARTITIONS, params).fetchall()]  # fmt: skip
    problems += [f"sequence {n} is {t}, not bigint" for n, t in conn.execute(_SEQUENCES, params).fetchall()]
    return problems


def _key_problems(conn: psycopg.Connection, params: dict[str, str]) -> list[str]:
    """Keys of distributed tables without the distribution column; foreign keys that leave the layout."""
    problems: list[str] = []
    kinds = {"p": "primary key", "u": "unique constraint", "x": "exclusion constraint", "f": "foreign key"}
    for table, name, kind, has_column, ref_has_column, referenced in conn.execute(_CONSTRAINTS, params).fetchall():
        bare = table.rsplit(".", 1)[-1]
        if bare not in DISTRIBUTED:
            continue
        if not has_column:
            problems.append(f"{kinds[kind]} {name} of {table} does not include {DISTRIBUTION_COLUMN}")
        if kind == "f" and referenced in DISTRIBUTED and not ref_has_column:
            problems.append(f"foreign key {name} of {table} does not reference {referenced} by {DISTRIBUTION_COLUMN}")
        if kind == "f" and referenced not in DISTRIBUTED and referenced not in REFERENCE:
            problems.append(f"foreign key {name} of {table} references {referenced}, outside the layout")
    for index, table, has_column in conn.execute(_UNIQUE_INDEXES, params).fetchall():
        if table in DISTRIBUTED and not has_column:
            problems.append(f"unique index {index} of {table} does not include {DISTRIBUTION_COLUMN}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m memoria_pg.db.distribution DSN", file=sys.stderr)
        return 2
    with psycopg.connect(argv[1]) as conn:
        problems = layout_problems(conn)
    for problem in problems:
        print(f"-- problem: {problem}")
    print("\n".join(citus_statements()))
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv))
