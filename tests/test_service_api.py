"""The REST API against a real `memoria-pg serve` (uvicorn subprocess on 127.0.0.1) with httpx: the
store + search round trip, health and readiness, and every error path as application/problem+json."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg import sql

from memoria_pg.db.database import TENANT_LOCK_CLASS
from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import free_port, live_server, new_key, run_cli

PROBLEM = "application/problem+json"
MAX_BATCH = 5
MAX_BODY = 100_000


@pytest.fixture(scope="module")
def server_db(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    yield dsn
    drop_database(admin_dsn, name)


@pytest.fixture(scope="module")
def tokens(server_db) -> dict[str, str]:
    return {
        "alice": new_key(server_db, "alice"),
        "bob": new_key(server_db, "bob"),
        "admin": new_key(server_db, admin=True),
    }


@pytest.fixture(scope="module")
def server(server_db, tokens):
    # Keys are checked on every request (no cache), so a revocation shows at once.
    args = ("--key-cache-seconds", "0", "--max-batch", str(MAX_BATCH), "--max-body-bytes", str(MAX_BODY))
    with live_server(server_db, *args) as live:
        yield live


def assert_problem(response, status: int, *words: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["type"].startswith("urn:memoria-pg:problem:")
    assert body["title"] and body["detail"] and body["instance"] == response.request.url.path
    for word in words:
        assert word in body["detail"], body
    return body


def count(dsn: str, tenant: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM memoria.memories WHERE tenant = %s", (tenant,)).fetchone()[0]


# -- health, readiness, the round trip -----------------------------------------------------------------


def test_health_and_ready(server):
    with server.client() as http:
        assert http.get("/v1/health").json() == {"status": "ok", "version": "0.1.0"}
        ready = http.get("/v1/ready")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["ready"] is True and body["database"] == "ok" and body["model"] == "loaded"
    assert body["schema_revision"] == body["schema_head"]


def test_store_one_and_a_batch_then_search(server, tokens):
    with server.client(tokens["alice"]) as http:
        one = http.post(
            "/v1/memories", json={"content": "Maya's favourite colour is teal.", "memory_type": "preference"}
        )
        assert one.status_code == 201, one.text
        assert one.json()["inserted"] == 1 and one.json()["ids"][0] > 0
        batch = http.post(
            "/v1/memories",
            json=[
                {"content": "Jonas lives in Porto.", "memory_type": "fact", "metadata": {"speaker": "Maya"}},
                {
                    "content": "They're a real support.",
                    "context": "Jonas: How is your family doing?",
                    "importance": 0.9,
                },
                {"content": "Maya's favourite colour is teal.", "memory_type": "preference"},  # stored already
            ],
        )
        assert batch.status_code == 201, batch.text
        assert batch.json()["inserted"] == 2 and batch.json()["duplicates"] == 1
        assert batch.json()["ids"][2] is None
        assert batch.json()["existing_ids"] == [None, None, one.json()["ids"][0]]  # the memory it repeats
        found = http.post("/v1/search", json={"text": "what is Maya's favourite colour?", "top_k": 3}).json()
    top = found["memories"][0]
    assert top["content"] == "Maya's favourite colour is teal." and top["memory_type"] == "preference"
    assert "vector" in top["sources"] and "vector_distance" in top["scores"]
    assert top["final_score"] > 0 and top["explanation"]
    assert found["route"] and found["diagnostics"] is None and found["explain"] is None


def test_search_options_diagnostics_and_explain(server, tokens):
    with server.client(tokens["alice"]) as http:
        http.post("/v1/memories", json={"content": "Jonas plays the cello every Sunday.", "memory_type": "episodic"})
        full = http.post(
            "/v1/search", json={"text": "Jonas cello", "diagnostics": True, "explain": True, "memory_type": "episodic"}
        ).json()
        v3 = http.post(
            "/v1/search", json={"text": "Jonas cello", "v3": True, "diagnostics": True, "explain": True}
        ).json()
        bm25 = http.post(
            "/v1/search",
            json={"text": "Jonas cello", "workers": ["vector", "bm25"], "ranking": False, "diagnostics": True},
        ).json()
    assert [m["memory_type"] for m in full["memories"]] == ["episodic"]
    assert full["diagnostics"]["path"] == "v4" and full["diagnostics"]["returned_count"] == 1
    assert "route:" in full["explain"] and "candidates" in full["explain"]
    assert v3["route"] is None and v3["diagnostics"]["path"] == "v3"
    assert "V3's statement" in v3["explain"] and "Subquery Scan on e" in v3["explain"]  # its SQL and plan
    assert set(bm25["diagnostics"]["submitted_sources"]) == {"vector", "bm25"}
    assert bm25["diagnostics"]["ranking_skipped"] is True


def test_a_retrieval_only_search_counts_every_candidate(server, tokens):
    # The service asks the library for no candidate list (it returns only the memories): the final
    # statement then reads only the rows returned, and the diagnostics still count every candidate.
    with server.client(tokens["alice"]) as http:
        for i in range(6):
            http.post("/v1/memories", json={"content": f"Odile waters the fig tree on day {i}."})
        found = http.post(
            "/v1/search", json={"text": "Odile fig tree", "top_k": 2, "ranking": False, "diagnostics": True}
        ).json()
    assert len(found["memories"]) == 2 and all("Odile" in m["content"] for m in found["memories"])
    assert found["diagnostics"]["returned_count"] == 2
    assert found["diagnostics"]["candidate_count"] >= 6


def test_an_admin_key_acts_for_the_tenant_it_names(server, tokens, server_db):
    with server.client(tokens["admin"], **{"X-Memoria-Tenant": "carol"}) as http:
        stored = http.post("/v1/memories", json={"content": "Carol keeps bees."})
        assert stored.status_code == 201, stored.text
        found = http.post("/v1/search", json={"text": "who keeps bees?"}).json()["memories"]
    assert [m["content"] for m in found] == ["Carol keeps bees."]
    assert count(server_db, "carol") == 1
    with server.client(tokens["admin"]) as http:
        assert_problem(http.post("/v1/search", json={"text": "bees"}), 400, "X-Memoria-Tenant")


# -- authentication ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "words"),
    [
        (None, "needs an API key"),
        ("Basic YWxpY2U6c2VjcmV0", "Bearer"),
        ("Bearer", "Bearer"),
        ("Bearer not-a-key", "not a memoria-pg API key"),
        ("Bearer mpg_aaaaaaaaaaaa_" + "A" * 43, "not valid"),
    ],
)
def test_requests_without_a_valid_key_are_401(server, authorization, words):
    headers = {"Authorization": authorization} if authorization else {}
    with server.client(**headers) as http:
        for response in (http.post("/v1/search", json={"text": "x"}), http.post("/v1/memories", json={"content": "x"})):
            body = assert_problem(response, 401, words)
            assert response.headers["www-authenticate"].startswith("Bearer")
            secret = (authorization or "").partition(" ")[2]
            assert not secret or secret not in json.dumps(body)


def test_a_revoked_key_is_refused_at_once(server, server_db):
    token = new_key(server_db, "dora")
    key_id = token.split("_")[1]
    with server.client(token) as http:
        assert http.post("/v1/search", json={"text": "x"}).status_code == 200
        revoked = run_cli(server_db, "keys", "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr
        assert_problem(http.post("/v1/search", json={"text": "x"}), 401, "not valid")


def test_a_tenant_key_may_not_name_another_tenant(server, tokens):
    with server.client(tokens["alice"], **{"X-Memoria-Tenant": "bob"}) as http:
        assert_problem(http.post("/v1/search", json={"text": "x"}), 403, "own tenant")
        assert_problem(http.post("/v1/memories", json={"content": "x"}), 403, "own tenant")
    with server.client(tokens["alice"], **{"X-Memoria-Tenant": "alice"}) as http:
        assert http.post("/v1/search", json={"text": "x"}).status_code == 200


def test_a_non_ascii_tenant_in_the_header_is_read_as_utf8(server, tokens, server_db):
    # Starlette decodes header values as Latin-1: '租户' would otherwise arrive as 'ç§\x9fæ\x88·'.
    name = "租户"
    own = new_key(server_db, name)
    header = {"X-Memoria-Tenant": name.encode()}
    with server.client(tokens["admin"]) as http:
        stored = http.post("/v1/memories", json={"content": "Zhang grows tea."}, headers=header)
        assert stored.status_code == 201, stored.text
    assert count(server_db, name) == 1
    with server.client(own) as http:
        found = http.post("/v1/search", json={"text": "who grows tea?"}, headers=header)
        assert found.status_code == 200, found.text
        assert [m["content"] for m in found.json()["memories"]] == ["Zhang grows tea."]
        assert_problem(http.post("/v1/search", json={"text": "tea"}, headers={"X-Memoria-Tenant": b"\xe7\xa7"}), 400)
    for token in (tokens["admin"], tokens["alice"]):
        with server.client(token) as http:
            bad = http.post("/v1/search", json={"text": "tea"}, headers={"X-Memoria-Tenant": b"caf\xe9"})
            assert_problem(bad, 400, "X-Memoria-Tenant", "UTF-8")


# -- invalid requests and input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/memories", {}, "content"),
        ("/v1/memories", {"content": "x", "tenant": "bob"}, "tenant"),
        ("/v1/memories", {"content": "x", "pinned": "yes"}, "pinned"),
        ("/v1/memories", {"content": 5}, "content"),
        ("/v1/memories", {"content": ""}, "content"),
        ("/v1/memories", {"content": "x", "importance": 2}, "importance"),
        ("/v1/memories", [{"content": "x"}, {"content": "y", "colour": "red"}], "colour"),
        ("/v1/search", {}, "text"),
        ("/v1/search", {"text": "x", "top_k": 0}, "top_k"),
        ("/v1/search", {"text": "x", "tenant": "bob"}, "tenant"),
        ("/v1/search", {"text": "x", "v3": "no"}, "v3"),
    ],
)
def test_invalid_requests_are_422_naming_the_field(server, tokens, path, body, field):
    with server.client(tokens["alice"]) as http:
        problem = assert_problem(http.post(path, json=body), 422, field)
    assert any(field in [str(p) for p in e["loc"]] for e in problem["errors"])


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/v1/memories", {"content": "x", "memory_type": "nope"}, "unknown memory_type 'nope'"),
        ("/v1/memories", {"content": "x", "created_at": "2999-01-01T00:00:00Z"}, "future"),
        ("/v1/memories", {"content": "x", "embedding": [0.5, 0.5]}, "embedding"),
        ("/v1/memories", {"content": "a\u0000b"}, "NUL"),
        ("/v1/memories", {"content": "  "}, "content"),
        ("/v1/search", {"text": "x", "memory_type": "nope"}, "unknown memory_type"),
        ("/v1/search", {"text": "x", "workers": ["sonar"]}, "sonar"),
        ("/v1/search", {"text": "x" * 5000}, "4000"),
    ],
)
def test_invalid_input_is_422_with_the_librarys_message(server, tokens, path, body, words):
    with server.client(tokens["alice"]) as http:
        problem = assert_problem(http.post(path, json=body), 422, words)
    assert problem["type"].endswith(":invalid-input")


def test_a_long_value_is_cut_short_in_the_detail(server, tokens):
    long_type = "y" * 10_000
    with server.client(tokens["alice"]) as http:
        for response in (
            http.post("/v1/memories", json={"content": "x", "memory_type": long_type}),
            http.post("/v1/search", json={"text": "x", "memory_type": long_type}),
        ):
            problem = assert_problem(response, 422, "unknown memory_type '" + "y" * 40)
            assert len(problem["detail"]) < 400 and "y" * 81 not in response.text


def test_a_bad_record_fails_its_whole_batch(server, tokens, server_db):
    before = count(server_db, "alice")
    with server.client(tokens["alice"]) as http:
        response = http.post(
            "/v1/memories", json=[{"content": "Fine record."}, {"content": "x", "memory_type": "nope"}]
        )
    assert_problem(response, 422, "record 2")
    assert count(server_db, "alice") == before


def test_an_unknown_query_parameter_is_422(server, tokens):
    with server.client(tokens["alice"]) as http:
        problem = assert_problem(http.get("/v1/memories", params={"limt": 5}), 422, "limt")
        assert problem["errors"][0]["loc"] == ["query", "limt"]
        assert_problem(http.post("/v1/search", params={"debug": 1}, json={"text": "x"}), 422, "debug")


def test_a_where_nested_too_deeply_is_422(server, tokens):
    with server.client(tokens["alice"]) as http:
        response = http.get("/v1/memories", params={"where": "[" * 10_000 + "]" * 10_000})
    assert_problem(response, 422, "where")


def test_restore_refuses_unknown_fields(server, tokens):
    with server.client(tokens["alice"]) as http:
        memory_id = http.post("/v1/memories", json={"content": "Quentin restores clocks."}).json()["ids"][0]
        assert http.post(f"/v1/memories/{memory_id}/invalidate", json={}).status_code == 200
        problem = assert_problem(http.post(f"/v1/memories/{memory_id}/restore", json={"x": 1}), 422, "x")
        assert problem["errors"][0]["loc"] == ["body", "x"]
        assert http.get(f"/v1/memories/{memory_id}").json()["status"] == "invalidated"
        assert http.post(f"/v1/memories/{memory_id}/restore", json={}).json()["status"] == "active"
        assert http.post(f"/v1/memories/{memory_id}/invalidate", json={}).status_code == 200
        assert http.post(f"/v1/memories/{memory_id}/restore").json()["status"] == "active"  # no body at all


def test_malformed_json_is_422(server, tokens):
    with server.client(tokens["alice"], **{"Content-Type": "application/json"}) as http:
        assert_problem(http.post("/v1/search", content=b'{"text": '), 422, "JSON")


def test_unknown_paths_and_methods(server, tokens):
    with server.client(tokens["alice"]) as http:
        assert_problem(http.get("/v1/nothing"), 404)
        assert_problem(http.get("/v1/search"), 405)


def test_405_names_the_methods_of_the_path_and_head_is_served_where_get_is(server, tokens):
    with server.client(tokens["alice"]) as http:
        for method, path, allow in [
            ("GET", "/v1/search", "POST"),
            ("PUT", "/v1/memories/1", "DELETE, GET, HEAD, PATCH"),
            ("DELETE", "/v1/memories", "GET, HEAD, POST"),
            ("HEAD", "/v1/search", "POST"),
        ]:
            response = http.request(method, path)
            assert response.status_code == 405, (method, path, response.text)
            assert response.headers["allow"] == allow, (method, path)
        for path in ("/v1/health", "/v1/ready", "/v1/memories"):
            got, head = http.get(path), http.head(path)
            assert head.status_code == got.status_code == 200, (path, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]


# -- limits --------------------------------------------------------------------------------------------


def test_a_batch_over_the_limit_is_413(server, tokens):
    with server.client(tokens["alice"]) as http:
        response = http.post("/v1/memories", json=[{"content": f"memory {i}"} for i in range(MAX_BATCH + 1)])
    assert_problem(response, 413, f"limit is {MAX_BATCH}")


def test_a_body_over_the_limit_is_413_declared_or_streamed(server, tokens):
    big = json.dumps({"content": "x" * (MAX_BODY + 10)}).encode()
    with server.client(tokens["alice"], **{"Content-Type": "application/json"}) as http:
        assert_problem(http.post("/v1/memories", content=big), 413, f"{MAX_BODY} bytes")
        # No Content-Length (chunked): counted as it arrives.
        streamed = http.post("/v1/memories", content=(big[i : i + 4096] for i in range(0, len(big), 4096)))
        assert "content-length" not in streamed.request.headers
        assert_problem(streamed, 413, f"{MAX_BODY} bytes")


# -- no key in logs --------------------------------------------------------------------------------


def test_keys_never_reach_the_log(server, tokens):
    with server.client(tokens["bob"]) as http:
        http.post("/v1/search", json={"text": "x"})
    with server.client("mpg_bbbbbbbbbbbb_" + "B" * 43) as http:
        http.post("/v1/search", json={"text": "x"})
    log = server.log()
    assert "POST /v1/search" in log  # the access log is on
    for token in [*tokens.values(), "B" * 43]:
        assert token not in log
    assert "authorization" not in log.lower()


# -- the database unavailable: 503 ---------------------------------------------------------------------


def test_503_when_the_database_cannot_be_reached(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    token = new_key(dsn, "erin")
    try:
        with live_server(dsn, "--key-cache-seconds", "0", env={"MEMORIA_POOL_TIMEOUT": "1"}) as server:
            with server.client(token) as http:
                assert http.post("/v1/search", json={"text": "x"}).status_code == 200
                _refuse_connections(admin_dsn, name)
                assert_problem(http.post("/v1/search", json={"text": "x"}), 503, "PostgreSQL")
                assert_problem(http.post("/v1/memories", json={"content": "x"}), 503)
                ready = http.get("/v1/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["ready"] is False
        assert ready.json()["database"].startswith("cannot connect"), ready.text
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name)))
        drop_database(admin_dsn, name)


def test_503_when_no_slot_becomes_free_within_the_pool_timeout(admin_dsn, template_dsn):
    # One slot (--max-concurrency 1), held by hank's store waiting for his tenant's write lock (held
    # here): iris's search must not wait for it without bound, but get 503 after the pool timeout.
    name, dsn = create_database(admin_dsn, TEMPLATE)
    hank, iris = new_key(dsn, "hank"), new_key(dsn, "iris")
    args = ("--max-concurrency", "1", "--key-cache-seconds", "600")
    try:
        with (
            live_server(dsn, *args, env={"MEMORIA_POOL_TIMEOUT": "1"}) as server,
            server.client(hank) as hanks,
            server.client(iris) as iriss,
            ThreadPoolExecutor(1) as pool,
        ):
            assert iriss.post("/v1/search", json={"text": "x"}).status_code == 200  # her key is cached now
            with psycopg.connect(dsn) as lock:
                lock.execute("SELECT pg_advisory_xact_lock(%s, hashtext('hank'))", (TENANT_LOCK_CLASS,))
                blocked = pool.submit(hanks.post, "/v1/memories", json={"content": "Hank waits."})
                _wait_for_an_advisory_lock_wait(lock)
                started = time.monotonic()
                try:
                    busy = iriss.post("/v1/search", json={"text": "x"}, timeout=15)
                except httpx.ReadTimeout:
                    pytest.fail("the search waited for a slot without bound")
                waited = time.monotonic() - started
                lock.rollback()
            assert_problem(busy, 503, "busy: all", "stayed in use for 1 s")
            assert busy.headers["retry-after"] == "1"
            assert 0.9 <= waited < 10, waited
            assert blocked.result(timeout=60).status_code == 201
            assert iriss.post("/v1/search", json={"text": "x"}).status_code == 200  # the slot is free again
    finally:
        drop_database(admin_dsn, name)


def _wait_for_an_advisory_lock_wait(conn: psycopg.Connection) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(conn.info.dsn, autocommit=True) as probe:
            waiting = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
                " AND datname = current_database()"
            ).fetchone()[0]
        if waiting:
            return
        time.sleep(0.05)
    pytest.fail("the store never waited for the tenant's write lock")


def _refuse_connections(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


# -- serving without keys ------------------------------------------------------------------------------


def test_without_keys_loopback_acts_for_the_default_tenant_until_a_key_exists(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    try:
        with live_server(dsn, "--key-cache-seconds", "0") as server, server.client() as http:
            assert http.post("/v1/memories", json={"content": "Anonymous note."}).status_code == 201
            assert count(dsn, "default") == 1
            assert_problem(http.post("/v1/search", json={"text": "x"}, headers={"X-Memoria-Tenant": "bob"}), 403)
            new_key(dsn, "frank")
            assert_problem(http.post("/v1/search", json={"text": "note"}), 401, "needs an API key")
        assert "no API key exists" in server.log()
    finally:
        drop_database(admin_dsn, name)


def test_without_keys_serving_beyond_loopback_is_refused(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    try:
        result = run_cli(dsn, "serve", "--host", "0.0.0.0", "--port", str(free_port()))
    finally:
        drop_database(admin_dsn, name)
    assert result.returncode != 0
    assert "refusing to serve on 0.0.0.0" in result.stderr and "--insecure" in result.stderr
