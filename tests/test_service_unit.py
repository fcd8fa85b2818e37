"""The service's rules without a server: settings and the loopback rule, tokens, the key cache (on a
fake clock), which tenant a principal acts for, the bind check, problem mapping, readiness."""

from __future__ import annotations

import asyncio
import json

import pytest

from memoria_pg import ConfigError, InputError, PoolTimeout, SchemaError, ServerError
from memoria_pg.errors import MemoriaError
from memoria_pg.service import keys, problems
from memoria_pg.service.app import _check_bind
from memoria_pg.service.auth import Authenticator
from memoria_pg.service.health import ready
from memoria_pg.service.keys import KeyCache, Principal
from memoria_pg.service.mcp_server import why
from memoria_pg.service.settings import ServiceSettings
from memoria_pg.service.state import ServiceState

# -- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("memoria.example", False),
    ],
)
def test_loopback_hosts(host, loopback):
    settings = ServiceSettings(host=host)
    assert settings.loopback is loopback
    assert settings.allow_anonymous is loopback
    assert ServiceSettings(host=host, insecure=True).allow_anonymous is True


def test_settings_from_the_environment_and_back():
    settings = ServiceSettings.from_env(
        {"MEMORIA_SERVE_PORT": "9000", "MEMORIA_SERVE_INSECURE": "yes", "MEMORIA_SERVE_KEY_CACHE_SECONDS": "0.5"},
        max_batch=7,
        host=None,
    )
    assert (settings.port, settings.insecure, settings.key_cache_seconds, settings.max_batch) == (9000, True, 0.5, 7)
    assert ServiceSettings.from_env(settings.as_env()) == settings
    with pytest.raises(ConfigError, match="MEMORIA_SERVE_PORT"):
        ServiceSettings.from_env({"MEMORIA_SERVE_PORT": "eighty"})
    with pytest.raises(ConfigError, match="MAX_BATCH"):
        ServiceSettings(max_batch=0)


# -- tokens and the cache ------------------------------------------------------------------------------


def test_tokens_are_random_well_formed_and_hashed():
    (id_a, a), (id_b, b) = keys.new_token(), keys.new_token()
    assert a != b and id_a != id_b
    assert keys.well_formed(a) and a.startswith(f"mpg_{id_a}_") and len(a) == 4 + 12 + 1 + 43
    assert len(keys.digest(a)) == 32 and keys.digest(a) != keys.digest(b)
    for bad in ("", a + "x", a[:-1], a.upper(), "mpg_" + id_a, a.replace("mpg_", "mpk_"), " " + a):
        assert not keys.well_formed(bad)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_key_cache_expires_evicts_and_can_be_off():
    clock = Clock()
    cache = KeyCache(5, size=2, clock=clock)
    alice = Principal("aaaaaaaaaaaa", "alice")
    cache.put(b"a", alice)
    cache.put(b"none", None)
    assert cache.get(b"a") == (True, alice) and cache.get(b"none") == (True, None)
    assert cache.get(b"other") == (False, None)
    clock.now += 5
    assert cache.get(b"a") == (False, None)  # expired
    cache.put(b"a", alice)
    cache.put(b"b", alice)
    cache.put(b"c", alice)  # evicts the oldest
    assert cache.get(b"a") == (False, None) and cache.get(b"c") == (True, alice)
    off = KeyCache(0, clock=clock)
    off.put(b"a", alice)
    assert off.get(b"a") == (False, None)


# -- which tenant a request acts for --------------------------------------------------------------------


class FakeMemory:
    """What the Authenticator needs of AsyncMemorySystem: run(fn) (here: the key table as a dict)."""

    def __init__(self, table: dict[bytes, Principal] | None = None) -> None:
        self.table = table or {}
        self.lookups = 0

    async def run(self, fn):
        self.lookups += 1
        return fn(self)


def authenticator(memory: FakeMemory, *, anonymous: bool = True, ttl: float = 60) -> Authenticator:
    auth = Authenticator(memory, cache=KeyCache(ttl), allow_anonymous=anonymous, default_tenant="default")  # type: ignore[arg-type]
    return auth


@pytest.fixture
def fake_lookups(monkeypatch):
    monkeypatch.setattr(keys, "lookup", lambda memory, key_hash: memory.table.get(key_hash))
    monkeypatch.setattr(keys, "keys_exist", lambda memory: bool(memory.table))


def test_tenant_rules():
    auth = authenticator(FakeMemory())
    tenant_key, admin, nobody = (
        Principal("k" * 12, "alice"),
        Principal("a" * 12, None, admin=True),
        Principal(None, None),
    )
    assert auth.tenant(tenant_key, None) == "alice" and auth.tenant(tenant_key, "alice") == "alice"
    with pytest.raises(problems.Forbidden, match="own tenant"):
        auth.tenant(tenant_key, "bob")
    assert auth.tenant(admin, "bob") == "bob"
    with pytest.raises(problems.BadRequest, match="X-Memoria-Tenant"):
        auth.tenant(admin, None)
    assert auth.tenant(nobody, None) == "default" and auth.tenant(nobody, "default") == "default"
    with pytest.raises(problems.Forbidden, match="default tenant only"):
        auth.tenant(nobody, "bob")


def test_principal_checks_the_header_then_the_cache_then_the_database(fake_lookups):
    token = keys.new_token()[1]
    alice = Principal(token.split("_")[1], "alice")
    memory = FakeMemory({keys.digest(token): alice})
    auth = authenticator(memory)

    async def run():
        assert await auth.principal(f"Bearer {token}") == alice
        assert await auth.principal(f"bearer   {token} ") == alice
        for header, message in [
            ("", "Bearer <key>"),
            ("Token abc", "Bearer <key>"),
            ("Bearer abc", "not a memoria-pg API key"),
            (f"Bearer {keys.new_token()[1]}", "not valid"),
            (None, "needs an API key"),  # keys exist: no anonymous requests
        ]:
            with pytest.raises(problems.Unauthorized, match=message):
                await auth.principal(header)

    asyncio.run(run())
    assert memory.lookups == 3  # alice once (then cached), the unknown key, "do keys exist"


def test_without_keys_a_request_without_one_is_nobody_where_allowed(fake_lookups):
    async def run(anonymous: bool):
        return await authenticator(FakeMemory(), anonymous=anonymous).principal(None)

    assert asyncio.run(run(True)) == Principal(None, None)
    with pytest.raises(problems.Unauthorized):
        asyncio.run(run(False))


class FakeKeys:
    def __init__(self, exist: bool) -> None:
        self.exist, self.default_tenant = exist, "default"

    async def keys_exist(self) -> bool:
        return self.exist


@pytest.mark.parametrize(
    ("host", "insecure", "exist", "refused"),
    [
        ("127.0.0.1", False, False, False),
        ("0.0.0.0", False, True, False),
        ("0.0.0.0", False, False, True),
        ("0.0.0.0", True, False, False),
    ],
)
def test_the_bind_rule(host, insecure, exist, refused):
    check = _check_bind(FakeKeys(exist), ServiceSettings(host=host, insecure=insecure))  # type: ignore[arg-type]
    if refused:
        with pytest.raises(RuntimeError, match="refusing to serve on 0.0.0.0"):
            asyncio.run(check)
    else:
        asyncio.run(check)


# -- problems and readiness --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InputError("x"), 422),
        (PoolTimeout("x"), 503),
        (SchemaError("x"), 503),
        (ServerError("x"), 503),
        (ConfigError("x"), 500),
        (MemoriaError("x"), 500),
    ],
)
def test_library_errors_map_to_statuses(error, status):
    assert problems.status_of(error)[0] == status


def test_not_found_is_404():
    from memoria_pg import NotFound

    assert problems.status_of(NotFound("x"))[0] == 404


def test_problem_responses_are_documented_as_problem_json():
    ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
    doc = {
        "paths": {
            "/x": {
                "post": {
                    "responses": {
                        "200": {"content": {"application/json": ref}},
                        "422": {"content": {"application/json": ref}},
                    }
                }
            }
        }
    }
    responses = problems.problem_media_types(doc)["paths"]["/x"]["post"]["responses"]
    assert set(responses["422"]["content"]) == {problems.PROBLEM_JSON}
    assert set(responses["200"]["content"]) == {"application/json"}


class FakeReadiness:
    def __init__(self, facts):
        self.facts = facts

    async def readiness(self):
        return self.facts


@pytest.mark.parametrize(
    ("facts", "model", "status", "expected"),
    [
        (
            {"database": True, "error": None, "schema": "0011", "schema_head": "0011", "model_loaded": True},
            "loading",
            200,
            "loaded",
        ),
        (
            {"database": True, "error": None, "schema": "0011", "schema_head": "0011", "model_loaded": False},
            "loading",
            503,
            "loading",
        ),
        (
            {"database": True, "error": None, "schema": "0011", "schema_head": "0011", "model_loaded": False},
            "failed: no such model",
            503,
            "failed: no such model",
        ),
        (
            {"database": True, "error": None, "schema": "0008", "schema_head": "0011", "model_loaded": True},
            "loaded",
            503,
            "loaded",
        ),
        (
            {"database": False, "error": "cannot connect", "schema": None, "schema_head": "0011", "model_loaded": True},
            "loaded",
            503,
            "loaded",
        ),
    ],
)
def test_ready_reports_what_is_missing(facts, model, status, expected):
    state = ServiceState(settings=ServiceSettings(), config=None, memory=FakeReadiness(facts), model=model)  # type: ignore[arg-type]
    response = asyncio.run(ready(state))
    body = json.loads(response.body)
    assert response.status_code == status and body["model"] == expected and body["ready"] is (status == 200)


def test_why_a_memory_matched():
    from memoria_pg import CandidateRecord

    c = CandidateRecord(1, "t", "fact", "x", {}, 0.5, None, None, 0, None, sources=["vector", "bm25"])
    c.scores = {"vector_distance": 0.25, "bm25": 3.5}
    c.final_score, c.explanation = 0.9, {"retrieval": 0.8, "recency": 0.1}
    assert (
        why(c) == "found by vector (vector_distance 0.25), bm25 (bm25 3.5); score 0.900 (retrieval 0.80, recency 0.10)"
    )


# -- layout ----------------------------------------------------------------------------------------


def test_the_service_sits_on_the_public_api_and_nothing_below_imports_it():
    from tests.unit.test_layout import _imports, _submodules_edges

    graph = _imports()
    for below in ("memoria_pg.query", "memoria_pg.ingest", "memoria_pg.core", "memoria_pg.db", "memoria_pg.ranking",
                  "memoria_pg.system", "memoria_pg.async_system", "memoria_pg.lifecycle"):  # fmt: skip
        assert _submodules_edges(graph, below, "memoria_pg.service") == [], below
    reached = {dst for src, dst in _submodules_edges(graph, "memoria_pg.service", "memoria_pg")}
    outside = {m for m in reached if not m.startswith("memoria_pg.service")}
    # the public API (the package), the error classes, and the one tenant rule (keys create validates it)
    assert outside <= {"memoria_pg", "memoria_pg.errors", "memoria_pg.core", "memoria_pg.core.validation"}, outside
