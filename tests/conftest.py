"""Tests run against real PostgreSQL: MEMORIA_TEST_DSN (a superuser DSN, e.g. the AGE server from
scripts/age-server.sh) or, without it, an embedded server started in a temporary directory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db import migrate

# One template per test session, so concurrent runs against one server do not drop each other's.
TEMPLATE = f"memoria_test_template_{os.getpid()}"


def _with_db(dsn: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory) -> Iterator[str]:
    dsn = os.environ.get("MEMORIA_TEST_DSN")
    if dsn:
        yield dsn
        return
    from memoria_pg.db import embedded as server

    data_dir = tmp_path_factory.mktemp("pg") / "data"
    dsn = server.start(data_dir, keep_running=True)
    yield dsn
    server.stop(data_dir)


@pytest.fixture(scope="session")
def eval_data() -> Callable[..., Path]:
    """eval_data("locomo", "scifact") -> the evaluation data folder (MEMORIA_EVAL_DATA) holding those sets.

    Without them the test is skipped with the reason, or fails when MEMORIA_REQUIRE_EVAL_DATA=1 (CI,
    which has the data: there a missing folder is a broken setup, not a test to skip)."""
    from evals.data import DATA_ENV, DATA_LAYOUT

    def need(*names: str) -> Path:
        env = os.environ.get(DATA_ENV)
        root = Path(env) if env else None
        missing = [f"{n}/" for n in names if root is not None and not (root / n).is_dir()]
        if root is None or missing:
            where = f"{', '.join(missing)} not in {root}" if root else f"{DATA_ENV} is not set"
            reason = (
                f"evaluation data not found ({where}): set {DATA_ENV} to the folder holding {DATA_LAYOUT} (CI sets it)"
            )
            if os.environ.get("MEMORIA_REQUIRE_EVAL_DATA") == "1":
                pytest.fail(f"{reason}; MEMORIA_REQUIRE_EVAL_DATA=1 makes this a failure", pytrace=False)
            pytest.skip(reason)
        return root

    return need


@pytest.fixture(scope="session")
def server_has_age(admin_dsn: str) -> bool:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'age'").fetchone() is not None


@pytest.fixture(scope="session")
def template_dsn(admin_dsn: str) -> Iterator[str]:
    """A database migrated to head once per session; tests clone it (CREATE DATABASE ... TEMPLATE)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    dsn = _with_db(admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    yield dsn
    drop_database(admin_dsn, TEMPLATE)


def create_database(admin_dsn: str, template: str | None = None) -> tuple[str, str]:
    name = f"memoria_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if template:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
            )
        else:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name, _with_db(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A new, empty database (no schema)."""
    name, dsn = create_database(admin_dsn)
    yield dsn
    drop_database(admin_dsn, name)


@pytest.fixture
def dsn(admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A new database at head, cloned from the session template."""
    name, dsn = create_database(admin_dsn, TEMPLATE)
    yield dsn
    drop_database(admin_dsn, name)


@pytest.fixture
def config(dsn: str) -> Config:
    # The tests exercise every worker, so the fusion worker (off by default) is switched on here. No
    # background index builds (tests/test_index_keeper.py tests them): tests that sync do it themselves.
    return Config(dsn=dsn, pool_min_size=1, pool_max_size=8, enable_fusion=True, vector_index_auto=False)


@pytest.fixture
def system(config: Config):
    from memoria_pg.system import MemorySystem

    with MemorySystem(config, embedder=HashEmbedder()) as s:
        yield s
