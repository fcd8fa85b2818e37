"""The query tests of tests/test_query.py again, each query read from the hot standby: the `config`
below adds the standby (MEMORIA_TEST_STANDBY_DSN) to the usual test configuration, and `on_standby`
checks that every query of a test was answered by it (a query that fell back to the primary fails
the test). Skipped without a standby, like tests/test_replicas.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memoria_pg.config import Config
from memoria_pg.query.pipeline import QueryPipeline
from tests.test_query import *  # noqa: F403  (the tests, collected here again)
from tests.test_replicas import paused, replica_dsn, standby_admin_dsn  # noqa: F401  (fixtures)


@pytest.fixture
def config(dsn: str, replica_dsn: str) -> Config:  # noqa: F811  (replaces conftest's for this module)
    # Writes the tests make through the library are waited for (read-your-writes): up to 5 s here. The
    # lag bound is tests/test_replicas.py's business; here a standby that lags behind other sessions'
    # WAL on this shared server must still answer (read-your-writes keeps these tests' answers exact).
    return Config(
        dsn=dsn,
        pool_min_size=1,
        pool_max_size=8,
        enable_fusion=True,
        replica_dsns=(replica_dsn,),
        replica_wait_ms=5000,
        replica_max_lag_ms=3_600_000,
    )


@pytest.fixture(autouse=True)
def on_standby(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    servers: list[tuple[str, str | None]] = []
    run = QueryPipeline.run

    def recording(self: QueryPipeline, request):  # type: ignore[no-untyped-def]
        response = run(self, request)
        servers.append((response.diagnostics.server, response.diagnostics.server_note))
        return response

    monkeypatch.setattr(QueryPipeline, "run", recording)
    yield
    assert all(server.startswith("replica 1") for server, _ in servers), servers
