"""MCP through the SDK's own client: over stdio (a `memoria-pg mcp` subprocess) and over streamable HTTP
(/mcp of a live `memoria-pg serve`, authenticated with API keys)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import live_server, new_key

Session = Callable[[Client], Awaitable[Any]]


@pytest.fixture(scope="module")
def mcp_db(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    yield dsn
    drop_database(admin_dsn, name)


@pytest.fixture(scope="module")
def http_server(mcp_db):
    tokens = {"alice": new_key(mcp_db, "alice"), "bob": new_key(mcp_db, "bob")}
    with live_server(mcp_db, "--key-cache-seconds", "0") as live:
        live.tokens = tokens
        yield live


def over_stdio(dsn: str, tenant: str, session: Session) -> Any:
    return over_stdio_env({"MEMORIA_DSN": dsn}, tenant, session)


def over_stdio_env(env: dict[str, str], tenant: str, session: Session) -> Any:
    """A session with a `memoria-pg mcp --tenant T` subprocess (MEMORIA_DSN or MEMORIA_DATA_DIR in `env`)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("MEMORIA_DSN", "MEMORIA_DATA_DIR")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoria_pg.cli", "mcp", "--tenant", tenant],
        env={**environ, "MEMORIA_EMBEDDING_MODEL": "hash", "MEMORIA_POOL_MIN_SIZE": "1", **env},
    )

    async def run() -> Any:
        async with Client(params) as client:
            return await session(client)

    return asyncio.run(run())


def over_http(url: str, session: Session, token: str | None = None, **headers: str) -> Any:
    if token:
        headers["Authorization"] = f"Bearer {token}"

    async def run() -> Any:
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                return await session(client)

    return asyncio.run(run())


async def remember_and_recall(client: Client) -> dict[str, Any]:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    stored = await client.call_tool("remember", {"content": "Maya's dog is called Rex.", "memory_type": "fact"})
    again = await client.call_tool("remember", {"content": "Maya's dog is called Rex.", "memory_type": "fact"})
    await client.call_tool("remember", {"content": "Jonas prefers tea to coffee.", "memory_type": "preference"})
    recalled = await client.call_tool("recall", {"query": "what is the name of Maya's dog?", "top_k": 2})
    typed = await client.call_tool("recall", {"query": "tea", "memory_type": "preference"})
    bad = await client.call_tool("recall", {"query": "x", "memory_type": "nope"})
    out_of_range = await client.call_tool("recall", {"query": "x", "top_k": 0})
    # asked at a time: "yesterday" of the day after the memories were stored is today (the temporal worker)
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    dated = await client.call_tool("recall", {"query": "what did Maya's dog do yesterday?", "reference_time": tomorrow})
    not_a_time = await client.call_tool("recall", {"query": "yesterday", "reference_time": "next tuesday-ish"})
    types = await client.call_tool("memory_types", {})
    resource = await client.read_resource("memoria://memory-types")
    return {
        "tools": tools,
        "stored": stored.structured_content,
        "again": again.structured_content,
        "recalled": recalled.structured_content["memories"],
        "typed": typed.structured_content["memories"],
        "bad": (bad.is_error, bad.content[0].text),
        "out_of_range": out_of_range.is_error,
        "dated": dated.structured_content["memories"],
        "not_a_time": (not_a_time.is_error, not_a_time.content[0].text),
        "types": types.structured_content["types"],
        "resource": resource.contents[0].text,
    }


def check_session(result: dict[str, Any]) -> None:
    tools = result["tools"]
    assert {"remember", "recall", "memory_types"} <= set(tools)
    recall_schema = tools["recall"].input_schema
    assert recall_schema["required"] == ["query"]
    assert recall_schema["properties"]["top_k"]["maximum"] == 50 and recall_schema["properties"]["query"]["description"]
    assert "tenant" not in recall_schema["properties"] and "tenant" not in tools["remember"].input_schema["properties"]
    assert tools["recall"].output_schema and tools["recall"].description
    assert result["stored"]["stored"] is True and result["stored"]["id"] > 0
    assert result["again"] == {"id": result["stored"]["id"], "stored": False}  # the memory stored already
    top = result["recalled"][0]
    assert top["content"] == "Maya's dog is called Rex." and top["id"] == result["stored"]["id"]
    assert "vector" in top["sources"] and top["scores"] and top["why"].startswith("found by")
    assert [m["memory_type"] for m in result["typed"]] == ["preference"]
    assert result["bad"][0] is True and "unknown memory_type 'nope'" in result["bad"][1]
    assert result["out_of_range"] is True
    assert "temporal" in result["dated"][0]["sources"] and "reference_time" in recall_schema["properties"]
    assert result["not_a_time"][0] is True and "reference_time" in result["not_a_time"][1]
    names = {t["name"] for t in result["types"]}
    assert {"general", "episodic", "semantic", "procedural", "preference", "fact"} <= names
    assert "**preference**" in result["resource"]


def test_mcp_over_stdio(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    try:
        check_session(over_stdio(dsn, "stdio-tenant", remember_and_recall))
        # Another tenant's process does not see them.
        other = over_stdio(dsn, "someone-else", lambda c: c.call_tool("recall", {"query": "Maya's dog"}))
        assert other.structured_content["memories"] == []
    finally:
        drop_database(admin_dsn, name)


def test_mcp_over_http_with_a_key(http_server):
    check_session(over_http(http_server.url, remember_and_recall, http_server.tokens["alice"]))
    seen_by_bob = over_http(
        http_server.url, lambda c: c.call_tool("recall", {"query": "Maya's dog"}), http_server.tokens["bob"]
    )
    assert seen_by_bob.structured_content["memories"] == []


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("token", [None, "mpg_cccccccccccc_" + "C" * 43])
def test_mcp_over_http_without_a_valid_key_is_refused(http_server, token):
    with pytest.raises(BaseException) as raised:
        over_http(http_server.url, lambda c: c.list_tools(), token)
    assert _has(raised.value, MCPError)
    with http_server.client(token, **MCP_HEADERS) as http:
        response = http.post("/mcp", json=INITIALIZE)
    assert response.status_code == 401 and response.headers["content-type"] == "application/problem+json"


def test_mcp_over_http_a_tenant_key_cannot_name_another_tenant(http_server):
    with pytest.raises(BaseException) as raised:
        over_http(
            http_server.url,
            lambda c: c.call_tool("recall", {"query": "Maya"}),
            http_server.tokens["bob"],
            **{"X-Memoria-Tenant": "alice"},
        )
    assert _has(raised.value, MCPError)
    with http_server.client(http_server.tokens["bob"], **MCP_HEADERS, **{"X-Memoria-Tenant": "alice"}) as http:
        response = http.post("/mcp", json=INITIALIZE)
    assert response.status_code == 403 and "own tenant" in response.json()["detail"]


def _has(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, kind):
        return True
    return any(_has(e, kind) for e in getattr(exc, "exceptions", ()))


async def strictness(client: Client) -> dict[str, Any]:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    stored = await client.call_tool(
        "remember", {"content": "Frank's badge number is 4471.", "metadata": {"speaker": "Frank"}}
    )
    misspelt = await client.call_tool("remember", {"content": "Frank likes chess.", "memory_typ": "preference"})
    with_tenant = await client.call_tool("recall", {"query": "badge", "tenant": "bob"})
    recalled = await client.call_tool("recall", {"query": "Frank's badge number"})
    too_big = await client.call_tool("update", {"memory_id": 2**63, "content": "x"})
    too_big_forget = await client.call_tool("forget", {"memory_ids": [1, 2**63]})
    as_text = await client.call_tool("forget", {"memory_ids": ["1"]})
    return {
        "tools": tools,
        "stored": stored.structured_content,
        "misspelt": (misspelt.is_error, misspelt.content[0].text),
        "with_tenant": (with_tenant.is_error, with_tenant.content[0].text),
        "recalled": recalled.structured_content["memories"],
        "too_big": (too_big.is_error, too_big.content[0].text),
        "too_big_forget": (too_big_forget.is_error, too_big_forget.content[0].text),
        "as_text": as_text.is_error,
    }


def test_mcp_tools_refuse_what_they_do_not_declare(http_server):
    """An LLM's misspelt or invented argument is an error it can read and correct, not silently
    dropped (a `memory_typ` stored as `general`; a `tenant` ignored); ids beyond a bigint are refused
    by the schema; recall returns the metadata stored; the tools say which ones only read."""
    result = over_http(http_server.url, strictness, http_server.tokens["alice"])
    tools = result["tools"]
    for tool in tools.values():
        assert tool.input_schema.get("additionalProperties") is False, tool.name
    assert result["misspelt"][0] is True and "memory_typ" in result["misspelt"][1]
    assert result["with_tenant"][0] is True and "tenant" in result["with_tenant"][1]
    assert result["too_big"][0] is True and "less than or equal to 9223372036854775807" in result["too_big"][1]
    assert result["too_big_forget"][0] is True and "9223372036854775807" in result["too_big_forget"][1]
    assert result["as_text"] is True  # "1" is not an id: strict integers
    assert tools["forget"].input_schema["properties"]["memory_ids"]["maxItems"] == 1000
    top = result["recalled"][0]
    assert top["id"] == result["stored"]["id"] and top["metadata"] == {"speaker": "Frank"}
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint) for name, t in tools.items()}
    assert hints == {
        "remember": (False, False),
        "recall": (True, False),
        "memory_types": (True, False),
        "history": (True, False),
        "update": (False, True),
        "forget": (False, True),
    }


def test_mcp_over_stdio_answers_a_line_it_cannot_read(mcp_db):
    """JSON-RPC 2.0: a line that is not JSON gets a parse error, one that is not a message an invalid
    request error (id null), and the session goes on (the SDK's transport alone answered neither)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("MEMORIA_DSN", "MEMORIA_DATA_DIR")}
    env = {**environ, "MEMORIA_DSN": mcp_db, "MEMORIA_EMBEDDING_MODEL": "hash", "MEMORIA_POOL_MIN_SIZE": "1"}
    lines = [
        json.dumps(INITIALIZE),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        "this is not json",
        json.dumps({"jsonrpc": "2.0", "id": 8}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "memoria_pg.cli", "mcp", "--tenant", "stdio-bad"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:  # stdin stays open until the answers are in: at end of input the SDK drops requests in flight
        process.stdin.write("\n".join(lines) + "\n")
        process.stdin.flush()
        answers = [json.loads(line) for line in read_lines(process.stdout, 4, deadline=time.monotonic() + 120)]
    finally:
        process.stdin.close()
        process.wait(timeout=60)
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (1, None), (None, -32700), (None, -32600), (2, None)
    ]  # fmt: skip
    assert answers[1]["error"]["message"].startswith("Parse error")
    assert process.returncode == 0, process.stderr.read()


def read_lines(stream: Any, count: int, deadline: float) -> list[str]:
    """`count` lines of a subprocess's output, failing at the deadline instead of hanging (a thread
    reads: select on a buffered text stream would miss lines already in its buffer)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(stream.readline, "")], daemon=True).start()
    got: list[str] = []
    while len(got) < count:
        try:
            got.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no answer in time, or the server ended early; got {got}") from None
    return got


def test_mcp_remember_takes_an_end_after_which_the_memory_no_longer_holds(http_server):
    async def session(client: Client) -> dict[str, Any]:
        over = await client.call_tool("remember", {"content": "Frank is in Lima for a week.", "valid_to": "2020-01-09"})
        ongoing = await client.call_tool(
            "remember", {"content": "Frank is in Quito for a year.", "valid_to": "2999-01-01T00:00:00Z"}
        )
        bad = await client.call_tool("remember", {"content": "Frank is in Oslo.", "valid_to": "next week"})
        found = await client.call_tool("recall", {"query": "where is Frank", "top_k": 5})
        return {"over": over, "ongoing": ongoing, "bad": bad, "found": found.structured_content["memories"]}

    out = over_http(http_server.url, session, http_server.tokens["bob"])
    assert out["over"].is_error and "before the memory begins to hold" in out["over"].content[0].text  # stored now
    assert not out["ongoing"].is_error and out["bad"].is_error
    assert [m["content"] for m in out["found"]] == ["Frank is in Quito for a year."]
