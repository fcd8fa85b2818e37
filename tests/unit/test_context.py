"""A memory's context: how it is indexed (BM25F-style term weights) and embedded."""

from __future__ import annotations

import numpy as np
import pytest

from evals.data import neighbour_context
from memoria_pg.core.embedding import CONTEXT_WEIGHT, HashEmbedder, embed_memories
from memoria_pg.core.text import CONTENT_WEIGHT, indexed_term_counts, indexed_tokens, tokenize


def test_without_a_context_the_tokens_are_the_contents():
    assert indexed_tokens("Dogs chase cats") == tokenize("Dogs chase cats")
    assert indexed_tokens("Dogs chase cats", None) == indexed_tokens("Dogs chase cats", "")


def test_with_a_context_the_content_counts_more_than_the_context():
    counts, length = indexed_term_counts("They are a real support", "How is your family doing?")
    assert counts["support"] == CONTENT_WEIGHT and counts["famili"] == 1  # Snowball: family -> famili
    assert length == CONTENT_WEIGHT * len(tokenize("They are a real support")) + len(
        tokenize("How is your family doing?")
    )


def test_embedding_without_context_is_the_contents():
    embedder = HashEmbedder()
    vectors = embed_memories(embedder, ["lemon tart", "apple pie"], [None, None])
    np.testing.assert_allclose(vectors, embedder.embed(["lemon tart", "apple pie"]))


def test_embedding_with_context_is_the_normalized_weighted_sum_of_content_and_content_plus_context():
    embedder = HashEmbedder()
    (vector,) = embed_memories(embedder, ["They are a real support."], ["How is your family?"])
    own, in_context = embedder.embed(["They are a real support.", "They are a real support. How is your family?"])
    expected = (own + CONTEXT_WEIGHT * in_context) / np.linalg.norm(own + CONTEXT_WEIGHT * in_context)
    np.testing.assert_allclose(vector, expected, rtol=1e-5)
    assert np.isclose(np.linalg.norm(vector), 1.0)


def test_embedding_mixes_records_with_and_without_context_in_one_call():
    calls = []

    class Counting(HashEmbedder):
        def embed(self, texts):
            calls.append(list(texts))
            return super().embed(texts)

    vectors = embed_memories(Counting(), ["a b", "c d", "e f"], [None, "x", None])
    assert len(calls) == 1 and len(calls[0]) == 4 and vectors.shape == (3, 384)
    np.testing.assert_allclose(vectors[0], HashEmbedder().embed(["a b"])[0])


def test_embedding_needs_one_context_per_content():
    with pytest.raises(ValueError, match="same length"):
        embed_memories(HashEmbedder(), ["a"], [])


def test_neighbour_context_takes_turns_before_and_after_within_the_session():
    turns = ["a", "b", "c", "d", "e"]
    assert neighbour_context(turns, 2, 1) == "b\nd"
    assert neighbour_context(turns, 2, 2) == "a\nb\nd\ne"
    assert neighbour_context(turns, 0, 2) == "b\nc"  # the session's first turn: only what follows
    assert neighbour_context(turns, 4, 1) == "d"
    assert neighbour_context(turns, 2, 0) is None
    assert neighbour_context(["only"], 0, 3) is None
