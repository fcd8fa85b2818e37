"""The temporal worker (sql/workers/temporal.sql): a query that speaks of a time ("the past weekend",
"four weeks ago") also searches the memories stored then, counted back from its reference time
(MemorySystem.query's `reference_time`, else `as_of`, else now), and lifts them above closer matches
from other times; a query without such an expression does not run it."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from memoria_pg import HashEmbedder, MemorySystem

ASKED = dt.datetime(2023, 3, 21, 21, 43, tzinfo=dt.UTC)


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture
def bikes(config):
    """Three bike memories: the one serviced last weekend is the farthest from the query's vector."""
    rng = np.random.default_rng(3)
    query = unit(rng.normal(size=384))
    near = [unit(query + 0.3 * unit(rng.normal(size=384))) for _ in range(2)]
    far = unit(query + 1.2 * unit(rng.normal(size=384)))
    records = [
        {"content": "I love riding my mountain bike on the trails.", "embedding": near[0],
         "created_at": ASKED - dt.timedelta(days=60), "external_id": "mountain"},
        {"content": "My bike needs a new chain soon.", "embedding": near[1],
         "created_at": ASKED - dt.timedelta(days=40), "external_id": "chain"},
        {"content": "Took the road bike in for a service on Saturday.", "embedding": far,
         "created_at": ASKED - dt.timedelta(days=3), "external_id": "serviced"},
    ] + [
        {"content": f"Unrelated note number {i} about groceries.", "embedding": unit(rng.normal(size=384)),
         "created_at": ASKED - dt.timedelta(days=100 + i), "external_id": f"other-{i}"}
        for i in range(12)
    ]  # fmt: skip
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store_many([{**r, "tenant": "t"} for r in records])
        yield system, query


def ask(system: MemorySystem, text: str, query: np.ndarray, **kw):
    return system.query(text, tenant="t", embedding=query, ranking=False, top_k=3, candidates=False, **kw)


def test_a_query_about_the_past_weekend_finds_what_was_stored_then(bikes):
    system, query = bikes
    response = ask(system, "Which bike did I service the past weekend?", query, reference_time=ASKED)
    assert "temporal" in response.diagnostics.submitted_sources
    assert response.memories[0].external_id == "serviced"
    assert "temporal" in response.memories[0].sources
    # without the worker the two nearer bikes come first
    plain = ask(system, "Which bike did I service the past weekend?", query, reference_time=ASKED,
                workers=["vector", "bm25"])  # fmt: skip
    assert {m.external_id for m in plain.memories[:2]} == {"mountain", "chain"}


def test_the_window_counts_back_from_the_reference_time(bikes):
    system, query = bikes
    # "six weeks ago" of ASKED: 31 to 53 days back, where the chain (40) is and no other bike
    weeks = ask(system, "What did I note about my bike six weeks ago?", query, reference_time=ASKED)
    assert weeks.memories[0].external_id == "chain" and "temporal" in weeks.memories[0].sources
    # as_of is the reference when no reference_time is given
    as_of = ask(system, "Which bike did I service the past weekend?", query, as_of=ASKED)
    assert as_of.memories[0].external_id == "serviced"
    # counted back from now (2026), the past weekend holds none of these memories
    now = ask(system, "Which bike did I service the past weekend?", query)
    assert "temporal" in now.diagnostics.submitted_sources and now.diagnostics.worker_hits["temporal"] == 0


def test_a_query_without_a_time_does_not_run_it(bikes):
    system, query = bikes
    response = ask(system, "Which bike did I service?", query, reference_time=ASKED)
    assert "temporal" not in response.diagnostics.submitted_sources


def test_a_reference_time_that_is_not_a_time_is_a_clear_error(bikes):
    system, query = bikes
    with pytest.raises(Exception, match="reference_time"):
        ask(system, "the past weekend", query, reference_time="next tuesday-ish")


def test_a_reference_time_at_the_ends_of_the_calendar_answers(bikes):
    """Year 1 and 9999 are valid times to ask at: the windows that would pass the calendar's ends give
    no temporal worker, one inside it runs; neither is an error."""
    system, query = bikes
    late = ask(system, "Which bike did I service this year?", query, reference_time="9999-12-29T23:00:00Z")
    assert "temporal" not in late.diagnostics.submitted_sources and late.memories
    early = ask(system, "Which bike did I service yesterday?", query, as_of="0001-03-10T12:00:00Z")
    assert "temporal" in early.diagnostics.submitted_sources and early.diagnostics.worker_hits["temporal"] == 0
