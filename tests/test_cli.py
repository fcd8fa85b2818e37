"""The admin CLI through click's CliRunner, against the test database (--dsn)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import psycopg
import pytest
from click.testing import CliRunner, Result

from memoria_pg.cli import cli
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db import migrate

CLEAN_ENV = {"MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None}

HEAD = migrate.history("")[-1][0]  # the latest revision


def invoke(*args: str, env: dict[str, str | None] | None = None, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**CLEAN_ENV, **(env or {})}, input=input)


def memory_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    embedder = HashEmbedder()
    lines = []
    for record in records:
        if "content" in record and "embedding" not in record:
            record = {**record, "embedding": embedder.embed([record["content"]])[0].tolist()}
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


# -- help and configuration --------------------------------------------------------------------------


def test_every_command_has_help_text():
    commands = list(walk(cli))
    assert len(commands) > 10
    for path, command in commands:
        assert (command.help or "").strip(), f"`{' '.join(path)}` has no help text"
        result = invoke(*path, "--help")
        assert result.exit_code == 0, result.output
        assert " ".join(command.help.split()[:6]) in " ".join(result.output.split())


def test_every_option_has_help_text():
    for path, command in walk(cli):
        for param in command.params:
            if isinstance(param, click.Option):
                assert (param.help or "").strip(), f"`{' '.join(path)} {param.opts[0]}` has no help text"


def test_config_prints_values_and_honours_the_environment():
    result = invoke("config", env={"MEMORIA_TOP_K": "7", "MEMORIA_WORKERS_TO_USE": "vector,bm25"})
    assert result.exit_code == 0, result.output
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    assert lines["MEMORIA_TOP_K"] == "7"
    assert lines["MEMORIA_WORKERS_TO_USE"] == "vector,bm25"
    assert lines["MEMORIA_RANKING_CANDIDATE_LIMIT"] == "200"


def test_config_json_redacts_the_password():
    result = invoke(
        "--dsn",
        "postgresql://app:s3cret@db.example:5432/mem",
        "config",
        "--json",
        env={"MEMORIA_RETRIEVAL_DEADLINE_MS": "750"},
    )
    assert result.exit_code == 0, result.output
    values = json.loads(result.stdout)
    assert values["retrieval_deadline_ms"] == 750
    assert "s3cret" not in result.stdout
    assert values["dsn"] == "postgresql://app:***@db.example:5432/mem"


def test_invalid_environment_value_is_a_clean_error():
    result = invoke("config", env={"MEMORIA_TOP_K": "many"})
    assert result.exit_code != 0
    assert "MEMORIA_TOP_K='many' is not a valid int" in result.output
    assert "Traceback" not in result.output


# -- db and types ------------------------------------------------------------------------------------


def test_db_upgrade_current_history_downgrade(empty_dsn):
    assert invoke("--dsn", empty_dsn, "db", "current").stdout.strip() == "base (no schema)"

    upgraded = invoke("--dsn", empty_dsn, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stdout.strip() == f"schema at {HEAD}"
    assert invoke("--dsn", empty_dsn, "db", "current").stdout.strip() == HEAD

    history = invoke("--dsn", empty_dsn, "db", "history")
    assert history.exit_code == 0 and history.stdout.startswith("base -> 0001")

    refused = invoke("--dsn", empty_dsn, "db", "downgrade", input="n\n")
    assert refused.exit_code != 0
    assert invoke("--dsn", empty_dsn, "db", "current").stdout.strip() == HEAD

    downgraded = invoke("--dsn", empty_dsn, "db", "downgrade", "--yes")
    assert downgraded.exit_code == 0, downgraded.output
    assert downgraded.stdout.strip() == "schema at base"


def test_types_add_and_list(dsn):
    added = invoke("--dsn", dsn, "types", "add", "notes")
    assert added.exit_code == 0, added.output
    assert added.stdout.strip() == "memory type 'notes' created"
    assert "already exists" in invoke("--dsn", dsn, "types", "add", "notes").stdout
    listed = invoke("--dsn", dsn, "types", "list").stdout.split()
    assert "notes" in listed and "general" in listed and listed == sorted(listed)


def test_types_add_rejects_an_invalid_name(dsn):
    result = invoke("--dsn", dsn, "types", "add", "Bad-Name")
    assert result.exit_code != 0
    assert "invalid memory type 'Bad-Name'" in result.output


def test_doctor_names_pgvector(dsn):
    result = invoke("--dsn", dsn, "doctor")
    assert result.exit_code == 0, result.output
    assert re.search(r"^pgvector:\s+0\.\d+\.\d+$", result.stdout, re.M), result.stdout
    assert re.search(rf"^schema:\s+{HEAD}$", result.stdout, re.M), result.stdout


def test_unreachable_server_is_a_clean_error():
    result = invoke("--dsn", "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", "db", "current")
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit), result.exception
    assert "cannot connect to PostgreSQL" in result.output
    assert "Traceback" not in result.output


def test_commands_on_a_database_without_schema_fail_cleanly(empty_dsn):
    for args in (["types", "list"], ["types", "add", "notes"]):
        result = invoke("--dsn", empty_dsn, *args)
        assert result.exit_code != 0
        assert isinstance(result.exception, SystemExit), result.exception
        assert "db upgrade" in result.output


def test_presets_lists_named_mixes():
    result = invoke("presets")
    assert result.exit_code == 0
    assert {line.split()[0] for line in result.stdout.splitlines()} >= {"semantic", "hybrid", "retrieval_only"}


# -- ingest ------------------------------------------------------------------------------------------


def test_ingest_prints_a_summary_and_is_rerunnable(dsn, tmp_path):
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"content": "Ingrid grows basil on the balcony.", "tenant": "t"},
            {"content": "The balcony faces south.", "tenant": "t", "importance": 0.8},
            {"content": "Basil needs sun.", "tenant": "t", "memory_type": "fact"},
        ],
    )
    result = invoke("--dsn", dsn, "ingest", str(path))
    assert result.exit_code == 0, result.output
    assert re.fullmatch(
        r"stored 3 memories \(0 duplicates skipped\) from 3 records in [\d.]+s: [\d,]+ records/s\n", result.stdout
    ), result.stdout
    assert memory_count(dsn) == 3

    again = invoke("--dsn", dsn, "ingest", str(path))
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("stored 0 memories (3 duplicates skipped) from 3 records")
    assert memory_count(dsn) == 3


@pytest.mark.parametrize(
    "bad_record, message",
    [
        ('{"content": "broken"', "invalid JSON"),
        ({"content": "too important", "importance": "high"}, "importance"),
        ({"content": "wrong type", "memory_type": "nope"}, "unknown memory_type"),
    ],
)
def test_ingest_of_a_bad_line_names_it_and_writes_nothing(dsn, tmp_path, bad_record, message):
    good = [{"content": "first good line"}, {"content": "second good line"}]
    if isinstance(bad_record, dict):
        path = write_jsonl(tmp_path / "m.jsonl", [*good, bad_record, {"content": "fourth good line"}])
    else:
        path = write_jsonl(tmp_path / "m.jsonl", good)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(bad_record + "\n")

    result = invoke("--dsn", dsn, "ingest", str(path))
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert "m.jsonl line 3" in result.output and message in result.output
    assert memory_count(dsn) == 0


def test_ingest_commits_batches_before_the_bad_one(dsn, tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [{"content": f"line {i}"} for i in range(1, 4)])
    with path.open("a", encoding="utf-8") as fh:
        fh.write("not json\n")
    result = invoke("--dsn", dsn, "ingest", "--batch-size", "2", str(path))
    assert result.exit_code != 0 and "m.jsonl line 4" in result.output
    assert memory_count(dsn) == 2


def test_ingest_csv_with_tenant_option(dsn, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("content,importance\nfirst row,0.2\nsecond row,0.9\n", encoding="utf-8")
    vectors = HashEmbedder().embed(["first row", "second row"])
    lines = ["content,importance,embedding"] + [
        f'{c},{i},"{json.dumps(v.tolist())}"' for c, i, v in zip(["first row", "second row"], [0.2, 0.9], vectors)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke("--dsn", dsn, "ingest", "--tenant", "csvtenant", str(path))
    assert result.exit_code == 0, result.output
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tenant, content, importance FROM memoria.memories ORDER BY content").fetchall()
    assert rows == [("csvtenant", "first row", pytest.approx(0.2)), ("csvtenant", "second row", pytest.approx(0.9))]


# -- query -------------------------------------------------------------------------------------------


@pytest.mark.model
def test_query_prints_results_with_the_real_model(dsn, tmp_path):
    pytest.importorskip("sentence_transformers")
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"content": "Oskar repairs vintage bicycles in his garage.", "tenant": "t"},
            {"content": "The library closes at eight on Fridays.", "tenant": "t"},
        ],
    )
    assert invoke("--dsn", dsn, "ingest", str(path)).exit_code == 0

    result = invoke("--dsn", dsn, "query", "--tenant", "t", "vintage bicycles repair")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert re.match(r"\s*1\. \[-?\d+\.\d{4}\] \(general, [a-z0-9+]+\) Oskar repairs vintage bicycles", first), first
    assert re.search(r"^-- \d+ of \d+ candidates", result.stdout, re.M)

    as_json = invoke("--dsn", dsn, "query", "--tenant", "t", "--json", "--no-ranking", "vintage bicycles repair")
    assert as_json.exit_code == 0, as_json.output
    response = json.loads(as_json.stdout)
    assert response["memories"][0]["content"].startswith("Oskar repairs vintage bicycles")
    assert response["diagnostics"]["ranking_skipped"] is True
    assert "vector" in response["diagnostics"]["completed_sources"]


def test_query_asked_at_a_time_and_as_of_a_time(dsn, tmp_path):
    """--reference-time: 'yesterday' counts back from it (the temporal worker finds what was stored
    then); --as-of leaves out what was stored later; a time that is not one is a one-line error."""
    path = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"content": "Serviced the road bike at the shop.", "tenant": "t", "created_at": "2024-06-03T10:00:00Z"},
            {"content": "Bought a new bike helmet.", "tenant": "t", "created_at": "2024-09-01T10:00:00Z"},
        ],
    )
    assert invoke("--dsn", dsn, "ingest", str(path)).exit_code == 0
    asked = invoke(
        "--dsn", dsn, "query", "--tenant", "t", "--json", "--no-ranking",
        "--reference-time", "2024-06-04T09:00:00Z", "what did I do with my bike yesterday?",
    )  # fmt: skip
    assert asked.exit_code == 0, asked.output
    response = json.loads(asked.stdout)
    assert "temporal" in response["diagnostics"]["completed_sources"]
    assert response["memories"][0]["content"] == "Serviced the road bike at the shop."
    then = invoke("--dsn", dsn, "query", "--tenant", "t", "--json", "--as-of", "2024-07-01", "bike")
    assert then.exit_code == 0, then.output
    assert [m["content"] for m in json.loads(then.stdout)["memories"]] == ["Serviced the road bike at the shop."]
    bad = invoke("--dsn", dsn, "query", "--tenant", "t", "--reference-time", "next tuesday-ish", "bike")
    assert bad.exit_code != 0 and "reference_time" in bad.output and "Traceback" not in bad.output
