"""Issue 15, point 3: the linear-time extraction gives what the regular expressions it replaces gave.

Each linear piece is compared, over texts hypothesis builds from the characters and words the
patterns turn on, with the original (quadratic) formulation kept here as the reference: the value
expression, the attribute scan (finditer, any-overlap test), QUOTED.finditer and str.find.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memoria_pg.core import entities
from memoria_pg.query import processor
from tests.extraction_reference import attributes_with

# The value expression as it was: a lazy run of characters up to _VALUE_END, tested at every one.
ORIGINAL_VALUE = rf"(?P<value>[^.;!?\n\"“”]+?){entities._VALUE_END}"
ORIGINAL_PATTERNS = [
    (re.compile(pattern.replace(entities.VALUE, ORIGINAL_VALUE)), attribute)
    for pattern, attribute in entities.ATTRIBUTE_PATTERNS
]


def original_attributes(text: str, speaker: str | None) -> list[tuple[str, str, str]]:
    return attributes_with(ORIGINAL_PATTERNS, text, speaker)


def original_quoted(text: str) -> list[str]:
    spans = (next(g for g in m.groups() if g is not None).strip() for m in entities.QUOTED.finditer(text))
    return [s for s in spans if any(ch.isalnum() for ch in s)]


TOKENS = [
    "A", "Aa", "Bob", "I", "my", "My", "-", "'", "’", "'s", "’s", "'m", " ", "  ", "\t", "\n", ".", ",", ";", "!",
    "?", '"', "“", "”", "«", "»", "is", "am", "was", "named", "called", "dog", "lives", "in", "at", "works", "as",
    "a", "for", "born", "on", "from", "married", "to", "likes", "prefers", "and", "but", "5", "12", "years", "old",
    "x", "é", "É", "of", "the", "name", "job", "what", "where", "does", "live", "Jean", "Paul", "who", "has",
    "cat", "really", "moved", "based", "s", "1999", "'Aa",
]  # fmt: skip
texts = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
    st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join),
    st.text(max_size=60),
)
SETTINGS = settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@SETTINGS
@given(texts, st.sampled_from([None, "Sam"]))
def test_attributes_are_those_of_the_original_expressions(text: str, speaker: str | None) -> None:
    assert entities.extract_attributes(text, speaker) == original_attributes(text, speaker)


@SETTINGS
@given(texts)
def test_the_value_expression_matches_as_the_original(text: str) -> None:
    for (pattern, _, _), (original, _) in zip(entities._COMPILED, ORIGINAL_PATTERNS, strict=True):
        assert [(m.span(), m.groupdict()) for m in pattern.finditer(text)] == [
            (m.span(), m.groupdict()) for m in original.finditer(text)
        ]


@SETTINGS
@given(texts)
def test_skipping_starts_inside_a_word_finds_every_match(text: str) -> None:
    for pattern, _, _ in entities._COMPILED:
        assert [m.span() for m in entities.skipping_matches(pattern, text)] == [
            m.span() for m in pattern.finditer(text)
        ]


@SETTINGS
@given(texts)
def test_quoted_spans_are_those_of_quoted(text: str) -> None:
    assert entities.quoted_spans(text) == original_quoted(text)


@SETTINGS
@given(texts, st.lists(st.text(max_size=4), max_size=60))
def test_first_positions_are_str_find(text: str, extra: list[str]) -> None:
    needles = [text[i:j] for i in range(0, len(text), 2) for j in (i + 1, i + 3)] + extra
    assert entities.first_positions(text, needles) == {q: text.find(q) for q in needles}


def test_first_positions_by_hash_on_a_long_text() -> None:
    text = " ".join(f'"Aa{i:05d}" Aa{i % 7}' for i in range(3000))
    needles = entities.quoted_spans(text) + ["Aa3", "not there", "Aa02999", '" A']
    assert len(set(needles)) > entities.FIND_AT_MOST
    assert entities.first_positions(text, needles) == {q: text.find(q) for q in needles}


def test_long_hyphenated_words_take_the_skipping_scan() -> None:
    text = "x-" + "Aa-" * 50 + "Bob lives in Paris. Jean-Paul-My dog is Rex-Max's. " + "my-Bb-" * 20 + "my dog is Fido"
    assert entities.many_inner_starts(text)
    for pattern, _, _ in entities._COMPILED:
        assert [m.span() for m in entities.skipping_matches(pattern, text)] == [
            m.span() for m in pattern.finditer(text)
        ]
    assert entities.extract_attributes(text, "Sam") == original_attributes(text, "Sam")


ORIGINAL_POSS = rf"(?<![\w'’])(?P<subject>(?:{entities.CAP}[ \t]+){{0,2}}[^\W\d_][\w\-]*)['’]s"
ORIGINAL_QUESTIONS = [
    (re.compile(pattern.replace(processor._POSS, ORIGINAL_POSS)), attribute)
    for pattern, attribute in processor.QUESTION_PATTERNS
]


@SETTINGS
@given(texts)
def test_question_patterns_match_as_the_original_on_words_shorter_than_the_bound(text: str) -> None:
    """The possessive subject does not start MAX_WORD_DEPTH characters inside a word; the texts here
    have no such word, and every question shape matches where it did."""
    assume(re.search(rf"[\w\-'’]{{{processor.MAX_WORD_DEPTH}}}", text) is None)
    for (pattern, _), (original, _) in zip(processor._QUESTIONS, ORIGINAL_QUESTIONS, strict=True):
        assert [m.span() for m in processor._overlapping(pattern, text)] == [
            m.span() for m in processor._overlapping(original, text)
        ]
