"""The per-type cap on tenants' own HNSW indexes (db/vector_indexes._capped), as pure logic over a plan:
which (tenant, type)s keep, get, give up or go without an index. The same rules on a real server:
tests/test_vector_indexes.py."""

from __future__ import annotations

from memoria_pg.db.vector_indexes import Action, _capped


def act(tenant: str, rows: int, action: str, memory_type: str = "general") -> Action:
    return Action(tenant, memory_type, rows, action, f"idx_{tenant}_{memory_type}")


def decided(actions: list[Action]) -> dict[tuple[str, str], str]:
    return {(a.tenant, a.memory_type): a.action for a in actions}


def test_each_memory_type_has_its_own_places():
    plan = [act("a", 90, "build"), act("b", 80, "build"), act("a", 50, "build", "fact"), act("c", 40, "build", "fact")]
    assert decided(_capped(plan, set(), 1, [])) == {
        ("a", "general"): "build", ("b", "general"): "skip", ("a", "fact"): "build", ("c", "fact"): "skip",
    }  # fmt: skip


def test_a_recorded_index_holds_its_place_even_unusable_and_a_drop_frees_it():
    recorded = {("a", "general"), ("b", "general")}
    # a's index failed to build (recorded, unusable: "build" again); b's tenant shrank ("drop")
    plan = [act("a", 30, "build"), act("b", 5, "drop"), act("c", 50, "build")]
    assert decided(_capped(plan, recorded, 2, [])) == {
        ("a", "general"): "build", ("b", "general"): "drop", ("c", "general"): "build",
    }  # fmt: skip
    # with one place, a's rebuild keeps it: c (50) is not more than twice a's 30
    assert decided(_capped(plan, recorded, 1, []))[("c", "general")] == "skip"


def test_the_largest_without_an_index_take_the_smallest_places_one_by_one():
    recorded = {("small", "general"), ("mid", "general")}
    plan = [act("small", 10, "keep"), act("mid", 40, "keep"), act("huge", 500, "build"), act("big", 90, "build")]
    out = decided(_capped(plan, recorded, 2, []))
    # huge takes small's place (500 > 2 x 10), then big takes mid's (90 > 2 x 40)
    assert out == {
        ("small", "general"): "drop", ("mid", "general"): "drop", ("huge", "general"): "build", ("big", "general"): "build",
    }  # fmt: skip


def test_others_hold_places_and_appear_only_when_dropped():
    others = [act("elsewhere", 10, "keep"), act("far", 100, "keep")]
    recorded = {("elsewhere", "general"), ("far", "general")}
    plan = [act("me", 15, "build")]
    assert [(a.tenant, a.action) for a in _capped(plan, recorded, 2, others)] == [("me", "skip")]
    plan = [act("me", 25, "build")]
    assert [(a.tenant, a.action) for a in _capped(plan, recorded, 2, others)] == [
        ("me", "build"),
        ("elsewhere", "drop"),
    ]


def test_a_lower_cap_drops_the_smallest_down_to_it():
    recorded = {("a", "general"), ("b", "general"), ("c", "general")}
    plan = [act("a", 30, "keep"), act("b", 20, "keep"), act("c", 40, "keep")]
    assert decided(_capped(plan, recorded, 1, [])) == {
        ("a", "general"): "drop", ("b", "general"): "drop", ("c", "general"): "keep",
    }  # fmt: skip
