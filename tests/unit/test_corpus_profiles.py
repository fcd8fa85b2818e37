"""The synthetic corpus's profiles (benchmarks/corpus.py, issue 17): the realistic one keeps the short
one's records and facts, and has the length and entities it was built to (corpus.REALISTIC_TARGET)."""

from __future__ import annotations

import datetime as dt
import statistics
import sys
from pathlib import Path

import pytest

from memoria_pg.core.entities import extract_attributes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import corpus  # benchmarks/ is not a package: imported from its folder
import corpus_profile

N = 1000


def test_realistic_memories_extend_the_short_ones_and_state_no_other_fact():
    short = list(corpus.memories(N, seed=99, profile="short"))
    realistic = list(corpus.memories(N, seed=99, profile="realistic"))
    assert sum(r["content"] != s["content"] for s, r in zip(short, realistic)) > 0.95 * N
    for s, r in zip(short, realistic, strict=True):
        assert r["content"] == s["content"] or r["content"].startswith(s["content"] + " ")  # a few draw none
        assert {k: v for k, v in r.items() if k != "content"} == {k: v for k, v in s.items() if k != "content"}
        speaker = s["metadata"].get("speaker")
        assert extract_attributes(r["content"], speaker=speaker) == extract_attributes(s["content"], speaker=speaker)


def test_realistic_profile_is_deterministic():
    first = [m["content"] for m in corpus.memories(200, seed=5, profile="realistic")]
    assert first == [m["content"] for m in corpus.memories(200, seed=5, profile="realistic")]
    assert first != [m["content"] for m in corpus.memories(200, seed=6, profile="realistic")]


def test_realistic_profile_has_its_target_length_and_entities():
    now = dt.datetime.now(dt.UTC)
    rows = [corpus_profile.shape(m, now) for m in corpus.memories(N, seed=99, profile="realistic")]
    target = corpus.REALISTIC_TARGET
    for key, want in (
        ("chars", target["chars_mean"]),
        ("entities", target["entities_mean"]),
        ("counted", target["cooccurrences_mean"]),
    ):
        assert statistics.fmean(r[key] for r in rows) == pytest.approx(want, rel=0.15), key


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="profile"):
        next(corpus.memories(1, profile="long"))
