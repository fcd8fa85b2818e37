"""Consistency, proven: random sequences of store / update / delete / forget / invalidate over a few
tenants leave every derived table (BM25 statistics and postings, entity mentions, co-occurrence weights,
entities, attributes and their supersession, the AGE mirror) equal to what a fresh database holding the
same final memories has, and the queries answer the same, BM25 scores equal to 1e-9.

Runs on the AGE-capable server (with the graph) and, marked `embedded`, on the embedded server.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memoria_pg import Config, HashEmbedder, MemorySystem, NotFound
from tests.conftest import TEMPLATE, create_database, drop_database
from tests.lifecycle_state import derived_state

TENANTS = ("acme", "blue")
TYPES = ("general", "fact", "episodic")
SENTENCES = (
    "Alice lives in Paris.", "Alice moved to Berlin.", "Alice works at Acme with Bob.", "Bob lives in Rome.",
    "Bob works at Globex.", "Carol met Alice and Bob in Lisbon.", "Carol's favourite colour is teal.",
    "Carol's favourite colour is red.", "Dan moved to Paris with Carol.", "the budget meeting ran late",
    "Erin's dog is named Rex.", "Alice and Erin planned the Lisbon trip.",
    # a multi-valued attribute: removing one of them must not end the others (0012)
    "Erin's hobby is chess.", "Erin's hobby is jazz.", "Erin's hobby is tennis.",
)  # fmt: skip
QUERIES = ("where does Alice live", "Bob Globex", "Carol favourite colour", "Lisbon trip", "budget meeting")
BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
embedder = HashEmbedder()

op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(TENANTS), st.sampled_from(SENTENCES), st.sampled_from(SENTENCES),
              st.sampled_from(TYPES), st.integers(0, 400)),
    st.tuples(st.just("update_text"), st.integers(0, 30), st.sampled_from(SENTENCES)),
    st.tuples(st.just("update_type"), st.integers(0, 30), st.sampled_from(TYPES)),
    st.tuples(st.just("update_speaker"), st.integers(0, 30), st.sampled_from(("Alice", "Bob", None))),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("forget"), st.sampled_from(TENANTS), st.sampled_from(TYPES)),
    st.tuples(st.just("invalidate"), st.integers(0, 30), st.integers(0, 400)),
)  # fmt: skip


def apply(system: MemorySystem, live: list[tuple[str, int]], step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "store":
        _, tenant, a, b, memory_type, days = step
        new = system.store(f"{a} {b}", tenant=tenant, memory_type=memory_type,
                           created_at=BASE + dt.timedelta(days=days))  # fmt: skip
        if new is not None:
            live.append((tenant, new))
        return
    if kind == "forget":
        result = system.forget(tenant=step[1], memory_type=step[2])
        live[:] = [(t, i) for t, i in live if i not in set(result.ids)]
        return
    if not live:
        return
    tenant, memory_id = live[step[1] % len(live)]
    try:
        if kind == "update_text":
            system.update(memory_id, tenant=tenant, content=f"{step[2]} (corrected)")
        elif kind == "update_type":
            system.update(memory_id, tenant=tenant, memory_type=step[2])
        elif kind == "update_speaker":
            system.update(memory_id, tenant=tenant, metadata={} if step[2] is None else {"speaker": step[2]})
        elif kind == "delete":
            system.delete(memory_id, tenant=tenant)
            live.remove((tenant, memory_id))
        elif kind == "invalidate":
            system.invalidate(memory_id, tenant=tenant, at=BASE + dt.timedelta(days=step[2]))
    except NotFound:
        raise
    # Refused, and nothing else: a correction that would duplicate another memory, an end before the start.
    except Exception as exc:
        assert "already has this content" in str(exc) or "began to hold" in str(exc), exc


def rebuild(system: MemorySystem, fresh: MemorySystem) -> None:
    """The final memories, stored from scratch in `fresh` (same text, type, times, vectors, validity), one
    at a time in the order of their ids, so that the fresh ids keep that order: an exact tie is broken by
    id, in the fused order and so in which candidates lend the lexical feedback their terms (one
    `store_many` batch numbers its rows in key order, not in the order given)."""
    for tenant in TENANTS:
        memories = sorted(system.list_memories(tenant=tenant, limit=1000), key=lambda m: m.id)
        for m in memories:
            fresh.store_many([{"content": m.content, "context": m.context, "metadata": m.metadata, "tenant": tenant,
                               "memory_type": m.memory_type, "created_at": m.created_at, "importance": m.importance,
                               "external_id": m.external_id}])  # fmt: skip
        by_content = {(m.memory_type, m.content): m for m in fresh.list_memories(tenant=tenant, limit=1000)}
        for m in memories:
            if m.valid_to is not None:
                fresh.invalidate(by_content[m.memory_type, m.content].id, tenant=tenant, at=m.valid_to)


def answers(system: MemorySystem) -> list[Any]:
    out = []
    for tenant in TENANTS:
        for text in QUERIES:
            response = system.query(text, tenant=tenant, embedding=embedder.embed([text])[0], ranking=False,
                                    workers=["vector", "bm25", "graph", "attribute"], top_k=20)  # fmt: skip
            # sorted: candidates of equal score come in id order, and ids differ between the databases
            out.append(sorted((round(c.retrieval_score, 9), c.memory_type, c.content,
                               round(c.scores.get("bm25", 0.0), 9), c.sources) for c in response.candidates))  # fmt: skip
    return out


def check_sequence(admin_dsn: str, steps: list[tuple[Any, ...]], *, graph: bool, **config: Any) -> None:
    names = []
    try:
        dsns = []
        for _ in range(2):
            name, dsn = create_database(admin_dsn, TEMPLATE)
            names.append(name)
            dsns.append(dsn)
        cfg = Config(dsn=dsns[0], pool_min_size=1, pool_max_size=4, **config)
        with MemorySystem(cfg, embedder=embedder) as system, \
                MemorySystem(cfg.replace(dsn=dsns[1]), embedder=embedder) as fresh:  # fmt: skip
            live: list[tuple[str, int]] = []
            for step in steps:
                apply(system, live, step)
            rebuild(system, fresh)
            after, expected = derived_state(dsns[0], graph=graph), derived_state(dsns[1], graph=graph)
            assert after.pop("history_of_missing") == 0  # a deleted memory's text is gone from its history
            expected.pop("history_of_missing")
            for name in after:
                assert after[name] == expected[name], f"{name} differs after {steps}"
            assert answers(system) == answers(fresh), f"answers differ after {steps}"
    finally:
        for name in names:
            drop_database(admin_dsn, name)


SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# Found by the search on 2026-12-07: four memories at one vector distance (HashEmbedder vectors with no
# word in common with the query), whose tie the fused order breaks by id, and the lexical feedback took
# its seeds from the first of them: the fresh database, its memories stored in another order, chose
# other seeds (rebuild now stores them in id order).
TIED_HEAD = [
    ("store", "acme", SENTENCES[0], SENTENCES[0], "general", 0),
    ("store", "acme", SENTENCES[0], SENTENCES[0], "general", 0),
    ("store", "acme", SENTENCES[0], SENTENCES[0], "fact", 0),
    ("store", "acme", SENTENCES[0], SENTENCES[2], "general", 0),
    ("store", "acme", SENTENCES[0], SENTENCES[1], "general", 0),
    ("store", "acme", SENTENCES[0], SENTENCES[1], "fact", 0),
]


@SETTINGS
@given(steps=st.lists(op, min_size=4, max_size=18))
@example(steps=TIED_HEAD)
def test_random_lifecycles_keep_every_derived_table_exact(admin_dsn, template_dsn, server_has_age, steps):
    check_sequence(admin_dsn, steps, graph=server_has_age)


@pytest.mark.embedded
@SETTINGS
@given(steps=st.lists(op, min_size=4, max_size=18))
def test_random_lifecycles_keep_every_derived_table_exact_on_the_embedded_server(admin_dsn, template_dsn, steps):
    check_sequence(admin_dsn, steps, graph=False)


def test_a_fixed_lifecycle_touching_every_operation(admin_dsn, template_dsn, server_has_age):
    steps = [
        ("store", "acme", SENTENCES[0], SENTENCES[2], "general", 1),
        ("store", "acme", SENTENCES[1], SENTENCES[5], "fact", 200),
        ("store", "acme", SENTENCES[6], SENTENCES[11], "general", 20),
        ("store", "blue", SENTENCES[3], SENTENCES[4], "general", 5),
        ("store", "acme", SENTENCES[7], SENTENCES[8], "episodic", 300),
        ("update_text", 0, SENTENCES[4]), ("update_type", 1, "episodic"), ("update_speaker", 2, "Alice"),
        ("invalidate", 3, 100), ("delete", 4), ("forget", "acme", "episodic"),
    ]  # fmt: skip
    check_sequence(admin_dsn, steps, graph=server_has_age)
