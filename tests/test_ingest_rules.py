"""The ingest-time shortcuts of the rule-based extractors must not change what they extract.

extract_attributes skips a pattern when the text holds none of the words every match of that pattern
contains (entities._NEEDLES); these tests check the shortcut against the plain search of every
pattern over many generated sentences, and that each pattern's matches really contain its words.
No database needed.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

from memoria_pg.core import entities

SUBJECTS = ["Bob", "I", "Mary Jane", "José García", "Dr. Smith", "Alice's", "My", "my", "Bob’s", "we", "They"]
MIDDLES = [
    "has a dog named",
    "have a puppy called",
    "got a snake named",
    "dog's name is",
    "cat is called",
    "parrot",
    "hamster Rex is",
    "favourite colour is",
    "favorite food was",
    "boss is",
    "lives in",
    "lived in",
    "resides in",
    "is based in",
    "'m located in",
    "was living in",
    "moved to",
    "relocated to",
    "works as a",
    "worked as an",
    "is working as",
    "works at",
    "worked for",
    "'m working for",
    "is",
    "am",
    "'m",
    "is 30 years old",
    "was born on",
    "were born in",
    "was born in 1990 in",
    "comes from",
    "came from",
    "is from",
    "is married to",
    "really likes",
    "loves",
    "enjoys",
    "prefers",
    "prefer",
    "met",
    "and",
    "visited",
    "named",
    "called",
    "said that",
    "is 5 minutes away from",
]
OBJECTS = [
    "Rex",
    "Paris",
    "Bank of America",
    "blue",
    "42",
    "a nurse",
    "Acme",
    "March 3, 1990",
    "Zürich",
    "pizza and pasta",
    "her",
    "Oslo.",
    "Telefónica, now",
    "the dog",
    "30",
    "1990",
    "Tom.",
]


def sentences(n: int, seed: int = 3) -> list[str]:
    r = random.Random(seed)
    out = [f"{s} {m} {o}" for s, m, o in itertools.product(SUBJECTS, MIDDLES, OBJECTS[:6])]
    for _ in range(n):  # several clauses, odd joins and punctuation
        parts = [f"{r.choice(SUBJECTS)} {r.choice(MIDDLES)} {r.choice(OBJECTS)}" for _ in range(r.randint(1, 4))]
        out.append(r.choice([". ", ", ", " and ", "! ", "\n", "; "]).join(parts) + r.choice(["", ".", "?"]))
    return out


TEXTS = sentences(4000)


def plain_search(text: str, speaker: str | None) -> list[tuple[str, str, str]]:
    """extract_attributes with every pattern searched (no needle skips a pattern)."""
    always = re.compile("")
    saved = entities._COMPILED
    entities._COMPILED = [(p, a, always) for p, a, _ in saved]
    try:
        return entities.extract_attributes(text, speaker=speaker)
    finally:
        entities._COMPILED = saved


def test_the_generated_sentences_exercise_every_pattern():
    hits = {a: 0 for _, a, _ in entities._COMPILED}
    for text in TEXTS:
        for pattern, attribute, _ in entities._COMPILED:
            hits[attribute] += bool(pattern.search(text))
    assert all(n > 0 for n in hits.values()), hits


@pytest.mark.parametrize("speaker", [None, "Sam"])
def test_skipping_patterns_without_their_words_extracts_the_same(speaker):
    differences = [t for t in TEXTS if entities.extract_attributes(t, speaker=speaker) != plain_search(t, speaker)]
    assert differences == []
    assert sum(bool(entities.extract_attributes(t, speaker=speaker)) for t in TEXTS) > 1000


def test_every_match_of_a_pattern_contains_one_of_its_words():
    for pattern, attribute, needle in entities._COMPILED:
        for text in TEXTS:
            for m in pattern.finditer(text):
                assert needle.search(m.group()), (attribute, m.group())


def test_the_needles_follow_the_pattern_table():
    assert len(entities._NEEDLES) == len(entities.ATTRIBUTE_PATTERNS)
    assert [a for _, a, _ in entities._COMPILED] == [a for _, a in entities.ATTRIBUTE_PATTERNS]
