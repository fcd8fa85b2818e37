"""Issue 15 (reliability round 2), the input side: dates that cannot be read back (point 2), tokens and
names too long to index (4), an empty tenant (5), CSV quirks (6), near-zero vectors (9), DSN redaction
(10) and the error contract (11). Each test fails on 914387e, where the issue was found."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner

from memoria_pg import Config, ConfigError, InputError, ServerError
from memoria_pg.cli import cli

NO_ENV = {"MEMORIA_DSN": None, "MEMORIA_DEFAULT_TENANT": None, "PGOPTIONS": None}


def run(*args: str, env: dict[str, str | None] | None = None):
    return CliRunner().invoke(cli, list(args), env={**NO_ENV, **(env or {})})


def failed_cleanly(result) -> bool:
    """Exit status 1 with a one-line "Error: ..." message: the CLI's boundary handled it (no traceback)."""
    return result.exit_code == 1 and isinstance(result.exception, SystemExit) and "Error: " in result.output


def memories(dsn: str, where: str = "TRUE", params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT tenant, memory_type, content FROM memoria.memories WHERE {where} ORDER BY id", params
        ).fetchall()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- point 2: dates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "created_at",
    [
        "0001-01-01T00:00:00+14:00",  # year 1 BC in UTC: PostgreSQL stores it, psycopg cannot read it
        "0001-01-01T06:00:00Z",  # year 1 in UTC, year 0 in a session west of UTC
        dt.datetime(1, 1, 1, 3, tzinfo=dt.timezone(dt.timedelta(hours=5))),
    ],
)
def test_a_time_that_cannot_be_read_back_is_an_input_error_naming_its_record(system, dsn, created_at):
    with pytest.raises(InputError, match=r"^record 2: created_at .* cannot be stored and read back"):
        system.store_many(
            [{"content": "fine", "tenant": "t"}, {"content": "old", "tenant": "t", "created_at": created_at}]
        )
    assert memories(dsn) == []


def test_times_are_normalized_to_utc_at_validation(system):
    system.store("Maya moved to Lisbon.", tenant="t", created_at="2024-05-01T10:00:00+02:00")
    (memory,) = system.query("Lisbon", tenant="t", ranking=False).memories
    assert memory.created_at == dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC)
    from memoria_pg.core import validation

    value = validation.created_at("2024-05-01T10:00:00+02:00", "record 1", dt.datetime.now(dt.UTC))
    assert value.tzinfo is dt.UTC and value.hour == 8


def test_one_unreadable_stored_time_does_not_fail_the_query(system, dsn):
    bad = system.store("Maya keeps a green notebook.", tenant="t")
    good = system.store("Maya keeps a green pen.", tenant="t")
    with psycopg.connect(dsn) as conn:  # as an older version stored it (year 1 BC in UTC)
        conn.execute("UPDATE memoria.memories SET created_at = '0001-01-01 00:00:00+14' WHERE id = %s", (bad,))
    for ranking in (True, False):
        found = {m.memory_id: m for m in system.query("Maya green", tenant="t", ranking=ranking).memories}
        assert set(found) == {bad, good}
        assert found[bad].created_at == dt.datetime.min.replace(tzinfo=dt.UTC)  # the nearest readable time


# -- point 4: long tokens and names ------------------------------------------------------------------


def test_any_content_within_the_limit_is_storable(system):
    rng = random.Random(15)  # random, so that no index entry compresses below the b-tree limit
    hex_blob = "".join(rng.choice("0123456789abcdef") for _ in range(6_000))  # one 6,000-character token
    dna = "".join(rng.choice("ACGT") for _ in range(8_000))
    cjk = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(1_200))  # no punctuation, no spaces
    names = " ".join(rng.choice(["Alpha", "Bravo", "Charlie", "Delta", "Echo"]) for _ in range(800))
    contents = [f"blob {hex_blob} end", f"sequence {dna}", cjk, names, "x" * 100_000, "😀" * 100_000]
    result = system.store_many([{"content": c, "tenant": "t"} for c in contents])
    assert result.inserted == len(contents)
    hits = system.query(hex_blob[:300], tenant="t", workers=["bm25"], ranking=False).memories
    assert hits and hits[0].memory_id == result.ids[0]  # the same run still matches itself
    assert system.query(cjk, tenant="t", workers=["bm25"], ranking=False).memories[0].memory_id == result.ids[2]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"entities": ["ﷺ" * 150]}, "entity .* once normalized"),  # 150 characters, 2,700 after NFKC
        ({"external_id": "😀" * 500, "tenant": "🙂" * 200}, "external_id is over 1,000 bytes"),
        ({"attributes": [["😀" * 500, "colour", "teal"]], "tenant": "🙂" * 200}, "subject is over 1,000 bytes"),
    ],
)
def test_a_key_that_cannot_be_indexed_is_an_input_error_naming_its_record(system, dsn, fields, message):
    with pytest.raises(InputError, match=rf"^record 1: .*{message}"):
        system.store_many([{"content": "Maya's favourite colour is teal.", **fields}])
    assert memories(dsn) == []


def test_the_cli_says_cannot_connect_only_when_it_cannot(dsn):
    assert "cannot connect to PostgreSQL" in run("--dsn", "postgresql://nobody@127.0.0.1:1/x", "db", "current").output
    # A server error on an open connection (a lock timeout) is not a connection failure.
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE public.memoria_alembic_version IN ACCESS EXCLUSIVE MODE")
        result = run("--dsn", dsn, "db", "current", env={"PGOPTIONS": "-c lock_timeout=200"})
    assert failed_cleanly(result), result.output
    assert "cannot connect" not in result.output and "LockNotAvailable" in result.output


# -- point 5: the tenant -----------------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["", 0, False, 7, ["t"]])
def test_an_empty_or_non_string_tenant_is_an_input_error_on_every_library_path(system, dsn, tenant):
    with pytest.raises(InputError, match="tenant"):
        system.store("Maya likes tea.", tenant=tenant)
    with pytest.raises(InputError, match="record 1: tenant"):
        system.store_many([{"content": "Maya likes tea.", "tenant": tenant}])
    with pytest.raises(InputError, match="tenant"):
        system.query("tea", tenant=tenant)
    assert memories(dsn) == []


def test_the_default_tenant_applies_only_when_the_tenant_is_omitted(system, dsn):
    system.store("Maya likes tea.")
    system.store_many([{"content": "Jonas likes coffee."}])
    assert {t for t, _, _ in memories(dsn)} == {"default"}
    assert len(system.query("likes", ranking=False).memories) == 2
    with pytest.raises(ConfigError, match="default_tenant"):
        Config(default_tenant="")


def test_the_cli_refuses_an_empty_tenant(dsn, tmp_path):
    path = write(tmp_path / "m.jsonl", '{"content": "Maya likes tea."}\n')
    for args in (
        ("ingest", str(path), "--tenant", ""),
        ("query", "tea", "--tenant", ""),
        ("graph", "rebuild", "--tenant", ""),
    ):
        result = run("--dsn", dsn, *args)
        assert failed_cleanly(result) and "tenant" in result.output, (args, result.output)
        assert "Traceback" not in result.output
    assert memories(dsn) == []


def test_the_graph_functions_refuse_an_empty_tenant(system):
    from memoria_pg.db import graph_age

    with system.db.connection() as conn, pytest.raises(InputError, match="tenant"):
        graph_age.rebuild(conn, "")


# -- point 6: CSV and TSV ----------------------------------------------------------------------------


def ingest(dsn: str, path: Path):
    return run("--dsn", dsn, "ingest", str(path))


def test_a_csv_header_with_a_byte_order_mark_is_read(dsn, tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes("content,tenant\nMaya likes tea.,t\n".encode("utf-8-sig"))
    assert ingest(dsn, path).exit_code == 0
    assert memories(dsn) == [("t", "general", "Maya likes tea.")]


def test_a_tsv_file_is_split_on_tabs(dsn, tmp_path):
    result = ingest(dsn, write(tmp_path / "m.tsv", "content\ttenant\nTea, milk and honey.\tt\n"))
    assert result.exit_code == 0, result.output
    assert memories(dsn) == [("t", "general", "Tea, milk and honey.")]


@pytest.mark.parametrize(
    "body, message",
    [
        pytest.param(
            'content,tenant\nok,t\n"never closed,t\nmore,t\n',
            r"m\.csv line 3: .*quoted field is never closed",
            id="unterminated quote",
        ),
        pytest.param(
            "content,pinned\nok,true\nsure,banana\n", r"m\.csv line 3: pinned must be true or false", id="pinned"
        ),
        pytest.param(
            "content,metadata\nok,\nbig," + "x" * 140_000 + "\n",
            r"m\.csv line 3: .*field larger than field limit",
            id="field over 128 KiB",
        ),
    ],
)
def test_a_csv_quirk_is_an_input_error_naming_its_line(dsn, tmp_path, body, message):
    result = ingest(dsn, write(tmp_path / "m.csv", body))
    assert failed_cleanly(result), result.output
    assert re.search(message, result.output), result.output
    assert memories(dsn) == []


def test_invalid_utf8_in_a_csv_names_its_line(dsn, tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"content,tenant\nok,t\nfine,t\ncaf\xe9,t\n")
    result = ingest(dsn, path)
    assert failed_cleanly(result) and "m.csv line 4: not valid UTF-8" in result.output, result.output


# -- point 9: near-zero vectors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "vector, message",
    [
        ([1e-23] * 384, "finite and non-zero"),  # its float32 norm underflows: distance 0 to half the queries
        ([0.0] * 383 + [1e-9], "finite and non-zero"),
        (["0.1"] * 384, "list of numbers"),
        ([True] * 384, "list of numbers"),
        ([0.1] * 383 + [True], "list of numbers"),
    ],
)
def test_a_degenerate_or_non_numeric_vector_is_refused(system, dsn, vector, message):
    with pytest.raises(InputError, match=f"record 1: embedding .*{message}"):
        system.store_many([{"content": "x", "tenant": "t", "embedding": vector}])
    with pytest.raises(InputError, match=message):
        system.query("x", tenant="t", embedding=vector)
    assert memories(dsn) == []


def test_supplied_vectors_are_normalized_in_float64(system, dsn):
    tiny = np.full(384, 1e-5)  # above the threshold: its float32 squares would still be tiny
    system.store_many([{"content": "small", "tenant": "t", "embedding": tiny.tolist()}])
    with psycopg.connect(dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        (stored,) = conn.execute("SELECT embedding FROM memoria.memories").fetchone()
    assert abs(float(np.linalg.norm(stored.to_numpy().astype(np.float64))) - 1.0) < 1e-6


def test_a_stored_vector_without_direction_never_makes_a_score_nan(system, dsn):
    ids = system.store_many([{"content": f"green notebook {i}", "tenant": "t"} for i in range(5)]).ids
    with psycopg.connect(dsn) as conn:  # as older versions or a custom embedder could store it
        conn.execute(
            "UPDATE memoria.memories SET embedding = array_fill(0, ARRAY[384])::vector WHERE id = %s", (ids[0],)
        )
    for ranking in (True, False):
        response = system.query("green notebook", tenant="t", ranking=ranking)
        assert response.memories
        for m in response.candidates:
            assert math.isfinite(m.final_score) and math.isfinite(m.retrieval_score), m
            assert all(math.isfinite(v) for v in m.scores.values()), m.scores


# -- point 10: DSN redaction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dsn_text",
    [
        "postgresql://app:s3cret@db.example:5432/mem",
        "postgresql://app@db.example/mem?password=s3cret",
        "postgresql://app@db.example/mem?sslmode=require&password=s3cret",
        "host=db.example user=app password=s3cret dbname=mem",
        "host=db.example user=app password='s3cret with spaces' dbname=mem",
        "host=db.example password = s3cret",
        "host=db.example sslpassword=s3cret",
    ],
)
def test_config_redacts_the_password_of_every_dsn_form(dsn_text):
    for args in (("config",), ("config", "--json")):
        result = run("--dsn", dsn_text, *args)
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output and "***" in result.output, result.output
    from memoria_pg.db import redact_dsn

    assert psycopg.conninfo.conninfo_to_dict(redact_dsn(dsn_text))["host"] == "db.example"


# -- point 11: the error contract --------------------------------------------------------------------


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"metadata": nested(5_000)}, "metadata is nested more than 32 levels"),
        ({"metadata": {"blob": "x" * 70_000}}, "metadata is 70,012 bytes as JSON, over the limit of 65,536"),
        ({"attributes": 5}, "attributes must be a list"),
        ({"entities": {"Maya": 1}}, "entities must be a list"),
        ({"external_id": {"a": 1}}, "external_id must be a string"),
        ({"memory_type": ""}, "unknown memory_type ''"),
        ({"bogus": 1}, "unknown fields"),
    ],
)
def test_invalid_input_is_an_input_error(system, dsn, fields, message):
    with pytest.raises(InputError, match=message):
        system.store("Maya likes tea.", tenant="t", **fields)
    assert memories(dsn) == []


def test_deeply_nested_jsonl_is_an_input_error_naming_its_line(dsn, tmp_path):
    line = '{"content": "x", "metadata": ' + '{"k": ' * 100_000 + "1" + "}" * 100_000 + "}"
    result = ingest(dsn, write(tmp_path / "m.jsonl", '{"content": "ok"}\n' + line + "\n"))
    assert failed_cleanly(result) and "m.jsonl line 2: JSON nested too deeply" in result.output, result.output


def test_a_huge_top_k_and_bad_batch_sizes_are_input_errors(system, dsn, tmp_path):
    with pytest.raises(InputError, match="top_k"):
        system.query("tea", tenant="t", top_k=10**12)
    for size in (0, -1, True):
        with pytest.raises(InputError, match="batch_size"):
            system.store_many([{"content": "x", "tenant": "t"}], batch_size=size)
    result = run("--dsn", dsn, "ingest", "--batch-size", "0", str(write(tmp_path / "m.jsonl", '{"content": "x"}\n')))
    assert result.exit_code == 2 and "--batch-size" in result.output, result.output
    assert memories(dsn) == []


@pytest.mark.parametrize(
    "setting, value",
    [
        ("statement_timeout_ms", -1),
        ("pool_timeout", -1.0),
        ("pool_timeout", float("nan")),
        ("retrieval_deadline_ms", 0),
        ("top_k", 10**12),
        ("hnsw_ef_search", 5_000),
        ("max_content_chars", 10**7),
        ("top_k", "5"),
        ("enable_v4", "yes"),
    ],
)
def test_config_values_are_range_checked(setting, value):
    with pytest.raises(ConfigError, match=setting):
        Config(**{setting: value})


def test_a_terminated_connection_is_a_server_error_with_the_driver_error_chained(system, dsn):
    def slow_graph_writer(conn, tenant):  # inside the batch's transaction
        conn.execute("SELECT pg_sleep(30) /* issue-15 */")

    def terminate() -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            for _ in range(200):
                pids = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE query LIKE '%%issue-15 */' AND pid <> pg_backend_pid()"
                ).fetchall()
                if pids:
                    admin.execute("SELECT pg_terminate_backend(%s)", pids[0])
                    return
                time.sleep(0.05)

    system.ingestor.graph_writer = slow_graph_writer
    killer = threading.Thread(target=terminate, daemon=True)
    killer.start()
    with pytest.raises(ServerError, match="connection to PostgreSQL failed while in use") as info:
        system.store_many([{"content": f"memory {i}", "tenant": "t"} for i in range(5)])
    killer.join(10)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    assert memories(dsn) == []


def test_dsn_and_data_dir_are_accepted_after_any_command(dsn, tmp_path):
    for args in (("db", "upgrade", "--dsn", dsn), ("db", "current", "--dsn", dsn), ("types", "list", "--dsn", dsn)):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
    assert "general" in run("types", "list", "--dsn", dsn).output
    result = run("config", "--json", "--dsn", "postgresql://a:b@h/db", "--data-dir", str(tmp_path))
    values = json.loads(result.output)
    assert values["data_dir"] == str(tmp_path) and values["dsn"] == "postgresql://a:***@h/db"


def test_the_cli_never_prints_a_traceback(dsn, monkeypatch):
    from memoria_pg.db import migrate

    def broken(_dsn):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(migrate, "current", broken)
    result = run("--dsn", dsn, "db", "current")
    assert failed_cleanly(result) and "unexpected RuntimeError: something unexpected" in result.output


def test_the_readme_states_what_is_enforced():
    """The configuration ranges and the field table's limits in the README are the enforced ones."""
    from memoria_pg.config import RANGES
    from memoria_pg.core import text, validation

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    paragraph = " ".join(readme[readme.index("**Accepted values**") :].split("\n\n")[0].split())

    def number(value: str) -> float:
        return 2 ** int(value[2:].removesuffix("-1")) - 1 if value.startswith("2^") else float(value.replace(",", ""))

    stated = {
        name: (number(lo), number(hi))
        for name, lo, hi in re.findall(r"`(\w+)` ([\d.,^-]+)\.\.([\d,.^]+-?1?)", paragraph)
    }
    assert stated == RANGES
    table = readme[readme.index("### Ingest file format") : readme.index("**Text without spaces**")]
    for claim in (
        f"nested at most {validation.MAX_METADATA_DEPTH} levels",
        f"at most {validation.MAX_METADATA_BYTES:,} bytes as UTF-8 JSON",
        f"a norm of at least {validation.MIN_VECTOR_NORM:.0e}".replace("e-0", "e-"),
        f"from {validation.MIN_TIME.date()} to {validation.MAX_TIME.date()} UTC",
        f"at most {validation.MAX_FIELD_CHARS} characters and {text.MAX_KEY_BYTES:,} bytes",
        f"each at most {text.MAX_NAME_CHARS} characters",
        f"at most {validation.MAX_TENANT_CHARS} characters",
    ):
        assert claim in table, claim
    assert f"first {text.MAX_TERM_CHARS}" in readme
