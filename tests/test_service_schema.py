"""The OpenAPI document: the checked-in openapi.json is what the live server serves, and schemathesis
runs the document against the live server (property-based: no 5xx, every response, problems included,
matches its schema, status codes and content types documented)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memoria_pg.service import openapi
from tests.conftest import TEMPLATE, create_database, drop_database
from tests.service_live import live_server, new_key

CHECKED_IN = Path(__file__).resolve().parents[1] / "openapi.json"


@pytest.fixture(scope="module")
def schema_server(admin_dsn, template_dsn):
    name, dsn = create_database(admin_dsn, TEMPLATE)
    token = new_key(dsn, "fuzz")
    try:
        with live_server(dsn, "--max-batch", "20") as live:
            live.token = token
            with live.client(token) as http:  # something to find
                http.post(
                    "/v1/memories", json=[{"content": f"Fuzz memory {i} about teal and Porto."} for i in range(5)]
                )
            yield live
    finally:
        drop_database(admin_dsn, name)


def test_the_checked_in_document_is_what_the_server_serves(schema_server):
    with schema_server.client() as http:
        served = http.get("/openapi.json").json()
    assert CHECKED_IN.exists(), "openapi.json is missing: python -m memoria_pg.service.openapi"
    assert json.loads(CHECKED_IN.read_text()) == served, "openapi.json is stale: python -m memoria_pg.service.openapi"
    assert openapi.render(openapi.document()) == CHECKED_IN.read_text()


def test_the_document_describes_auth_problems_and_every_route(schema_server):
    doc = json.loads(CHECKED_IN.read_text())
    assert {"/v1/health", "/v1/ready", "/v1/memories", "/v1/search"} <= set(doc["paths"])
    assert doc["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    search = doc["paths"]["/v1/search"]["post"]
    assert {"401", "403", "422", "503"} <= set(search["responses"])
    assert set(search["responses"]["422"]["content"]) == {"application/problem+json"}
    assert "/mcp" not in doc["paths"]


@pytest.fixture(scope="module")
def api_schema(schema_server):
    return schemathesis.openapi.from_url(f"{schema_server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


# Every check but "schema-valid data is accepted": the library's rules that a JSON schema cannot state
# (not more than a day in the future, no NUL bytes or lone surrogates, a memory type the database has,
# a non-blank text, embedding_dim numbers) answer 422 to requests the document cannot rule out.
@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples every run
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_conforms_to_its_document(case, schema_server):
    case.call_and_validate(
        base_url=schema_server.url,
        headers={"Authorization": f"Bearer {schema_server.token}"},
        excluded_checks=[positive_data_acceptance],
    )
