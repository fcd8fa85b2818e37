"""A tenant key cannot read, search, change or delete another tenant's memories through any endpoint or
MCP tool, whatever the body or the headers say. Every operation of the OpenAPI document is attacked
(a new route fails test_every_operation_is_attacked until it is added here)."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import live_server, new_key
from tests.test_service_mcp import over_http

SECRET = "Alice's bank PIN is 8271 and her passport is in the blue drawer."


@pytest.fixture(scope="module")
def world(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    tokens = {"alice": new_key(dsn, "alice"), "bob": new_key(dsn, "bob")}
    try:
        with live_server(dsn, "--key-cache-seconds", "0") as live, live.client(tokens["alice"]) as http:
            ids = http.post(
                "/v1/memories",
                json=[
                    {"content": SECRET, "memory_type": "fact", "external_id": "a-1", "metadata": {"speaker": "Alice"}},
                    {
                        "content": "Alice's sister is called Beth.",
                        "memory_type": "fact",
                        "metadata": {"speaker": "Alice"},
                    },
                    {"content": "Alice visited Porto in May.", "memory_type": "episodic"},
                ],
            ).json()["ids"]
            live.tokens, live.dsn, live.alice_ids = tokens, dsn, ids
            yield live
    finally:
        drop_database(admin_dsn, name)


def alice_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, memory_type, content, metadata, importance, pinned, valid_to FROM memoria.memories "
            "WHERE tenant = 'alice' ORDER BY id"
        ).fetchall()


def leaked(response_text: str) -> bool:
    return any(word in response_text for word in ("8271", "passport", "Beth", "Porto"))


def attacks(ids: list[int]) -> list[tuple[str, str, dict | None, dict | None]]:
    """(method, path, json body, query) of every operation, aimed at Alice's memories; the stores come last."""
    target = ids[0]
    return [
        ("GET", "/v1/health", None, None),
        ("GET", "/v1/ready", None, None),
        ("POST", "/v1/search", {"text": SECRET}, None),
        (
            "POST",
            "/v1/search",
            {"text": "bank PIN passport", "workers": ["vector", "bm25", "phrase", "attribute", "graph", "fusion"]},
            None,
        ),
        (
            "POST",
            "/v1/search",
            {"text": "Alice's sister", "v3": True, "include_invalid": True, "explain": True, "diagnostics": True},
            None,
        ),
        (
            "POST",
            "/v1/search",
            {"text": "Alice Porto", "memory_type": "episodic", "ranking": False, "top_k": 1000},
            None,
        ),
        ("GET", "/v1/memories", None, {"limit": 1000}),
        ("GET", "/v1/memories", None, {"where": json.dumps({"speaker": "Alice"}), "memory_type": "fact"}),
        ("GET", f"/v1/memories/{target}", None, None),
        ("PATCH", f"/v1/memories/{target}", {"content": "owned by bob", "pinned": True}, None),
        ("DELETE", f"/v1/memories/{target}", None, None),
        ("POST", "/v1/memories/forget", {"where": {"speaker": "Alice"}}, None),
        ("POST", "/v1/memories/forget", {"memory_type": "fact", "before": "2999-01-01T00:00:00Z"}, None),
        ("GET", f"/v1/memories/{target}/history", None, None),
        ("POST", f"/v1/memories/{target}/invalidate", {}, None),
        ("POST", f"/v1/memories/{target}/restore", None, None),
        # Last: Bob's own copy of the same memory (the reads above would find it, as his).
        ("POST", "/v1/memories", {"content": SECRET, "memory_type": "fact", "external_id": "a-1"}, None),
        ("POST", "/v1/memories", [{"content": "x", "metadata": {"tenant": "alice"}}], None),
    ]


def test_every_operation_is_attacked(world):
    with world.client() as http:
        document = http.get("/openapi.json").json()
    operations = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    attacked = {(m, p.replace(str(world.alice_ids[0]), "{memory_id}")) for m, p, _, _ in attacks(world.alice_ids)}
    assert operations == attacked


def test_bobs_key_never_reaches_alices_memories(world):
    before = alice_rows(world.dsn)
    with world.client(world.tokens["bob"]) as http:
        for method, path, body, params in attacks(world.alice_ids):
            response = http.request(method, path, json=body, params=params)
            assert response.status_code in (200, 201, 404, 422), (method, path, response.text)
            assert not leaked(response.text), (method, path, response.text)
            assert not set(world.alice_ids) & _ids(response), (method, path, response.text)
    assert alice_rows(world.dsn) == before
    with psycopg.connect(world.dsn) as conn:
        bobs = conn.execute("SELECT content, external_id FROM memoria.memories WHERE tenant = 'bob'").fetchall()
    assert (SECRET, "a-1") in bobs  # Bob's own copy: stored for Bob, not a duplicate of Alice's


@pytest.mark.parametrize(
    "body",
    [
        {"content": "x", "tenant": "alice"},
        [{"content": "x", "tenant": "alice"}],
        {"content": "x", "memory": {"tenant": "alice"}},
    ],
)
def test_a_body_cannot_name_a_tenant(world, body):
    with world.client(world.tokens["bob"]) as http:
        assert http.post("/v1/memories", json=body).status_code == 422
        assert http.post("/v1/search", json={"text": "x", "tenant": "alice"}).status_code == 422
        assert (
            http.post("/v1/memories/forget", json={"where": {"speaker": "Alice"}, "tenant": "alice"}).status_code == 422
        )


def test_a_header_cannot_name_a_tenant(world):
    before = alice_rows(world.dsn)
    with world.client(world.tokens["bob"], **{"X-Memoria-Tenant": "alice"}) as http:
        for method, path, body, params in attacks(world.alice_ids):
            if path in ("/v1/health", "/v1/ready"):
                continue
            response = http.request(method, path, json=body, params=params)
            assert response.status_code == 403, (method, path, response.text)
    assert alice_rows(world.dsn) == before


def test_bobs_mcp_tools_never_reach_alices_memories(world):
    target = world.alice_ids[0]

    async def session(client):
        results = [
            await client.call_tool("recall", {"query": SECRET, "top_k": 50}),
            await client.call_tool("recall", {"query": "Alice sister Beth", "memory_type": "fact"}),
            await client.call_tool("update", {"memory_id": target, "content": "owned by bob"}),
            await client.call_tool("history", {"memory_id": target}),
            await client.call_tool("forget", {"memory_ids": world.alice_ids}),
            await client.call_tool("remember", {"content": "x", "metadata": {"tenant": "alice"}}),
        ]
        tools = {t.name for t in (await client.list_tools()).tools}
        return results, tools

    before = alice_rows(world.dsn)
    results, tools = over_http(world.url, session, world.tokens["bob"])
    assert tools == {"remember", "recall", "memory_types", "update", "history", "forget"}
    recalled = [r.structured_content["memories"] for r in results[:2]]
    assert not any(m["id"] in world.alice_ids for found in recalled for m in found)
    assert all(r.is_error and "for this tenant" in r.content[0].text for r in results[2:5])
    assert not any(leaked(str(r.content)) for r in results[2:])  # (recall may find Bob's own copy)
    assert alice_rows(world.dsn) == before


def _ids(response) -> set[int]:
    try:
        body = response.json()
    except ValueError:
        return set()
    found: set[int] = set()

    def walk(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("id", "memory_id") and isinstance(item, int):
                    found.add(item)
                elif key == "ids" and isinstance(item, list):
                    found.update(i for i in item if isinstance(i, int))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return found
