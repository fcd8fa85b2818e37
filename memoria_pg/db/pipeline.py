"""Pipeline mode for a run of statements, where libpq has it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
    (benchmarks/transactions.py; whole queries: docs/measurements.md, "Why these defaults"). A fetch inside the
    block flushes without a Sync, so every statement of the block sees the settings; the block's end
    is a commit even when its body raises, hence reads (or a single write) only. Without pipeline
    support: the explicit transaction.

    A block that ends with a server error (raised as is, or as the cause of the library's own error)
    makes psycopg forget the statements it prepared on the connection, as psycopg itself does on a
    rollback (its next execution there sends DEALLOCATE ALL): psycopg records the name of a statement it
    prepares inside a pipeline when it sends the Parse, not when the server confirms it, so a Parse the
    server refused (a schema older than the library) or skipped (after an earlier error in the block)
    would stay named prepared on this connection, and every later use of that statement would fail
    ("prepared statement ... does not exist"). An explicit transaction's rollback does this; a
    pipeline's implicit transaction has no rollback. Sending DEALLOCATE ALL ourselves is not enough
    (psycopg forgets its names on that command only the first time it sees it), and closing the
    connection, which this did before, made a host that often hits the retrieval deadline (each hit a
    cancelled statement) reconnect after each: 26 reconnections in the 1M benchmark's cold warm-up. If
    a psycopg version lacks the cache this reaches, the connection is closed as before."""
    if implicit and IMPLICIT and SUPPORTED:
        return _implicit_block(conn)
    return conn.transaction()


def answered(block: Any) -> bool:
    """Whether every statement sent in a tenant block (what `tenant_block` yielded) has been answered:
    its results read, none queued or still to send. Only then can the block's end (its Sync) happen
    after the caller goes on: a statement whose result nobody fetched runs at that Sync. False for an
    explicit transaction, and where this psycopg keeps its queues elsewhere (then the block ends first,
    as it always did)."""
    commands, results = getattr(block, "command_queue", None), getattr(block, "result_queue", None)
    return (
        isinstance(block, psycopg.Pipeline)
        and commands is not None
        and results is not None
        and not (commands or results)
    )


@contextlib.contextmanager
def _implicit_block(conn: psycopg.Connection) -> Iterator[psycopg.Pipeline]:
    try:
        with conn.pipeline() as pipeline:
            yield pipeline
    except BaseException as exc:
        if _server_error(exc) and not _forget_prepared(conn):
            conn.close()
        raise


def _forget_prepared(conn: psycopg.Connection) -> bool:
    """What psycopg does on a rollback (psycopg/transaction.py, Connection.rollback): clear its prepared
    statement cache, which queues a DEALLOCATE ALL for the connection's next execution. False when this
    psycopg has no such cache (a private attribute): the caller then closes the connection."""
    clear = getattr(getattr(conn, "_prepared", None), "clear", None)
    if conn.closed or not callable(clear):
        return False
    clear()
    return True


def _server_error(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from or during, came from the server or the driver."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, psycopg.Error):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
