"""The OpenAPI document of the REST API, as the app serves it at /openapi.json, for the checked-in copy.

    python -m memoria_pg.service.openapi            # rewrites openapi.json at the top of the repository
    python -m memoria_pg.service.openapi -          # prints it

tests/test_service_schema.py fails when the checked-in copy differs from what the app serves.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .. import Config
from .settings import ServiceSettings

CHECKED_IN = Path(__file__).resolve().parents[2] / "openapi.json"


def document() -> dict[str, Any]:
    """The document of an app with the default settings (the limits are the defaults)."""
    from .app import create_app

    return create_app(ServiceSettings(), Config()).openapi()


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    text = render(document())
    if args == ["-"]:
        sys.stdout.write(text)
        return
    target = Path(args[0]) if args else CHECKED_IN
    target.write_text(text)
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
