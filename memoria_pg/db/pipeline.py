"""Pipeline mode for a run of statements, where libpq has it."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

SUPPORTED = psycopg.Pipeline.is_supported()
# tenant_block's implicit transactions; False turns every block into an explicit transaction (the
# comparison of benchmarks/transactions.py, query by query in one process).
IMPLICIT = True


def pipelined(conn: psycopg.Connection, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """The statements of the block are sent together and their results read at its end (one round trip
    instead of one per statement); an error is raised at the end of the block, as the same exception,
    and the statements after the failed one are skipped. Without pipeline support (libpq < 14), or with
    `enabled` false, the statements run one by one."""
    return conn.pipeline() if enabled and SUPPORTED else contextlib.nullcontext()


def tenant_block(conn: psycopg.Connection, implicit: bool) -> contextlib.AbstractContextManager[Any]:
    """The block a tenant's statements run in on an autocommit connection: an explicit transaction
    (BEGIN ... COMMIT), or with `implicit` the transaction PostgreSQL itself opens for the statements
    of a pipeline and ends at its Sync (the protocol's rule: the extended-query messages up to a Sync
    are one transaction unless they hold a BEGIN). The second saves the BEGIN and COMMIT round trips
    and sends the tenant's settings (set_config(..., true), local to that transaction) with the first
    statement: 0.47 against 0.75 ms p50 for the settings and one read on an idle host
    (benchmarks/transactions.py; whole queries: README, "Why these defaults"). A fetch inside the
    block flushes without a Sync, so every statement of the block sees the settings; the block's end
    is a commit even when its body raises, hence reads (or a single write) only. Without pipeline
    support: the explicit transaction."""
    if implicit and IMPLICIT and SUPPORTED:
        return conn.pipeline()
    return conn.transaction()
