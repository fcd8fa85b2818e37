"""Pipeline mode for a run of statements, where libpq has it."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

SUPPORTED = psycopg.Pipeline.is_supported()


def pipelined(conn: psycopg.Connection, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """The statements of the block are sent together and their results read at its end (one round trip
    instead of one per statement); an error is raised at the end of the block, as the same exception,
    and the statements after the failed one are skipped. Without pipeline support (libpq < 14), or with
    `enabled` false, the statements run one by one."""
    return conn.pipeline() if enabled and SUPPORTED else contextlib.nullcontext()
