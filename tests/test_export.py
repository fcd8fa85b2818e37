"""Export: a tenant's memories as ingest records that store_many and `memoria-pg ingest` read back, in one
snapshot; and the ingest format's valid_to (a memory stored as having ended), which the round trip needs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from memoria_pg import Config, HashEmbedder, InputError, MemorySystem
from memoria_pg.core.types import Memory
from memoria_pg.lifecycle import reads
from tests.service_live import run_cli

UTC = dt.UTC
RECORDS = [
    {"content": "Alice lives in Paris.", "created_at": "2021-03-01", "external_id": "home-1"},
    {"content": "Alice lives in Rome.", "created_at": "2023-05-01", "metadata": {"speaker": "Bob", "n": 12345678901234567890}},
    {"content": "Bake the pie for 40 minutes.", "memory_type": "procedural", "importance": 0.7, "pinned": True},
    {"content": "The lease ends in June.", "context": "Talking about the flat.", "valid_from": "2030-01-01"},
    {"content": "Maya's favourite colour was teal.", "created_at": "2020-01-01", "valid_to": "2022-02-02T10:00:00Z"},
]  # fmt: skip


def comparable(memory: Memory) -> dict[str, object]:
    """A memory without what an import does not keep (its id, tenant and the id of what supersedes it)."""
    return {k: v for k, v in dataclasses.asdict(memory).items() if k not in ("id", "tenant", "superseded_by")}


def memories(system: MemorySystem, tenant: str) -> list[Memory]:
    """The tenant's memories in the order of RECORDS (a batch gets its ids in key order, not input order)."""
    order = {r["content"]: i for i, r in enumerate(RECORDS)}
    return sorted(system.list_memories(tenant=tenant, limit=1000), key=lambda m: order.get(m.content, len(order)))


@pytest.fixture
def system(config: Config):
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store_many([{**r, "tenant": "a"} for r in RECORDS])
        yield system


def test_an_export_read_back_into_another_tenant_gives_the_same_memories(system: MemorySystem):
    exported = list(system.export(tenant="a"))
    assert [r["content"] for r in exported] == [m.content for m in sorted(memories(system, "a"), key=lambda m: m.id)]
    assert json.loads(json.dumps(exported)) == exported  # JSON as it is
    assert system.store_many([{**r, "tenant": "b"} for r in exported]).inserted == len(RECORDS)
    before, after = memories(system, "a"), memories(system, "b")
    assert [comparable(m) for m in after] == [comparable(m) for m in before]
    statuses = [m.status for m in after]
    assert statuses == ["superseded", "active", "active", "active", "invalidated"]  # re-derived on import
    assert after[1].metadata["n"] == 12345678901234567890
    found = system.query("where does Alice live", tenant="b", ranking=False)
    assert after[1].id in [c.memory_id for c in found.candidates]
    assert system.store_many([{**r, "tenant": "b"} for r in exported]).duplicates == len(RECORDS)  # idempotent


def test_with_embeddings_an_import_needs_no_model(system: MemorySystem, config: Config):
    exported = list(system.export(tenant="a", embeddings=True))
    assert all(len(r["embedding"]) == 384 for r in exported)

    class NoModel(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            raise AssertionError("the model was run")

    with MemorySystem(config, embedder=NoModel()) as other:
        assert other.store_many([{**r, "tenant": "c"} for r in exported]).inserted == len(RECORDS)
        again = list(other.export(tenant="c", embeddings=True))
    for old, new in zip(exported, again, strict=True):
        assert np.allclose(old["embedding"], new["embedding"], atol=1e-6)


def test_filters_and_arguments_are_checked_at_the_call(system: MemorySystem):
    assert [r["memory_type"] for r in system.export(tenant="a", memory_type="procedural")] == ["procedural"]
    assert [r["content"] for r in system.export(tenant="a", where={"speaker": "Bob"})] == ["Alice lives in Rome."]
    assert list(system.export(tenant="nobody")) == []
    with pytest.raises(InputError, match="unknown memory_type 'nope'"):
        system.export(tenant="a", memory_type="nope")  # not only when iterated
    with pytest.raises(InputError, match="where must be a non-empty object"):
        system.export(tenant="a", where=["speaker"])
    with pytest.raises(InputError, match="embeddings must be true or false"):
        system.export(tenant="a", embeddings="yes")


def test_an_export_is_one_snapshot(system: MemorySystem, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reads, "EXPORT_FETCH", 1)  # a row per fetch: the rest is read after the changes
    records = system.export(tenant="a")
    first = next(records)
    system.store("Stored while the export runs.", tenant="a")
    gone = memories(system, "a")[1].id
    system.delete(gone, tenant="a")  # after the export began: it still has it
    rest = list(records)
    assert sorted([first["content"], *(r["content"] for r in rest)]) == sorted(r["content"] for r in RECORDS)


def test_valid_to_in_a_record_stores_a_memory_that_has_ended(system: MemorySystem):
    ended = memories(system, "a")[4]
    assert ended.status == "invalidated" and ended.valid_to == dt.datetime(2022, 2, 2, 10, tzinfo=UTC)
    assert ended.id not in [c.memory_id for c in system.query("Maya favourite colour", tenant="a").candidates]
    with pytest.raises(InputError, match=r"record 2: valid_to 2019-01-01T00:00:00\+00:00 is before the memory begins"):
        system.store_many([{"content": "fine", "tenant": "a"},
                           {"content": "x", "tenant": "a", "created_at": "2020-01-01", "valid_to": "2019-01-01"}])  # fmt: skip
    assert len(memories(system, "a")) == len(RECORDS)  # nothing of the batch written


def test_the_cli_exports_a_tenant_that_ingest_reads_back(system: MemorySystem, dsn: str, tmp_path: Path):
    out = tmp_path / "a.jsonl"
    done = run_cli(dsn, "export", "--tenant", "a", "--embeddings", "-o", str(out))
    assert done.returncode == 0 and f"exported {len(RECORDS)} memories to {out}" in done.stderr
    assert sorted(json.loads(line)["content"] for line in out.read_text().splitlines()) == sorted(
        r["content"] for r in RECORDS
    )
    assert run_cli(dsn, "ingest", str(out), "--tenant", "d").returncode == 0
    assert [comparable(m) for m in memories(system, "d")] == [comparable(m) for m in memories(system, "a")]
    shown = run_cli(dsn, "export", "--tenant", "a", "--memory-type", "procedural")
    assert [json.loads(line)["content"] for line in shown.stdout.splitlines()] == ["Bake the pie for 40 minutes."]
    bad = run_cli(dsn, "export", "--tenant", "a", "--memory-type", "nope", "-o", str(tmp_path / "b.jsonl"))
    assert bad.returncode == 1 and "unknown memory_type 'nope'" in bad.stderr and "Traceback" not in bad.stderr
    assert not list(tmp_path.glob("b.jsonl*"))  # no file, not even a partial one


def test_a_future_valid_to_is_an_expiry(system: MemorySystem):
    pass_id = system.store("The door code is 4711 this week.", tenant="e", valid_to="2031-01-01")
    assert system.get(pass_id, tenant="e").status == "active"

    def found(**kw: object) -> bool:
        return pass_id in [c.memory_id for c in system.query("door code", tenant="e", ranking=False, **kw).candidates]

    assert found() and found(as_of="2030-12-31") and not found(as_of="2031-01-01")
    now = system.invalidate(pass_id, tenant="e")  # retired now, not at its expiry
    assert now.status == "invalidated" and now.valid_to < dt.datetime(2030, 1, 1, tzinfo=UTC) and not found()
