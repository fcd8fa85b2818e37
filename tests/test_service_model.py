"""Smoke test of the server with the real embedding model: it loads in the background (/v1/ready says
"loading" until then, never "failed"), then a store + search round trip finds by meaning."""

from __future__ import annotations

import time

import pytest

from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import live_server, new_key

pytestmark = pytest.mark.model


def test_the_server_with_the_real_model(admin_dsn, template_dsn):
    pytest.importorskip("sentence_transformers")
    name, dsn = create_database(admin_dsn, TEMPLATE)
    token = new_key(dsn, "model")
    try:
        with live_server(dsn, env={"MEMORIA_EMBEDDING_MODEL": ""}) as server, server.client(token) as http:
            deadline = time.monotonic() + 300
            while (ready := http.get("/v1/ready").json())["model"] == "loading" and time.monotonic() < deadline:
                time.sleep(0.5)
            assert ready["ready"] is True and ready["model"] == "loaded", ready
            http.post(
                "/v1/memories",
                json=[
                    {"content": "Oskar repairs vintage bicycles in his garage."},
                    {"content": "The library closes at eight on Fridays."},
                ],
            )
            found = http.post("/v1/search", json={"text": "who fixes old bikes?", "top_k": 1}).json()["memories"]
        assert found[0]["content"].startswith("Oskar repairs vintage bicycles")
    finally:
        drop_database(admin_dsn, name)
