#!/usr/bin/env bash
# Runs the test suite: installs what it needs, checks lint, format and types, starts the PostgreSQL 17
# + pgvector + AGE server (scripts/age-server.sh) and a hot standby of it (scripts/standby.sh), runs every
# test against them, then the smoke tests on the embedded server.
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
# A hot standby of it (scripts/standby.sh: pg_basebackup once, then reused): tests/test_replicas*.py read
# from it (the query tests again on it, the replica faults).
STANDBY_DSN=$(bash scripts/standby.sh start)
echo "== suite against the AGE-capable server ($ADMIN_DSN) and its standby (${STANDBY_DSN%/*}/postgres)" >&2
MEMORIA_TEST_DSN="$ADMIN_DSN" MEMORIA_TEST_STANDBY_DSN="${STANDBY_DSN%/*}/postgres" \
    "$PY" -m pytest tests -m "not embedded" "$@"
echo "== smoke tests on the embedded server" >&2
env -u MEMORIA_TEST_DSN -u MEMORIA_DSN "$PY" -m pytest tests -m embedded "$@"
