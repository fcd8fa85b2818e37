"""The lifecycle API: get, list, update, delete, forget, erase_tenant, history, invalidate/restore, as_of."""

from __future__ import annotations

import datetime as dt

import numpy as np
import psycopg
import pytest

from memoria_pg import Config, HashEmbedder, InputError, MemorySystem, NotFound
from memoria_pg.lifecycle import removal

UTC = dt.UTC


@pytest.fixture
def two(config: Config):
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        a = system.store_many([
            {"content": "Alice lives in Paris.", "tenant": "a", "created_at": "2021-03-01", "external_id": "m-1"},
            {"content": "Alice works at Acme with Bob.", "tenant": "a", "metadata": {"speaker": "Bob"}},
            {"content": "The budget meeting ran late.", "tenant": "a", "memory_type": "episodic",
             "created_at": "2022-01-01"},
        ]).ids  # fmt: skip
        b = system.store_many([{"content": "Zed hides in Lima.", "tenant": "b"}]).ids
        system.ids = {"a": a, "b": b}
        yield system


def test_get_by_id_and_external_id_and_candidates_carry_external_ids(two: MemorySystem):
    paris = two.ids["a"][0]
    memory = two.get(paris, tenant="a")
    assert (memory.content, memory.external_id, memory.status, memory.memory_type) == (
        "Alice lives in Paris.", "m-1", "active", "general")  # fmt: skip
    assert memory.valid_from == dt.datetime(2021, 3, 1, tzinfo=UTC) and memory.valid_to is None
    assert two.get(external_id="m-1", tenant="a").id == paris
    found = two.query("where does Alice live", tenant="a", ranking=False)
    assert {c.memory_id: c.external_id for c in found.candidates}[paris] == "m-1"


def test_another_tenants_memory_is_exactly_like_a_missing_one(two: MemorySystem):
    zed = two.ids["b"][0]
    missing = 10**9
    for memory_id in (zed, missing):
        calls = [
            lambda memory_id=memory_id: two.get(memory_id, tenant="a"),
            lambda memory_id=memory_id: two.update(memory_id, tenant="a", content="changed"),
            lambda memory_id=memory_id: two.update(memory_id, tenant="a", importance=0.9),
            lambda memory_id=memory_id: two.delete(memory_id, tenant="a"),
            lambda memory_id=memory_id: two.history(memory_id, tenant="a"),
            lambda memory_id=memory_id: two.invalidate(memory_id, tenant="a"),
            lambda memory_id=memory_id: two.restore(memory_id, tenant="a"),
        ]
        messages = []
        for call in calls:
            with pytest.raises(NotFound) as info:
                call()
            messages.append(str(info.value).replace(str(memory_id), "ID"))
        assert "for this tenant" in messages[0]
        if memory_id == zed:
            zed_messages = messages
        else:
            assert messages == zed_messages  # same words whether it exists elsewhere or not at all
    assert two.get(zed, tenant="b").content == "Zed hides in Lima."  # untouched
    with pytest.raises(NotFound):
        two.get(external_id="m-1", tenant="b")


def test_update_rederives_text_keeps_usage_and_records_the_previous_version(two: MemorySystem):
    acme = two.ids["a"][1]
    before = two.query("Acme", tenant="a", ranking=True)  # records an access
    assert two.settle(5)  # after the query returned
    assert acme in [m.memory_id for m in before.memories]
    updated = two.update(acme, tenant="a", content="Alice works at Globex with Carol.")
    assert updated.content == "Alice works at Globex with Carol." and updated.id == acme
    assert acme not in [c.memory_id for c in two.query("Acme", tenant="a", ranking=False, workers=["bm25"]).candidates]
    globex = two.query("Globex Carol", tenant="a", ranking=False)
    assert globex.candidates[0].memory_id == acme and "graph" in globex.candidates[0].sources
    with two.db.transaction("a") as conn:
        names = {r[0] for r in conn.execute("SELECT norm_name FROM memoria.entities").fetchall()}
        access = conn.execute("SELECT access_count FROM memoria.memory_access WHERE memory_id = %s", (acme,)).fetchone()
    assert "carol" in names and "acme" not in names  # no memory mentions Acme any more: gone
    assert access is not None and access[0] >= 1
    history = two.history(acme, tenant="a")
    assert [e.event for e in history] == ["stored", "updated"]
    assert history[1].detail["previous"] == {"content": "Alice works at Acme with Bob."}


def test_update_with_a_vector_type_move_and_row_only_fields(two: MemorySystem):
    paris = two.ids["a"][0]
    vector = np.zeros(384, dtype=np.float32)
    vector[7] = 1.0
    moved = two.update(paris, tenant="a", memory_type="fact", embedding=vector, importance=0.9, pinned=True)
    assert (moved.memory_type, moved.importance, moved.pinned) == ("fact", 0.9, True)
    with two.db.transaction("a") as conn:
        stored = conn.execute("SELECT embedding FROM memoria.memories WHERE id = %s", (paris,)).fetchone()[0]
        shard = conn.execute(
            "SELECT tableoid::regclass::text FROM memoria.memories WHERE id = %s", (paris,)
        ).fetchone()[0]
        postings = conn.execute(
            "SELECT DISTINCT memory_type FROM memoria.memory_terms WHERE memory_id = %s", (paris,)
        ).fetchall()
    np.testing.assert_allclose(np.asarray(stored.to_numpy()), vector)
    assert shard == "memories_fact" and postings == [("fact",)]
    assert two.update(paris, tenant="a", importance=0.2).importance == 0.2
    assert two.update(paris, tenant="a", importance=0.2) == two.get(paris, tenant="a")  # nothing to change


def test_bad_updates_change_nothing(two: MemorySystem):
    paris, acme, _ = two.ids["a"]
    with pytest.raises(InputError, match="unknown memory_type 'nope'"):
        two.update(paris, tenant="a", memory_type="nope")
    with pytest.raises(InputError, match="importance must be a number between 0 and 1"):
        two.update(paris, tenant="a", importance=2)
    with pytest.raises(InputError, match="another memory of type 'episodic' already has this content"):
        two.update(acme, tenant="a", content="The budget meeting ran late.", memory_type="episodic")
    with pytest.raises(InputError, match="content is empty"):
        two.update(acme, tenant="a", content="  ")
    assert two.get(acme, tenant="a").content == "Alice works at Acme with Bob."
    assert [e.event for e in two.history(acme, tenant="a")] == ["stored"]


def test_a_failure_mid_update_leaves_nothing_half_changed(two: MemorySystem, monkeypatch):
    acme = two.ids["a"][1]

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    with two.db.transaction("a") as conn:
        before = conn.execute("SELECT count(*) FROM memoria.memory_terms").fetchone()[0]
    monkeypatch.setattr(two.ingestor, "rederive", fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        two.update(acme, tenant="a", content="Alice works at Initech.")
    monkeypatch.undo()
    assert two.get(acme, tenant="a").content == "Alice works at Acme with Bob."
    with two.db.transaction("a") as conn:
        assert conn.execute("SELECT count(*) FROM memoria.memory_terms").fetchone()[0] == before


def test_delete_is_all_or_nothing_and_scrubs_text_from_history(two: MemorySystem):
    paris, acme, meeting = two.ids["a"]
    two.update(paris, tenant="a", content="Alice lives in Paris, near the river.")
    with pytest.raises(
        NotFound, match=rf"1 of the 2 memories not found \(for this tenant\): {two.ids['b'][0]}; nothing was"
    ):
        two.delete([acme, two.ids["b"][0]], tenant="a")
    with pytest.raises(NotFound) as many:  # the message names a few of thousands, not all
        two.delete([acme, *range(10**9, 10**9 + 5000)], tenant="a")
    assert str(many.value).startswith("5000 of the 5001 memories not found") and "and 4980 more" in str(many.value)
    assert len(str(many.value)) < 400
    assert two.get(acme, tenant="a")
    assert two.delete([paris, acme], tenant="a") == 2
    events = two.history(paris, tenant="a")
    assert [e.event for e in events] == ["stored", "updated", "deleted"]  # when it changed, not what it said
    assert events[1].detail["changed"] == ["content"] and "previous" not in events[1].detail
    assert all("Paris" not in str(e.detail) for e in events)
    with pytest.raises(NotFound):
        two.get(paris, tenant="a")
    assert [c.content for c in two.query("Alice", tenant="a", ranking=False).candidates] == [
        "The budget meeting ran late."]  # fmt: skip
    assert two.get(meeting, tenant="a")


def test_removing_a_fact_resupersedes_only_single_valued_attributes(config: Config):
    """Deleting one of three hobbies leaves the other two current (hobby is not single-valued); deleting
    the newest home makes the one before it current again (location is)."""
    texts = ["Alice's hobby is jazz.", "Alice's hobby is chess.", "Alice's hobby is tennis.",
             "Alice lives in Paris.", "Alice lives in Rome.", "Alice lives in Oslo."]  # fmt: skip
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        ids = system.store_many([
            {"content": t, "tenant": "a", "created_at": dt.datetime(2024, 1, 1 + i, tzinfo=UTC)} for i, t in enumerate(texts)
        ]).ids  # fmt: skip
        system.delete([ids[2], ids[5]], tenant="a")
        with psycopg.connect(config.dsn) as conn:
            rows = conn.execute("SELECT value, valid_to IS NULL, superseded_by FROM memoria.memory_attributes "
                                "WHERE tenant = 'a' ORDER BY value").fetchall()  # fmt: skip
    assert rows == [("Paris", False, ids[4]), ("Rome", True, None), ("chess", True, None), ("jazz", True, None)]


def test_forget_by_filter_with_dry_run(two: MemorySystem):
    preview = two.forget(tenant="a", before="2022-06-01", dry_run=True)
    assert (preview.matched, preview.deleted) == (2, 0)
    assert len(two.list_memories(tenant="a")) == 3
    by_speaker = two.forget(tenant="a", where={"speaker": "Bob"})
    assert (by_speaker.matched, by_speaker.deleted) == (1, 1)
    by_type = two.forget(tenant="a", memory_type="episodic", before=dt.datetime(2030, 1, 1, tzinfo=UTC))
    assert by_type.deleted == 1
    assert [m.content for m in two.list_memories(tenant="a")] == ["Alice lives in Paris."]
    with pytest.raises(InputError, match="forget needs a filter"):
        two.forget(tenant="a")
    with pytest.raises(InputError, match="before 'yesterday' is not an ISO 8601"):
        two.forget(tenant="a", before="yesterday")
    with pytest.raises(InputError, match="where must be a non-empty object"):
        two.forget(tenant="a", where={})
    assert two.forget(tenant="b", memory_type="fact").matched == 0


def test_list_pages_with_a_cursor(two: MemorySystem):
    first = two.list_memories(tenant="a", limit=2)
    rest = two.list_memories(tenant="a", after=first[-1].id, limit=2)
    assert len(first) == 2 and len(rest) == 1 and first[-1].id < rest[0].id
    assert [m.memory_type for m in two.list_memories(tenant="a", memory_type="episodic")] == ["episodic"]
    with pytest.raises(InputError, match="limit must be an integer from 1 to 1000"):
        two.list_memories(tenant="a", limit=0)


def test_invalidate_hides_a_memory_from_then_on_reversibly(two: MemorySystem):
    paris = two.ids["a"][0]
    retired = two.invalidate(paris, tenant="a", at="2023-06-01")
    assert retired.status == "invalidated" and retired.valid_to == dt.datetime(2023, 6, 1, tzinfo=UTC)

    def found(**kw):
        return paris in [
            c.memory_id for c in two.query("Alice lives Paris", tenant="a", ranking=False, **kw).candidates
        ]

    assert not found()
    assert found(as_of="2022-01-01")  # it held then
    assert not found(as_of="2021-01-01")  # not yet stored as holding
    assert found(include_invalid=True)
    assert two.restore(paris, tenant="a").status == "active" and found()
    assert [e.event for e in two.history(paris, tenant="a")] == ["stored", "invalidated", "restored"]


def test_invalidating_again_keeps_the_end_unless_a_time_is_given(two: MemorySystem):
    paris = two.ids["a"][0]
    first = two.invalidate(paris, tenant="a")
    assert two.invalidate(paris, tenant="a").valid_to == first.valid_to  # a retried call moves nothing
    assert two.invalidate(paris, tenant="a", at=first.valid_to).valid_to == first.valid_to
    moved = two.invalidate(paris, tenant="a", at="2023-06-01")  # an explicit time corrects the end
    assert moved.valid_to == dt.datetime(2023, 6, 1, tzinfo=UTC)
    events = [(e.event, e.detail) for e in two.history(paris, tenant="a")]
    assert [e for e, _ in events] == ["stored", "invalidated", "invalidated"]
    assert events[2][1] == {"valid_to": "2023-06-01T00:00:00+00:00", "previous_valid_to": first.valid_to.isoformat()}


def test_erase_tenant_leaves_no_row_of_it_anywhere(two: MemorySystem, admin_dsn: str, dsn: str, server_has_age):
    two.query("Alice Paris", tenant="a", trace=True)
    two.update(two.ids["a"][0], tenant="a", content="Alice lives in Paris again.")
    counts = two.erase_tenant("a")
    assert counts["memories"] == 3 and counts["memory_history"] >= 4 and counts["query_traces"] == 1
    with psycopg.connect(dsn, autocommit=True) as conn:  # as the owner: outside row-level security
        tables = [r[0] for r in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relkind = 'r' AND a.attname = 'tenant'").fetchall()]  # fmt: skip
        kept = set(tables) - {f"memoria.{t}" for t in removal.tenant_tables(conn)} - {"memoria.api_keys"}
        assert {
            t for t in kept if not t.startswith("memoria.memories_") and not t.startswith("memoria.memory_terms_")
        } == set()
        left = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant = 'a'").fetchone()[0] for t in tables
                if t != "memoria.api_keys"}  # fmt: skip
        assert set(left.values()) == {0}, left
        assert conn.execute("SELECT count(*) FROM memoria.memories WHERE tenant = 'b'").fetchone()[0] == 1
        if server_has_age:
            for label in ("Memory", "Entity", "MENTIONS", "RELATED"):
                rows = conn.execute(f"SELECT count(*) FROM memoria_graph.\"{label}\" WHERE "
                                    "ag_catalog.agtype_object_field_text(properties, 'tenant') = 'a'").fetchone()[0]  # fmt: skip
                assert rows == 0, label
    assert two.get(two.ids["b"][0], tenant="b")
    assert two.erase_tenant("a")["memories"] == 0  # erasing again is a no-op


def test_inputs_are_checked(two: MemorySystem):
    with pytest.raises(InputError, match="a memory id must be a positive integer"):
        two.get("3", tenant="a")
    for too_big in (2**63, 10**40):  # beyond a bigint: the library's message, not the driver's or a schema's
        with pytest.raises(InputError, match=r"a memory id must be a positive integer up to 9223372036854775807"):
            two.delete([1, too_big], tenant="a")
        with pytest.raises(InputError, match="up to 9223372036854775807"):
            two.update(too_big, tenant="a", content="x")
        with pytest.raises(InputError, match="up to 9223372036854775807"):
            two.get(too_big, tenant="a")
    with pytest.raises(InputError, match="either a memory id or external_id"):
        two.get(tenant="a")
    with pytest.raises(InputError, match="tenant must be a non-empty string"):
        two.delete(1, tenant="")
    with pytest.raises(InputError, match="as_of 'soon' is not an ISO 8601"):
        two.query("x", tenant="a", as_of="soon")
    assert two.delete([], tenant="a") == 0
