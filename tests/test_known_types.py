"""A memory type added by another process (`memoria-pg types add` beside a running server) is known to
a running MemorySystem, its service and its MCP tools without a restart."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from memoria_pg import Config, HashEmbedder, InputError, MemorySystem
from memoria_pg.core.types import KnownTypes
from memoria_pg.db import migrate
from tests.service_live import live_server, new_key, run_cli
from tests.test_service_mcp import over_http


def test_known_types_look_a_missing_name_up_and_probes_read_the_snapshot():
    tables = [("general",), ("general", "recipe")]
    loads: list[int] = []

    def load() -> tuple[str, ...]:
        loads.append(1)
        return tables[min(len(loads) - 1, 1)]

    known = KnownTypes(load)
    assert list(known) == ["general"] and len(loads) == 1
    assert "general" in known and len(loads) == 1  # a known name costs nothing
    assert "recipe" not in known.names  # the snapshot does not look up
    assert "recipe" in known and len(loads) == 2  # a missing one is looked up, and found
    assert "nope" not in known and len(loads) == 3
    assert 3 not in known and len(loads) == 3  # not a name: no look-up


def test_a_type_added_by_another_process_is_accepted_without_a_restart(config: Config, dsn: str):
    with MemorySystem(config, embedder=HashEmbedder()) as running:
        assert "recipe" not in running.memory_types
        assert run_cli(dsn, "types", "add", "recipe").returncode == 0  # the admin's CLI, another process
        pie = running.store("Grandma's apple pie bakes for 40 minutes.", tenant="t", memory_type="recipe")
        assert "recipe" in running.memory_types
        stored = running.store_many([{"content": "Soup: simmer the leeks.", "tenant": "t", "memory_type": "recipe"}])
        found = running.query("apple pie", tenant="t", memory_type="recipe", ranking=False)
        assert pie in [c.memory_id for c in found.candidates]
        listed = [m.id for m in running.list_memories(tenant="t", memory_type="recipe")]
        assert listed == sorted([pie, *stored.ids])
        note = running.store("A plain note.", tenant="t")
        assert running.update(note, tenant="t", memory_type="recipe").memory_type == "recipe"
        assert running.forget(tenant="t", memory_type="recipe").deleted == 3
        with pytest.raises(InputError, match=r"unknown memory_type 'recipes'; known types: \[.*'recipe'"):
            running.store("x", tenant="t", memory_type="recipes")


def test_the_mcp_tools_of_a_running_server_know_a_type_added_after_it_started(dsn: str):
    token = new_key(dsn, "alice")
    with live_server(dsn) as live:
        migrate.add_memory_type(dsn, "recipe")

        async def session(client: Client) -> dict[str, Any]:
            types = await client.call_tool("memory_types", {})
            stored = await client.call_tool("remember", {"content": "Pie: 40 minutes.", "memory_type": "recipe"})
            return {"types": [t["name"] for t in types.structured_content["types"]], "stored": stored}

        out = over_http(live.url, session, token)
        assert "recipe" in out["types"]
        assert not out["stored"].is_error and out["stored"].structured_content["stored"] is True
