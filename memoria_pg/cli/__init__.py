"""memoria-pg: the admin CLI. Each command parses, calls the library, formats; errors become messages
once, at the root group's boundary (base.py). Commands live by subject: admin.py, memories.py."""

from __future__ import annotations

from . import admin, lifecycle, memories, model, service  # noqa: F401  (they register their commands on the root group)
from .base import cli


def main() -> None:
    cli(prog_name="memoria-pg")


__all__ = ["cli", "main"]
