"""The lifecycle commands: get, update, delete, forget, erase-tenant, history, invalidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memoria_pg.cli import cli
from tests.test_cli import CLEAN_ENV, write_jsonl


def run(dsn: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args], env=CLEAN_ENV, input=input)


@pytest.fixture
def stored(dsn: str, tmp_path: Path) -> dict[str, int]:
    path = write_jsonl(tmp_path / "m.jsonl", [
        {"content": "Alice lives in Paris.", "tenant": "t", "external_id": "e-1", "created_at": "2021-01-01"},
        {"content": "Alice moved to Berlin.", "tenant": "t", "created_at": "2023-01-01"},
        {"content": "Notes from the budget meeting.", "tenant": "t", "metadata": {"speaker": "Bob"}},
    ])  # fmt: skip
    assert run(dsn, "ingest", str(path)).exit_code == 0
    listing = json.loads(run(dsn, "get", "--external-id", "e-1", "--tenant", "t", "--json").output)
    return {"paris": listing["id"]}


def test_get_update_history(dsn: str, stored: dict[str, int]):
    paris = str(stored["paris"])
    shown = run(dsn, "get", paris, "--tenant", "t")
    assert shown.exit_code == 0 and "Alice lives in Paris." in shown.output and "superseded by" in shown.output
    updated = run(dsn, "update", paris, "--tenant", "t", "--content", "Alice lived in Paris.", "--importance", "0.8")
    assert updated.exit_code == 0, updated.output
    assert "Alice lived in Paris." in updated.output and "importance: 0.8" in updated.output
    history = run(dsn, "history", paris, "--tenant", "t", "--json")
    assert [e["event"] for e in json.loads(history.output)] == ["stored", "updated"]
    nothing = run(dsn, "update", paris, "--tenant", "t")
    assert nothing.exit_code == 2 and "nothing to update" in nothing.output
    bad = run(dsn, "update", paris, "--tenant", "t", "--metadata", "[1]")
    assert bad.exit_code == 2 and "must be a JSON object" in bad.output


def test_missing_and_foreign_ids_are_clear_errors(dsn: str, stored: dict[str, int]):
    for args in (("get", "999999"), ("delete", "999999"), ("history", "999999"), ("get", str(stored["paris"]))):
        tenant = "other" if args == ("get", str(stored["paris"])) else "t"
        result = run(dsn, *args, "--tenant", tenant)
        assert result.exit_code == 1 and "(for this tenant)" in result.output, result.output
        assert "Traceback" not in result.output


def test_forget_asks_and_erase_tenant_asks(dsn: str, stored: dict[str, int]):
    declined = run(dsn, "forget", "--tenant", "t", "--where", '{"speaker": "Bob"}', input="n\n")
    assert "1 memories match" in declined.output and declined.exit_code == 1  # aborted
    assert run(dsn, "get", "--external-id", "e-1", "--tenant", "t").exit_code == 0
    done = run(dsn, "forget", "--tenant", "t", "--before", "2022-01-01", "--yes")
    assert done.exit_code == 0 and "deleted 1 memories" in done.output
    unfiltered = run(dsn, "forget", "--tenant", "t", "--yes")
    assert unfiltered.exit_code == 1 and "forget needs a filter" in unfiltered.output
    aborted = run(dsn, "erase-tenant", "t", input="n\n")
    assert aborted.exit_code == 1
    erased = run(dsn, "erase-tenant", "t", "--yes")
    assert erased.exit_code == 0 and "memories 2" in erased.output, erased.output


def test_invalidate_and_restore(dsn: str, stored: dict[str, int]):
    paris = str(stored["paris"])
    out = run(dsn, "invalidate", paris, "--tenant", "t", "--at", "2022-06-01")
    assert out.exit_code == 0 and "invalidated" in out.output
    restored = run(dsn, "invalidate", paris, "--tenant", "t", "--restore").output
    assert "superseded by" in restored and "valid_to" not in restored  # holds again (its fact still superseded)
