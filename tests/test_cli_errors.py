"""The CLI's errors on bad input: revisions, DSNs, `serve` start-up; one `Error:` line, exit status 1
(2 for usage errors), never a traceback or a raw driver message."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import psycopg
import pytest
from click.testing import Result

from tests.test_cli import invoke


def one_error_line(result: Result, *expected: str) -> str:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for text in expected:
        assert text in lines[0], lines[0]
    for leak in ("Traceback", "unexpected", "please report", "ProgrammingError", "SQLSTATE"):
        assert leak not in lines[0], lines[0]
    return lines[0]


def api_keys(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM memoria.api_keys").fetchone()[0]


# -- db downgrade asks first (item 1) ----------------------------------------------------------------


def test_every_downgrade_lists_what_it_reverts_and_asks(empty_dsn):
    assert invoke("--dsn", empty_dsn, "db", "upgrade", "0011").exit_code == 0
    created = invoke("--dsn", empty_dsn, "keys", "create", "--tenant", "t")
    assert created.exit_code == 0, created.output
    assert api_keys(empty_dsn) == 1

    refused = invoke("--dsn", empty_dsn, "db", "downgrade", "0010", input="n\n")
    assert refused.exit_code == 1, refused.output
    assert "Downgrading from 0011 to 0010 reverts 1 migration" in refused.output
    assert "0011  API keys" in refused.output and "Continue?" in refused.output
    assert invoke("--dsn", empty_dsn, "db", "current").stdout.strip() == "0011"
    assert api_keys(empty_dsn) == 1

    relative = invoke("--dsn", empty_dsn, "db", "downgrade", "--", "-2", input="n\n")
    assert relative.exit_code == 1 and "from 0011 to 0009 reverts 2 migrations" in relative.output
    assert "0010  The memory lifecycle" in relative.output

    confirmed = invoke("--dsn", empty_dsn, "db", "downgrade", "0010", input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert confirmed.stdout.strip().endswith("schema at 0010")

    unasked = invoke("--dsn", empty_dsn, "db", "downgrade", "0009", "--yes")
    assert unasked.exit_code == 0, unasked.output
    assert unasked.stdout.strip() == "schema at 0009"


# -- revisions (item 3) ------------------------------------------------------------------------------


def test_bad_revisions_are_user_errors(empty_dsn):
    assert invoke("--dsn", empty_dsn, "db", "upgrade", "0006").exit_code == 0
    for args in (["upgrade", "9999"], ["upgrade", "nonsense"], ["downgrade", "9999"], ["downgrade", "--yes", "x"]):
        line = one_error_line(invoke("--dsn", empty_dsn, "db", *args), "unknown revision", "0001 to ", "db history")
        assert repr(args[-1]) in line

    above = invoke("--dsn", empty_dsn, "db", "downgrade", "0010", "--yes")
    one_error_line(above, "0010 is above the database's current revision 0006", "memoria-pg db upgrade 0010")

    below = invoke("--dsn", empty_dsn, "db", "upgrade", "0003")
    one_error_line(below, "0003 is below the database's current revision 0006", "memoria-pg db downgrade 0003")

    past = invoke("--dsn", empty_dsn, "db", "downgrade", "--yes", "--", "-7")
    one_error_line(past, "'-7' is below base")
    assert invoke("--dsn", empty_dsn, "db", "current").stdout.strip() == "0006"


# -- DSNs (items 4 and 5) ----------------------------------------------------------------------------

COMMANDS = (["query", "hello"], ["get", "1"], ["db", "current"], ["types", "list"], ["keys", "list"])


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
@pytest.mark.parametrize("how", ["env", "option"])
def test_an_empty_dsn_is_an_error_everywhere(tmp_path, args, how):
    env = {"MEMORIA_DATA_DIR": str(tmp_path / "data")}  # where an embedded server would go, were one started
    if how == "env":
        result = invoke(*args, env={**env, "MEMORIA_DSN": ""})
    else:
        result = invoke(*args, "--dsn", "", env=env)
    one_error_line(result, "MEMORIA_DSN) is empty: give a DSN, or unset it to use the embedded server")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "dsn",
    [
        "not a url",
        "http://example.com/db",
        "mysql://app:pw@db.example/mem",
        "postgresql://app:S3cret%zzPW@db.example/mem",
    ],
)
@pytest.mark.parametrize("args", [["query", "hello"], ["db", "current"], ["get", "1"]], ids=lambda a: " ".join(a))
def test_a_dsn_libpq_cannot_parse_is_an_invalid_dsn(dsn, args):
    line = one_error_line(
        invoke("--dsn", dsn, *args), "invalid DSN", "libpq cannot parse it", "postgresql://user:password@host"
    )
    assert "S3cret" not in line and "missing" not in line and "percent-encoded token" not in line


def test_cannot_connect_is_one_line():
    result = invoke("--dsn", "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", "db", "current")
    one_error_line(result, "cannot connect to PostgreSQL", "Is the server running")


# -- erase-tenant (item 6) ---------------------------------------------------------------------------


def test_erase_of_a_tenant_without_rows_says_so(dsn):
    result = invoke("--dsn", dsn, "erase-tenant", "nosuchtenant", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "nothing stored for tenant 'nosuchtenant' (0 rows)"


# -- serve (item 2) ----------------------------------------------------------------------------------


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("uvicorn")
    env = {k: v for k, v in os.environ.items() if k not in ("MEMORIA_DSN", "MEMORIA_DATA_DIR")}
    env["MEMORIA_EMBEDDING_MODEL"] = "hash"
    return subprocess.run(
        [sys.executable, "-m", "memoria_pg.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def serve_error(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "Application startup failed" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "Error" in line or "ERROR" in line]
    assert len(errors) == 1 and errors[0].startswith("Error: "), done.stderr
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_on_an_unreachable_server_is_one_error_line():
    done = serve("--dsn", "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", "--port", str(free_port()))
    serve_error(done, "cannot connect to PostgreSQL")


def test_serve_start_up_failure_is_one_error_line(empty_dsn):
    done = serve("--dsn", empty_dsn, "--port", str(free_port()))  # no schema: the app cannot start
    serve_error(done, "the memoria schema is not installed", "db upgrade")


def test_serve_on_a_port_in_use_is_one_error_line(dsn):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--dsn", dsn, "--port", str(port))
    serve_error(done, f"cannot listen on 127.0.0.1 port {port}")


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_serve_port_out_of_range_is_a_usage_error(port):
    done = serve("--dsn", "postgresql://postgres@127.0.0.1:1/nowhere", "--port", port)
    assert done.returncode == 2, done.stderr
    assert "Invalid value for '--port'" in done.stderr and "1<=x<=65535" in done.stderr
