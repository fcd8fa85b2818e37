"""The memory lifecycle over REST and MCP, against a live server: get, list with its cursor, update,
delete, forget, history, invalidate / restore, and search as of a time."""

from __future__ import annotations

import pytest

from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import live_server, new_key
from tests.test_service_api import assert_problem
from tests.test_service_mcp import over_http


@pytest.fixture(scope="module")
def server(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    token = new_key(dsn, "gina")
    try:
        with live_server(dsn, "--key-cache-seconds", "0") as live:
            live.token = token
            yield live
    finally:
        drop_database(admin_dsn, name)


def stored(http, content: str, **fields) -> int:
    response = http.post("/v1/memories", json={"content": content, **fields})
    assert response.status_code == 201, response.text
    return response.json()["ids"][0]


def test_get_update_history_delete(server):
    with server.client(server.token) as http:
        memory_id = stored(
            http, "Gina works at Acme.", memory_type="fact", external_id="g-1", metadata={"speaker": "Gina"}
        )
        got = http.get(f"/v1/memories/{memory_id}").json()
        assert got["content"] == "Gina works at Acme." and got["external_id"] == "g-1" and got["status"] == "active"
        changed = http.patch(f"/v1/memories/{memory_id}", json={"content": "Gina works at Initech.", "importance": 0.8})
        assert changed.status_code == 200, changed.text
        assert changed.json()["content"] == "Gina works at Initech." and changed.json()["importance"] == pytest.approx(
            0.8
        )
        found = http.post("/v1/search", json={"text": "where does Gina work?"}).json()["memories"]
        assert found[0]["content"] == "Gina works at Initech."
        events = http.get(f"/v1/memories/{memory_id}/history").json()
        assert [e["event"] for e in events] == ["stored", "updated"]
        assert events[1]["detail"]["previous"]["content"] == "Gina works at Acme."
        assert http.delete(f"/v1/memories/{memory_id}").json() == {"deleted": 1}
        assert_problem(http.get(f"/v1/memories/{memory_id}"), 404, str(memory_id))
        assert_problem(http.delete(f"/v1/memories/{memory_id}"), 404)
        assert_problem(http.patch(f"/v1/memories/{memory_id}", json={"importance": 0.1}), 404)
        assert http.get(f"/v1/memories/{memory_id}/history").json()[-1]["event"] == "deleted"


def test_list_pages_with_the_cursor_and_filters(server):
    with server.client(server.token) as http:
        ids = [stored(http, f"Listed note {i}.", memory_type="episodic", metadata={"batch": "list"}) for i in range(5)]
        seen, after = [], 0
        while True:
            page = http.get("/v1/memories", params={"memory_type": "episodic", "limit": 2, "after": after}).json()
            seen += [m["id"] for m in page["memories"]]
            if page["next_after"] is None:
                break
            after = page["next_after"]
        assert seen == sorted(ids)
        where = http.get("/v1/memories", params={"where": '{"batch": "list"}', "limit": 100}).json()
        assert [m["id"] for m in where["memories"]] == sorted(ids) and where["next_after"] is None
        assert_problem(http.get("/v1/memories", params={"where": "not json"}), 422, "JSON object")
        assert_problem(http.get("/v1/memories", params={"limit": 0}), 422, "limit")


def test_forget_by_filter_with_a_dry_run(server):
    with server.client(server.token) as http:
        for i in range(3):
            stored(http, f"Procedure step {i}.", memory_type="procedural")
        dry = http.post("/v1/memories/forget", json={"memory_type": "procedural", "dry_run": True}).json()
        assert dry["matched"] == 3 and dry["deleted"] == 0
        done = http.post("/v1/memories/forget", json={"memory_type": "procedural"}).json()
        assert done["matched"] == 3 and done["deleted"] == 3 and sorted(done["ids"]) == sorted(dry["ids"])
        assert_problem(http.post("/v1/memories/forget", json={}), 422, "needs a filter")


def test_invalidate_restore_and_search_as_of(server):
    with server.client(server.token) as http:
        memory_id = stored(http, "Gina's locker code is 4711.", memory_type="fact")
        before = http.get(f"/v1/memories/{memory_id}").json()["created_at"]
        gone = http.post(f"/v1/memories/{memory_id}/invalidate", json={}).json()
        assert gone["status"] == "invalidated" and gone["valid_to"]
        query = {"text": "Gina locker code"}
        assert memory_id not in [m["id"] for m in http.post("/v1/search", json=query).json()["memories"]]
        with_invalid = http.post("/v1/search", json={**query, "include_invalid": True}).json()["memories"]
        assert memory_id in [m["id"] for m in with_invalid]
        as_of = http.post("/v1/search", json={**query, "as_of": gone["valid_to"]}).json()["memories"]
        assert memory_id not in [m["id"] for m in as_of]
        assert before  # valid from its creation
        assert http.post(f"/v1/memories/{memory_id}/restore").json()["status"] == "active"
        assert memory_id in [m["id"] for m in http.post("/v1/search", json=query).json()["memories"]]


def test_search_reference_time_is_what_the_past_weekend_counts_back_from(server):
    with server.client(server.token) as http:
        recent = stored(http, "Gina fixed the road bike.", created_at="2023-03-18T10:00:00Z")
        older = stored(http, "Gina fixed the mountain bike.", created_at="2023-01-15T10:00:00Z")
        query = {"text": "Which bike did Gina fix the past weekend?", "top_k": 2, "diagnostics": True}
        asked = http.post("/v1/search", json={**query, "reference_time": "2023-03-21T21:43:00Z"}).json()
        assert "temporal" in asked["diagnostics"]["submitted_sources"]
        assert asked["diagnostics"]["worker_hits"]["temporal"] == 1
        assert [m["id"] for m in asked["memories"]] == [recent, older]
        bad = http.post("/v1/search", json={**query, "reference_time": "the day after tomorrow"})
        assert bad.status_code == 422 and "reference_time" in bad.text


def test_mcp_update_history_forget(server):
    async def session(client):
        stored_ = await client.call_tool("remember", {"content": "Gina's cat is called Tom.", "memory_type": "fact"})
        memory_id = stored_.structured_content["id"]
        updated = await client.call_tool("update", {"memory_id": memory_id, "content": "Gina's cat is called Tim."})
        history = await client.call_tool("history", {"memory_id": memory_id})
        forgotten = await client.call_tool("forget", {"memory_ids": [memory_id]})
        again = await client.call_tool("forget", {"memory_ids": [memory_id]})
        return memory_id, updated.structured_content, history.structured_content, forgotten.structured_content, again

    memory_id, updated, history, forgotten, again = over_http(server.url, session, server.token)
    assert updated["id"] == memory_id and updated["content"] == "Gina's cat is called Tim."
    assert [e["event"] for e in history["events"]] == ["stored", "updated"]
    assert forgotten == {"deleted": 1}
    assert again.is_error and "not found" in again.content[0].text
