#!/usr/bin/env bash
# Installs memoria-pg and runs the demo on the embedded PostgreSQL server (no DSN needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec memoria-pg demo
