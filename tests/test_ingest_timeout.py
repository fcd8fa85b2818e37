"""A bulk load does not fail because a batch is big or the machine busy: ingest statements run under
their own statement_timeout (none by default), not under the query side's ceiling."""

from __future__ import annotations

import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem, ServerError

RECORDS = [{"content": f"Note {i}: Alice Novak met Bruno Rossi and Chiara Berg in Lisbon about budget {i}.",
            "tenant": "t"} for i in range(2000)]  # fmt: skip


def test_a_big_batch_outlasts_the_interactive_statement_timeout(config: Config):
    # 25 ms is far below what a 2,000-record batch takes; the query side keeps it, the ingest does not.
    with MemorySystem(config.replace(statement_timeout_ms=25), embedder=HashEmbedder()) as system:
        result = system.store_many(RECORDS, batch_size=2000)
    assert result.inserted == 2000


def test_the_ingest_timeout_applies_when_set(config: Config):
    cfg = config.replace(ingest_statement_timeout_ms=25)
    with MemorySystem(cfg, embedder=HashEmbedder()) as system:
        with pytest.raises(ServerError, match="statement timeout"):
            system.store_many(RECORDS, batch_size=2000)
        assert system.list_memories(tenant="t") == []  # the batch rolled back whole
