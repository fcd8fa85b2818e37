"""The library tells a user whose database schema is not at its revision: a warning when it opens the
database (a library upgraded before its schema would otherwise answer differently without a word:
from 0021 on, a query's BM25 terms are stems the older postings are not), and `memoria-pg doctor`."""

from __future__ import annotations

import logging

import psycopg
import pytest
from click.testing import CliRunner

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.cli import cli
from memoria_pg.db import migrate
from memoria_pg.db.resources import head_revision, known_revisions

LOGGER = "memoria_pg.db.database"


def test_the_revisions_told_by_file_name_are_alembics():
    assert set(known_revisions()) == migrate.revisions()
    assert head_revision() == migrate.history("")[-1][0]


def open_and_read_warnings(dsn: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config = Config(dsn=dsn, pool_min_size=1, vector_index_auto=False)
        with MemorySystem(config, embedder=HashEmbedder(), auto_migrate=False) as system:
            system.store("Melanie painted a sunrise.", tenant="acme")  # the library still works
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def doctor_schema_line(dsn: str) -> str:
    result = CliRunner().invoke(cli, ["--dsn", dsn, "doctor"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith("schema:"))


def test_a_schema_behind_the_library_is_named_with_the_command_that_upgrades_it(dsn, caplog):
    assert open_and_read_warnings(dsn, caplog) == []  # at head: nothing to say
    assert doctor_schema_line(dsn).split() == ["schema:", head_revision()]

    previous = known_revisions()[-2]
    migrate.downgrade(dsn, previous)
    [warning] = open_and_read_warnings(dsn, caplog)
    assert f"at revision {previous}, older than this library's {head_revision()}" in warning
    assert "memoria-pg db upgrade" in warning
    assert "behind this library's" in doctor_schema_line(dsn)

    migrate.upgrade(dsn)
    assert open_and_read_warnings(dsn, caplog) == []


def test_a_schema_newer_than_the_library_says_to_upgrade_the_library(dsn, caplog):
    newer = f"{int(head_revision()) + 1:04d}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE public.memoria_alembic_version SET version_num = %s", (newer,))
    [warning] = open_and_read_warnings(dsn, caplog)
    assert f"at revision {newer}, newer than this library's {head_revision()}" in warning
    assert "newer than this library's" in doctor_schema_line(dsn)
