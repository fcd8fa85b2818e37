"""The faster per-record preparation gives what the plain formulations it replaces gave.

Ingestion's `prepare` (and the query path) runs the entity and attribute extraction and the
tokenizer on every text; each speed-up there is checked against its plain definition, kept here as
the reference: the subject expressions of the attribute patterns (capital first, possessive runs),
the needles that skip a pattern on a text that cannot match it, whitespace normalization by
str.split, the stemmer, and dedupe_names.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoria_pg.core import entities, text
from memoria_pg.core.types import MemoryRecord
from memoria_pg.ingest.records import RecordRules, prepare
from tests.extraction_reference import attributes_with
from tests.test_migration_0021 import light_stem

# --- references: the definitions as they were ------------------------------------------------------

ORIGINAL_SUBJ = rf"(?<![\w'’])(?P<subject>{entities.NAME}|I)"
ORIGINAL_POSS = rf"(?<![\w'’])(?P<subject>{entities.NAME}['’]s|[Mm]y)"


def _original(pattern: str) -> str:
    replaced = pattern.replace(entities.SUBJ, ORIGINAL_SUBJ).replace(entities.POSS, ORIGINAL_POSS)
    assert replaced != pattern  # every pattern starts with a subject
    return replaced


ORIGINAL_PATTERNS = [(re.compile(_original(p)), a) for p, a in entities.ATTRIBUTE_PATTERNS]


def original_attributes(text: str, speaker: str | None) -> list[tuple[str, str, str]]:
    """extract_attributes with the original subjects, every pattern run on every text."""
    return attributes_with(ORIGINAL_PATTERNS, text, speaker)


def original_entity_key(name: str) -> str:
    words = entities._KEY_WORD.findall(name.casefold().replace("’", "'"))
    return " ".join(w[:-2] if w.endswith("'s") else w for w in words)


def original_normalize(value: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", value)).strip()


def original_stem(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def original_dedupe_names(names: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for name in names:
        clean = original_normalize(name)
        if clean and text.normalize_entity(clean) not in seen:
            seen[text.normalize_entity(clean)] = clean
    return list(seen.values())


# --- texts -----------------------------------------------------------------------------------------

TOKENS = [
    "A", "Aa", "Bob", "I", "my", "My", "-", "'", "’", "'s", "’s", "'m", "’m", " ", "  ", "\t", "\n", ".",
    ",", ";", "!", "?", '"', "“", "”", "«", "»", "is", "am", "are", "was", "were", "named", "called", "dog",
    "puppy", "cat", "has", "have", "got", "an", "a", "lives", "live", "lived", "resides", "in", "at", "works",
    "worked", "working", "as", "for", "born", "on", "from", "comes", "came", "married", "to", "likes", "loves",
    "enjoys", "really", "prefers", "moved", "relocated", "based", "located", "living", "and", "but", "5",
    "12", "1999", "٣", "years", "old", "x", "é", "É", "Émile", "Zürich", "Ω", "of", "the", "The", "name",
    "job", "favourite", "colour", "Jean", "Paul", "O'Brien", "Bank", "America", "Dr", "Mr", "who", "s",
    "'Aa", "mMy", "_", "3M",
]  # fmt: skip
# Pieces of the sentences the patterns look for, so that random texts often match one.
PHRASES = [
    "I", "Bob", "Jean Paul", "Émile", "My", "my", "Bob's", "O'Brien’s", "I'm", "I’m", "dog", "cat", "puppy",
    "has a", "have an", "got a", "named", "called", "dog's name", "is", "am", "was", "were", "live in",
    "lives in", "lived in", "resides in", "based in", "located in", "living in", "moved to", "relocated to",
    "works as", "worked at", "working for", "work as a", "born on", "born in", "from", "comes from",
    "came from", "married to", "really likes", "like", "loves", "enjoys", "prefers", "30", "1999", "٣٠",
    "years old", "Paris", "Rex", "a dentist", "favourite colour", "job", ".", ",", ";", "and", "but", "\n",
    "-", "x-", "'", "the", "The", "of", "Bank", "mary's", "mom’s", "Ay", "my's", "Bob has a dog named Rex",
    "I have a turtle called Tom", "My cat is called Tom", "Bob's parrot's name is Polly", "Bob's hamster Rex",
    "my puppy Fido", "Ann’s job is nurse", "Ay dog Rex", "Ky job is cook", "Bob is 30 years old", "I'm ٣٠", "Bob was born in 1990",
]  # fmt: skip
texts = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
    st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join),
    st.lists(st.sampled_from(PHRASES), max_size=20).map(" ".join),
    st.tuples(st.sampled_from([" ", "\t", "  ", "-", ""]), st.lists(st.sampled_from(PHRASES), max_size=20)).map(
        lambda sep_words: sep_words[0].join(sep_words[1])
    ),
    st.text(max_size=60),
)
SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


# --- attribute patterns ------------------------------------------------------------------------------


@SETTINGS
@given(texts)
def test_subjects_match_as_the_original_expressions(value: str) -> None:
    for (pattern, _, _), (original, _) in zip(entities._COMPILED, ORIGINAL_PATTERNS, strict=True):
        assert [(m.span(), m.groupdict()) for m in pattern.finditer(value)] == [
            (m.span(), m.groupdict()) for m in original.finditer(value)
        ]
        # also from inside the text, where the lookbehind looks at a character before the start
        for start in (1, 2):
            assert [m.span() for m in pattern.finditer(value, start)] == [
                m.span() for m in original.finditer(value, start)
            ]


@SETTINGS
@given(texts)
def test_a_text_a_pattern_matches_holds_its_needles(value: str) -> None:
    for (_, _, needles), (original, _) in zip(entities._COMPILED, ORIGINAL_PATTERNS, strict=True):
        for m in original.finditer(value):
            assert needles.search(value) and needles.search(m.group()), (m.group(), needles.needles)


@SETTINGS
@given(texts)
def test_a_needle_is_the_regular_expression_it_reads_as(value: str) -> None:
    for needle in {needle for needles in entities._NEEDLES for needle in needles}:
        expected = re.search(needle, value) is not None  # "word|word" or "\\d"
        assert entities._contains(needle)(value) == expected


@SETTINGS
@given(texts, st.sampled_from([None, "Sam"]))
def test_attributes_are_those_of_every_original_pattern_on_every_text(value: str, speaker: str | None) -> None:
    assert entities.extract_attributes(value, speaker) == original_attributes(value, speaker)


@pytest.mark.parametrize(
    "value, speaker, expected",
    [
        ("Bob lives in Paris.", None, [("Bob", "location", "Paris")]),
        ("I'm 30 years old.", "Sam", [("Sam", "age", "30")]),
        ("I am ٣٠ now.", "Sam", []),  # a digit of another script: the needle still lets the pattern run
        ("Alice’s favourite colour is blue.", None, [("Alice", "favourite colour", "blue")]),
        ("O'Brien's dog Rex barked.", None, [("O'Brien", "dog name", "Rex")]),
        ("My dog is called Rex.", "Sam", [("Sam", "dog name", "Rex")]),
        ("Émile lives in Zürich.", None, [("Émile", "location", "Zürich")]),
        ("Jean Paul Sartre comes from Paris.", None, [("Jean Paul Sartre", "hometown", "Paris")]),
        ("xBob lives in Paris.", None, []),  # a capital inside a word starts no subject
        ("-Bob lives in Paris.", None, [("Bob", "location", "Paris")]),
        ("'Bob lives in Paris.", None, []),
        ("The Bank of America is based in Charlotte.", None, [("America", "location", "Charlotte")]),
    ],
)
def test_attribute_cases(value: str, speaker: str | None, expected: list[tuple[str, str, str]]) -> None:
    assert entities.extract_attributes(value, speaker) == expected == original_attributes(value, speaker)


def test_every_pattern_has_a_text_it_matches_that_holds_its_needles() -> None:
    examples = [
        "Bob has a dog named Rex.",
        "My dog's name is called Rex.",
        "Bob's dog Rex barked.",
        "Bob's job is dentist.",
        "Bob lives in Paris.",
        "Bob moved to Paris.",
        "Bob works as a dentist.",
        "Bob works at Acme.",
        "Bob is 30 years old.",
        "Bob was born on May 1.",
        "Bob was born in 1990.",
        "Bob was born in Lyon.",
        "Bob comes from Lyon.",
        "Bob is married to Ann.",
        "Bob likes tea.",
        "Bob prefers tea.",
    ]
    for (pattern, _, needles), example in zip(entities._COMPILED, examples, strict=True):
        assert pattern.search(example), example
        assert needles.search(example), example


def test_long_text_with_many_capitals_and_hyphens() -> None:
    value = (
        "The Bank of America said. " * 50
        + "x-" * 30
        + "Aa-Bb-" * 40
        + "Bob lives in Paris. Jean-Paul-My dog is Rex. my-Cc-" * 10
        + "I'm 42. Zoë’s favourite colour is green. "
    )
    assert entities.extract_attributes(value, "Sam") == original_attributes(value, "Sam")


def test_attributes_on_real_abstracts(eval_data) -> None:
    from evals import beir

    for document in beir.load(eval_data("scifact"), "scifact").documents[:300]:
        assert entities.extract_attributes(document.content) == original_attributes(document.content, None)


# --- text ----------------------------------------------------------------------------------------------


def test_str_split_whitespace_is_re_whitespace() -> None:
    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    assert re.findall(r"\s", every) == [ch for ch in every if ch.isspace()]
    assert "".join(every.split()) == re.sub(r"\s", "", every)


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(
    st.text(
        st.sampled_from([" ", "\t", "\n", "\r", "\x0b", "\x1c", "\x85", "\xa0", "\u2003", "\u3000", "a", "É", "ﬁ", "①"])
    )
)
def test_normalize_is_the_regular_expression(value: str) -> None:
    assert text.normalize(value) == original_normalize(value)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.text())
def test_normalize_on_any_text(value: str) -> None:
    assert text.normalize(value) == original_normalize(value)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.text(st.sampled_from("aeisuy'ß"), max_size=8))
def test_the_downgrades_stem_is_the_original(token: str) -> None:
    # Migration 0021's downgrade derives the postings again with the stemmer the tokenizer had before.
    assert light_stem()(token) == original_stem(token)


@pytest.mark.parametrize(
    "token, stem",
    [("dogs", "dog"), ("cities", "city"), ("ties", "tie"), ("boss", "boss"), ("virus", "virus"), ("axis", "axis"),
     ("bus", "bus"), ("is", "is"), ("cats", "cat"), ("cat", "cat"), ("s", "s"), ("", "")],
)  # fmt: skip
def test_light_stem_cases(token: str, stem: str) -> None:
    assert light_stem()(token) == stem == original_stem(token)


@pytest.mark.parametrize(
    "token, stem",
    [("dogs", "dog"), ("cities", "citi"), ("city", "citi"), ("painting", "paint"), ("painted", "paint"),
     ("hiking", "hike"), ("hike", "hike"), ("boss", "boss"), ("running", "run"), ("2023", "2023"), ("", "")],
)  # fmt: skip
def test_stem_cases(token: str, stem: str) -> None:
    assert text._stem(token) == stem  # Snowball English (Porter 2)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.lists(
        st.lists(st.sampled_from(["Bob", "bob", " ", "\t", "\n", "Ann", "’", "'", "ﬁ", "É"]), max_size=6).map("".join)
    )
)
def test_dedupe_names_is_the_original(names: list[str]) -> None:
    assert text.dedupe_names(names) == original_dedupe_names(names)


# --- entities and prepare --------------------------------------------------------------------------------


@SETTINGS
@given(texts)
def test_entities_are_deterministic_and_in_the_text(value: str) -> None:
    found = entities.extract_entities(value)
    assert found == entities.extract_entities(value)
    assert all(name.casefold() in value.casefold() for name in found)
    assert len({entities.entity_key(name) for name in found}) == len(found)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("She works at the Bank of America.", ["Bank of America"]),
        ("The weather was nice. Yesterday I saw Carol.", ["Carol"]),
        ('He read "War and Peace" and “Dune” twice.', ["War and Peace", "War", "Peace", "Dune"]),
        ("Dr. Smith met O'Brien and Zoë in Zürich.", ["Smith", "O'Brien", "Zoë", "Zürich"]),
    ],
)
def test_entity_cases(value: str, expected: list[str]) -> None:
    assert entities.extract_entities(value) == expected


@SETTINGS
@given(texts)
def test_entity_key_is_the_original(value: str) -> None:
    assert entities.entity_key(value) == original_entity_key(value)


@pytest.mark.parametrize(
    "name, key",
    [("Alice's", "alice"), ("Alice’s", "alice"), ("O'Brien", "o'brien"), ("St. James's Park", "st james park"),
     ("AT&T", "at&t"), ("İstanbul", "i stanbul"), ("'s", "s"), ("", "")],
)  # fmt: skip
def test_entity_key_cases(name: str, key: str) -> None:
    assert entities.entity_key(name) == key == original_entity_key(name)


RULES = RecordRules(
    memory_types=("semantic", "episodic"), default_type="semantic", default_tenant="t", dim=4, max_chars=100_000
)


def test_prepare_derives_postings_entities_and_attributes() -> None:
    now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    record = MemoryRecord(
        content="Bob lives in  Paris.\nHe works at the Bank of America; Bob's dogs are called Rex.",
        metadata={"speaker": "Ann"},
        context="Where does Bob live?",
    )
    prepared = prepare(record, "record 1", now, RULES)
    assert prepared.entities == ["Ann", "Bob", "Paris", "Bank of America", "Rex"]  # "He" starts a sentence
    assert prepared.attributes == [("Bob", "location", "Paris"), ("Bob", "dogs", "called Rex")]
    assert prepared.terms["bob"] == 2 * 2 + 1 and prepared.terms["dog"] == 2
    assert prepared.doc_len == 2 * len(text.tokenize(record.content)) + len(text.tokenize("Where does Bob live?"))
    same = "Bob lives in Paris. He works at the Bank of America; Bob's dogs are called Rex."  # normalized
    assert prepared.dedup_key == f"sha256:{text.content_hash(same)}"
    assert prepared.dedup_key == "sha256:2e59b0c1bab03956efb666c965850a0da1ff5b0e42e068f26a9f34c1b855c08f"
