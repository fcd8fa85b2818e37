"""`memoria-pg serve` without a DSN, as on a fresh clone: the embedded server starts (and is migrated)
for the process; /v1/ready answers and a store + search round trip works; and `memoria-pg mcp` too."""

from __future__ import annotations

import pytest

from tests.service_live import live_server
from tests.test_service_mcp import over_stdio_env

pytestmark = pytest.mark.embedded


def test_serve_on_the_embedded_server(tmp_path):
    env = {"MEMORIA_DATA_DIR": str(tmp_path / "pgdata")}
    with live_server(None, env=env) as server, server.client() as http:
        ready = http.get("/v1/ready").json()
        assert ready["ready"] is True, ready
        assert http.post("/v1/memories", json={"content": "Maya's favourite colour is teal."}).status_code == 201
        found = http.post("/v1/search", json={"text": "Maya's favourite colour"}).json()["memories"]
    assert found[0]["content"] == "Maya's favourite colour is teal."

    stored = over_stdio_env(env, "default", lambda c: c.call_tool("recall", {"query": "favourite colour"}))
    assert stored.structured_content["memories"][0]["content"] == "Maya's favourite colour is teal."
