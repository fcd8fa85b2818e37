"""The evaluation harness's command line, without the data or a server: `python -m evals` and
`memoria-pg eval`, which imports the harness only when it runs."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from evals.cli import eval_command
from memoria_pg.cli import cli

NO_DATA = {"MEMORIA_EVAL_DATA": None, "MEMORIA_DSN": None, "MEMORIA_DATA_DIR": None}


def test_without_a_data_folder_the_error_says_what_to_set():
    for command, args in ((eval_command, []), (cli, ["eval"])):
        result = CliRunner().invoke(command, args, env=NO_DATA)
        assert result.exit_code == 1, result.output
        assert "--data PATH or set MEMORIA_EVAL_DATA" in result.output


def test_memoria_pg_eval_help_is_the_harness_help():
    result = CliRunner().invoke(cli, ["eval", "--help"], env=NO_DATA, prog_name="memoria-pg")
    assert result.exit_code == 0, result.output
    assert "Usage: memoria-pg eval [OPTIONS]" in result.output
    assert "--data" in result.output and "--context-turns" in result.output


def test_memoria_pg_eval_without_the_harness_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "evals", None)
    monkeypatch.setitem(sys.modules, "evals.cli", None)
    result = CliRunner().invoke(cli, ["eval"], env=NO_DATA)
    assert result.exit_code == 1
    assert "the evaluation harness is not installed: from a checkout run `pip install -e ./evals`" in result.output


def test_the_cli_does_not_import_the_harness_until_eval_runs():
    code = (
        "import sys\nfrom memoria_pg.cli import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'evals' not in sys.modules, 'memoria_pg.cli imported the harness'\n"
    )
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
