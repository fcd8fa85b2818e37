"""The query budget: how long one query's statements may take, enforced by the server.

`QueryPipeline.run` opens a budget (`query_budget(config.query_timeout_ms)`) for the query it runs;
while it is open, every `Database.transaction` of that thread sets `statement_timeout` to what remains
of it, in the round trip that sets the tenant, waits at most that long for a pooled connection, and
turns a statement the timeout cancelled, or a budget already spent, into QueryTimeout (the driver's
error chained). The scheduler gives its workers what remains too. Time spent computing the query's
embedding is not counted (`paused`): the first query of a process may load a model for seconds.
Outside a budget (ingestion, the lifecycle, a stage run on its own) nothing changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator

import psycopg

from ..errors import PoolTimeout, QueryTimeout


class QueryBudget:
    """A deadline on the monotonic clock, pushed back by the time spent in `paused` blocks."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self._deadline = time.monotonic() + timeout_ms / 1000.0
        self._applied = time.monotonic()  # when a statement timeout was last set from the budget

    def applied(self) -> None:
        """A statement timeout of what remains was set just now."""
        self._applied = time.monotonic()

    def since_applied(self) -> float:
        return time.monotonic() - self._applied

    def remaining_ms(self) -> int:
        """Whole milliseconds left (0 when spent): a statement_timeout of 0 would mean none."""
        return max(0, math.floor((self._deadline - time.monotonic()) * 1000.0))

    def require_ms(self) -> int:
        """The milliseconds left for the next statement; QueryTimeout when there are none."""
        left = self.remaining_ms()
        if left < 1:
            raise self.timeout("before its next statement")
        return left

    def timeout(self, when: str) -> QueryTimeout:
        return QueryTimeout(
            f"the query ran out of its budget of {self.timeout_ms} ms {when} "
            "(query_timeout_ms, MEMORIA_QUERY_TIMEOUT_MS)"
        )

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside is not counted."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self._deadline += time.monotonic() - t0

    @contextlib.contextmanager
    def enforced(self, *, pool_wait_capped: bool) -> Iterator[None]:
        """A statement the statement_timeout cancelled is QueryTimeout (a cancel for another reason
        stays the driver's error), and so is no connection within a wait the budget cut short."""
        try:
            yield
        except psycopg.errors.QueryCanceled as exc:
            if "statement timeout" not in (exc.diag.message_primary or str(exc)):
                raise
            raise self.timeout("in a statement") from exc
        except PoolTimeout as exc:
            if not pool_wait_capped:
                raise
            raise self.timeout("waiting for a database connection") from exc


_CURRENT: contextvars.ContextVar[QueryBudget | None] = contextvars.ContextVar("memoria_query_budget", default=None)


@contextlib.contextmanager
def query_budget(timeout_ms: int) -> Iterator[QueryBudget]:
    """Open a budget for the statements of one query (of this thread or task)."""
    budget = QueryBudget(timeout_ms)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def current_budget() -> QueryBudget | None:
    """The budget of the query this thread runs, if any."""
    return _CURRENT.get()
