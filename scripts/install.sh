#!/usr/bin/env bash
# Installs memoria-pg with everything the demo and the tests need, into the current Python.
# torch comes first and pinned: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -e ".[all]"
# The evaluation harness (not part of the memoria-pg wheel): python -m evals, memoria-pg eval.
"$PY" -m pip install --quiet -e ./evals
