#!/usr/bin/env bash
# Runs the test suite: installs what it needs, checks lint, format and types, starts the PostgreSQL 17
# + pgvector + AGE server (scripts/age-server.sh), runs every test against it, then the smoke tests on
# the embedded server.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh
echo "== lint, format and types (ruff, mypy --strict over memoria_pg; settings in pyproject.toml)" >&2
"$PY" -m ruff check memoria_pg tests evals benchmarks
"$PY" -m ruff format --check memoria_pg tests evals benchmarks
"$PY" -m mypy
DSN=$(bash scripts/age-server.sh start)
ADMIN_DSN="${DSN%/*}/postgres"
echo "== suite against the AGE-capable server ($ADMIN_DSN)" >&2
MEMORIA_TEST_DSN="$ADMIN_DSN" "$PY" -m pytest tests -m "not embedded" "$@"
echo "== smoke tests on the embedded server" >&2
env -u MEMORIA_TEST_DSN -u MEMORIA_DSN "$PY" -m pytest tests -m embedded "$@"
