"""query(..., candidates=False): a retrieval-only query reads only the final CTE's rows it can return,
and returns what the whole candidate list gives, in the same order, on a real server: plain queries,
facts that changed (supersession, as_of), a type hint, candidates with no fused score."""

from __future__ import annotations

import numpy as np
import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem
from memoria_pg.query.candidates import ZERO_SCORE_SCALE, _order_holds
from tests.conftest import TEMPLATE, create_database, drop_database
from tests.test_supersession_quality import CITIES, PEOPLE, _stored, corpus


def answers(system: MemorySystem, text: str, **kw):
    """The query with and without the candidate list: (what it returns, with scores), the response
    without the list, and the number of candidates each counted."""
    out = {}
    for flag in (True, False):
        response = system.query(text, tenant=kw.pop("tenant", "t"), ranking=False, candidates=flag, **kw)
        out[flag] = response
    full, lean = out[True], out[False]
    skipped = lean.diagnostics.skipped_sources  # auxiliary workers left out (QueryPipeline.leave_out_auxiliary)
    assert [(m.memory_id, m.final_score, m.sources) for m in lean.memories] == [
        (m.memory_id, m.final_score, [s for s in m.sources if s not in skipped]) for m in full.memories
    ]
    assert full.diagnostics.candidate_count == len(full.candidates)
    if skipped:  # the candidates only they found are not counted
        assert lean.diagnostics.candidate_count <= full.diagnostics.candidate_count
    else:
        assert lean.diagnostics.candidate_count == full.diagnostics.candidate_count
    assert lean.diagnostics.type_filter_applied == full.diagnostics.type_filter_applied
    return full, lean


@pytest.fixture(scope="module")
def moves(admin_dsn, template_dsn):
    """The supersession corpus (people who move, distractors naming the same cities), stored once."""
    name, dsn = create_database(admin_dsn, TEMPLATE)
    records, questions = corpus(seed=11)
    system = _stored(Config(dsn=dsn, pool_min_size=1, pool_max_size=8, enable_fusion=True), records)
    try:
        yield system, questions
    finally:
        system.close()
        drop_database(admin_dsn, name)


def test_only_the_rows_returned_are_read_and_they_are_the_same(moves):
    system, _ = moves
    embedder = HashEmbedder()
    texts = [f"{p} {how} {c}" for p, c in zip(PEOPLE, CITIES * 3) for how in ("visited", "museums of")]
    limited = 0
    for text in texts:
        full, lean = answers(system, text, top_k=3, embedding=embedder.embed([text])[0])
        assert len(lean.candidates) <= 3 or len(lean.candidates) == len(full.candidates)
        limited += len(lean.candidates) <= 3 < len(full.candidates)
    assert limited >= len(texts) * 0.8  # most read 3 rows of their dozens of candidates


def test_v3_reads_only_the_rows_returned_too(moves):
    system, _ = moves
    embedder = HashEmbedder()
    for person, city in zip(PEOPLE[:12], CITIES):
        text = f"{person} lives in {city}"
        full, lean = answers(system, text, top_k=4, v4=False, embedding=embedder.embed([text])[0])
        assert len(lean.candidates) == 4 < len(full.candidates)
        assert lean.diagnostics.worker_hits == full.diagnostics.worker_hits


def test_the_rows_read_carry_the_same_access_statistics(moves):
    # The first-rows form reads memory_access per returned row (a subquery above its limit); the whole
    # list joins it. After ranked queries (which record access), both give the same counts and times.
    system, _ = moves
    embedder = HashEmbedder()
    texts = [f"{p} visited {c}" for p, c in zip(PEOPLE[:8], CITIES)]
    for text in texts * 2:
        system.query(text, tenant="t", top_k=3, embedding=embedder.embed([text])[0])  # ranked: records access
    assert system.settle(5)  # those writes ended after their queries returned
    counted = 0
    for text in texts:
        full, lean = answers(system, text, top_k=3, embedding=embedder.embed([text])[0])
        assert [(m.access_count, m.last_accessed_at) for m in lean.memories] == [
            (m.access_count, m.last_accessed_at) for m in full.memories
        ]
        counted += sum(m.access_count > 0 and m.last_accessed_at is not None for m in lean.memories)
    assert counted >= len(texts)  # the statistics were there to read


def test_facts_that_changed_are_placed_as_with_the_whole_list(moves):
    # "Where does X live?" meets the attribute worker's current and superseded facts: a superseded one
    # is moved below the best current one wherever that was read, so such a query reads every row;
    # as of a past time too.
    system, questions = moves
    embedder = HashEmbedder()
    stale = 0
    for text, _, as_of in questions[:40]:
        full, lean = answers(system, text, top_k=2, as_of=as_of, embedding=embedder.embed([text])[0])
        if any(c.scores.get("attribute_current") == 0.0 for c in full.candidates):
            stale += 1
            skipped = lean.diagnostics.skipped_sources  # their candidates alone are not there
            assert len(lean.candidates) == len([c for c in full.candidates if set(c.sources) - set(skipped)])
    assert stale >= 10


def test_a_type_hint_keeps_the_hinted_memories_wherever_they_rank(config):
    vec = np.random.default_rng(8).normal(size=384).astype(np.float32)
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        # The general memories are nearer the query; the procedural ones (the hinted type) come last.
        system.store_many(
            [{"content": f"the red button note {i}", "tenant": "t", "embedding": vec + 0.01 * i} for i in range(12)]
            + [
                {
                    "content": f"press the red button step {i}",
                    "tenant": "t",
                    "memory_type": "procedural",
                    "embedding": vec + 0.5 + 0.01 * i,
                }
                for i in range(4)
            ]
        )
        full, lean = answers(system, "red button", memory_type="procedural", top_k=2, embedding=vec)
        assert lean.diagnostics.type_filter_applied
        assert [m.memory_type for m in lean.memories] == ["procedural", "procedural"]
        assert len(lean.candidates) == 2 < len(full.candidates)


def test_candidates_without_a_fused_score_read_every_row(config):
    # Found by the graph worker alone (no fusion weight): every fused score is 0 and retrieval order
    # falls back to inverse distance, which the final CTE cannot order by: every row is read.
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        system.store_many([{"content": f"Alice met Bob in Paris on day {i}", "tenant": "t"} for i in range(8)])
        full, lean = answers(system, "Alice and Bob", workers=["graph"], top_k=2)
        assert full.candidates and all(c.retrieval_score == 0 for c in full.candidates)
        assert len(lean.candidates) == len(full.candidates) > 2


def test_the_order_holds_check():
    def rows(*scores, types=None, total=None, preferred=0):
        types = types or ["general"] * len(scores)
        n = total if total is not None else len(scores)
        return [
            {"retrieval_score": s, "memory_type": t, "candidate_total": n, "preferred_total": preferred}
            for s, t in zip(scores, types)
        ]

    assert _order_holds([], None)
    assert _order_holds(rows(0.9, 0.5, total=2), None)  # every row read
    assert _order_holds(rows(0.9, 0.0, total=2), None)
    assert _order_holds(rows(0.9, 0.5, total=50), None)  # the last read outscores any unscored one
    assert not _order_holds(rows(0.9, ZERO_SCORE_SCALE, total=50), None)
    assert not _order_holds(rows(0.9, 0.0, total=50), None)
    # The preferred type first: what counts is its rows and its count.
    mixed = rows(0.4, 0.0005, 0.9, types=["procedural", "procedural", "general"], total=50, preferred=2)
    assert _order_holds(mixed, "procedural")  # both procedural rows were read
    mixed = rows(0.4, 0.3, types=["procedural", "procedural"], total=50, preferred=9)
    assert _order_holds(mixed, "procedural")
    mixed = rows(0.4, 0.0, types=["procedural", "procedural"], total=50, preferred=9)
    assert not _order_holds(mixed, "procedural")
