"""Smoke tests on the embedded default server: no DSN, the library starts PostgreSQL 18 itself."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memoria_pg.cli import cli
from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db import embedded as server
from memoria_pg.db import migrate
from memoria_pg.system import MemorySystem

pytestmark = pytest.mark.embedded


def test_library_starts_embedded_server_and_answers(tmp_path):
    cfg = Config(dsn=None, data_dir=str(tmp_path / "pg"))
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        assert system.db.capabilities.vector
        assert system.db.capabilities.server_version.startswith("18")
        system.store_many(
            [
                {"content": "Ada keeps bees on the roof.", "tenant": "t"},
                {"content": "The roof garden has tomatoes.", "tenant": "t"},
            ]
        )
        response = system.query("who keeps bees", tenant="t", ranking=False)
        assert response.memories[0].content == "Ada keeps bees on the roof."
        assert "vector" in response.diagnostics.completed_sources
    server.stop(tmp_path / "pg")


def test_cli_server_lifecycle_and_doctor(tmp_path):
    runner = CliRunner()
    data = str(tmp_path / "pg")
    started = runner.invoke(cli, ["--data-dir", data, "server", "start"])
    assert started.exit_code == 0, started.output
    try:
        assert "postgresql://" in started.output
        status = runner.invoke(cli, ["--data-dir", data, "server", "status"])
        assert "running" in status.output and "not running" not in status.output
        doctor = runner.invoke(cli, ["--data-dir", data, "doctor"])
        assert doctor.exit_code == 0, doctor.output
        assert "pgvector:      0.8" in doctor.output or "pgvector:      available" in doctor.output
        upgraded = runner.invoke(cli, ["--data-dir", data, "db", "upgrade"])
        head = migrate.history("")[-1][0]  # the latest revision
        assert upgraded.exit_code == 0 and f"schema at {head}" in upgraded.output
    finally:
        stopped = runner.invoke(cli, ["--data-dir", data, "server", "stop"])
    assert stopped.output.strip() == "stopped"
    assert "not running" in runner.invoke(cli, ["--data-dir", data, "server", "status"]).output
