"""QueryProcessor: the query text -> ProcessedQuery every later stage of the retrieval path reads.

Rules only, no model: the memory-type hint from cue phrases, entities and phrases from
`entities`, subject/attribute from a table of question patterns. An optional `entity_lookup`
(the entity table) confirms lower-case mentions ("where does bob live") and gives names their
stored spelling. Queries are validated here, once, at the boundary.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator

import psycopg

from ..core import validation
from ..core.entities import (
    CAP,
    FIRST_PERSON,
    STARTERS,
    canonical_attribute,
    entity_key,
    extract_entities,
    quoted_spans,
    resolve_subject,
)
from ..core.text import STOPWORDS, normalize, normalize_entity, tokenize
from ..core.types import ProcessedQuery
from ..db import load_sql
from ..db.arrays import text_array

EntityLookup = Callable[[list[str]], list[str]]
Expander = Callable[[list[str]], list[str]]

# First cue that fires wins, so the more specific types come first. Conservative on purpose: a hint
# restricts candidates to its type (type filtering), so a false hint costs more than a missing one.
MEMORY_TYPE_CUES: tuple[tuple[str, str], ...] = (
    (
        "procedural",
        r"\bhow (?:do|can|should|would|did) (?:i|we|you|one)\b|\bhow to\b|\bsteps? (?:to|for)\b"
        r"|\binstructions? (?:to|for)\b|\bprocedure\b|\brecipe for\b",
    ),
    (
        "episodic",
        r"\bwhen did\b|\byesterday\b|\blast (?:week|weekend|month|year|night|time)\b"
        r"|\bremember when\b|\bdo you remember\b|\bwhat happened\b|\b\w+ (?:days|weeks|years) ago\b"
        r"|\bthe other day\b|\bthis morning\b|\bearlier today\b",
    ),
    (
        "preference",
        r"\bprefer(?:s|red|ence|ences)?\b|\bfavou?rites?\b|\bfaves?\b|\bdislikes?\b"
        r"|\b(?:i|you|they|we) (?:really )?(?:like|love|enjoy|hate)\b|\b\w+ (?:likes|loves|enjoys|hates)\b"
        r"|\b(?:do|does|did|would) [\w-]+ (?:really )?(?:like|love|enjoy|hate)\b",
    ),
    ("semantic", r"\bdefin(?:e|ition of)\b|\bmeaning of\b|\bwhat does [\w-]+ mean\b"),
)
_CUES = [(t, re.compile(p)) for t, p in MEMORY_TYPE_CUES]

# Question shapes naming a subject and one of its attributes. {S} is the subject slot (any case: the
# shape fixes where it stands); an attribute of None takes the pattern's `attribute` group, and
# "{phrase}" is the free-form attribute phrase, cut before the first word of _ATTR_STOP.
_S = r"(?P<subject>[^\W\d_][\w\-]*(?:[ \t]+[^\W\d_][\w\-]*){0,2}?)"
# A possessive's subject does not start MAX_WORD_DEPTH characters or more inside a word: each start
# (after every hyphen of "Aa-Bb-Cc-...") rescans the rest of the word, so a long hyphenated word would
# cost the square of its length; with the bound it costs at most MAX_WORD_DEPTH / 2 scans of it. The
# subjects a question names are words far shorter than that.
MAX_WORD_DEPTH = 64
_POSS = rf"(?<![\w'’])(?<![\w\-'’]{{{MAX_WORD_DEPTH}}})(?P<subject>(?:{CAP}[ \t]+){{0,2}}[^\W\d_][\w\-]*)['’]s"
_A = r"(?P<phrase>[^\W\d_]+(?:['’]s)?(?:[ \t]+[^\W\d_]+(?:['’]s)?){0,2})"
QUESTION_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (rf"(?i:\bwhat(?:['’]s|[ \t]+is|[ \t]+was)[ \t]+the[ \t]+name[ \t]+of[ \t]+){_POSS}[ \t]+{_A}", "{phrase} name"),
    (rf"(?i)\bwhere[ \t]+(?:does|did|do)[ \t]+{_S}[ \t]+(?P<attribute>live|work|come from|reside|stay)\b", None),
    (rf"(?i)\bwhere[ \t]+(?:is|was|are)[ \t]+{_S}[ \t]+(?P<attribute>from|based|located|living|working)\b", None),
    (rf"(?i)\bwhere[ \t]+(?:was|were)[ \t]+{_S}[ \t]+born\b", "birthplace"),
    (rf"(?i)\bwhen[ \t]+(?:was|were)[ \t]+{_S}[ \t]+born\b", "birthday"),
    (rf"(?i)\bhow[ \t]+old[ \t]+(?:is|was|are)[ \t]+{_S}(?=[ \t]*(?:[?.!]|$))", "age"),
    (rf"(?i)\bwho[ \t]+(?:does|did|do)[ \t]+{_S}[ \t]+work[ \t]+for\b", "employer"),
    (rf"(?i)\bwhat[ \t]+(?:does|did|do)[ \t]+{_S}[ \t]+do[ \t]+for[ \t]+(?:a[ \t]+)?(?:living|work)\b", "occupation"),
    (rf"(?i)\bwho[ \t]+(?:is|was|are)[ \t]+{_S}[ \t]+married[ \t]+to\b", "spouse"),
    (rf"(?i)\bwhat[ \t]+(?:does|did|do)[ \t]+{_S}[ \t]+(?P<attribute>like|love|enjoy|prefer)\b", None),
    (rf"{_POSS}[ \t]+{_A}", "{phrase}"),
    (
        rf"(?i)\b(?:what|who|where|when|which)(?:['’]s|[ \t]+(?:is|was|are|were))[ \t]+(?P<subject>my)[ \t]+{_A}",
        "{phrase}",
    ),
)
_QUESTIONS = [(re.compile(p), a) for p, a in QUESTION_PATTERNS]
# An attribute phrase ends before these: "Alice's job at Acme" asks about "job".
_ATTR_STOP = STOPWORDS | {
    "now",
    "currently",
    "again",
    "today",
    "live",
    "lives",
    "work",
    "works",
    "like",
    "likes",
    "right",
    "these",
    "days",
    "exactly",
    "called",
    "named",
}
_PRONOUNS = FIRST_PERSON | {
    "he",
    "she",
    "it",
    "they",
    "you",
    "we",
    "his",
    "her",
    "their",
    "your",
    "our",
    "this",
    "that",
    "there",
    "someone",
    "anyone",
    "everyone",
    "people",
}
_NGRAM_WORD = re.compile(r"\w+(?:['&.\-]\w+)*")


class QueryProcessor:
    """Turns query text into a ProcessedQuery; raises InputError for a query it cannot accept."""

    def __init__(
        self,
        memory_types: Collection[str],
        entity_lookup: EntityLookup | None = None,
        *,
        max_chars: int = 4000,
        expander: Expander | None = None,
    ) -> None:
        self.memory_types = tuple(memory_types)
        self.entity_lookup = entity_lookup
        self.max_chars = max_chars
        self.expander = expander

    def process(
        self, text: str, tenant: str, memory_type: str | None = None, *, speaker: str | None = None
    ) -> ProcessedQuery:
        """Validate and analyse a query; `speaker` is who "I"/"my" in the query means."""
        self._validate(text, tenant, memory_type)
        normalized = normalize(text)
        original = tokenize(normalized)
        expanded = list(dict.fromkeys(original + list(self.expander(original)))) if self.expander else original
        known = self.entity_lookup(candidate_ngrams(normalized)) if self.entity_lookup else []
        quoted = quoted_spans(normalized)
        entities = _merge(extract_entities(normalized, known), quoted)
        subject, attribute = subject_attribute(normalized, speaker)
        if subject is not None:
            spelled = {entity_key(e): e for e in entities}
            subject = spelled.get(entity_key(subject), subject)
            entities = _merge(entities, [subject])
        return ProcessedQuery(
            text=text,
            normalized=normalized,
            tokens=list(expanded),
            tenant=tenant,
            memory_type_hint=memory_type or self.hint(normalized),
            entities=entities,
            phrases=_merge(quoted, [e for e in entities if len(e.split()) > 1]),
            subject=subject,
            attribute=attribute,
            # copies: a later expansion stage may extend query.tokens in place
            metadata={"original_tokens": list(original), "expanded_tokens": list(expanded)},
        )

    def hint(self, normalized: str) -> str | None:
        """The first memory type (of those configured) whose cue appears in the query."""
        folded = normalized.casefold().replace("’", "'")
        return next((t for t, cue in _CUES if t in self.memory_types and cue.search(folded)), None)

    def _validate(self, text: str, tenant: str, memory_type: str | None) -> None:
        validation.query_text(text, self.max_chars)
        validation.tenant(tenant)
        validation.memory_type(memory_type, self.memory_types)


class TableLookup:
    """An EntityLookup over the entity table of `conn`'s transaction's tenant (the stored names of the
    n-grams that are known entities), which reads the tenant's memories per memory type in the same
    statement (sql/query_lookup.sql): `rows` holds them once it has run, else None (a query without
    n-grams looks nothing up; the caller then reads them alone, shards.tenant_rows)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.rows: dict[str, int] | None = None

    def __call__(self, grams: list[str]) -> list[str]:
        if not grams:
            return []
        norms = text_array([normalize_entity(g) for g in grams])  # a literal: db/arrays.py
        found = self.conn.execute(load_sql("query_lookup"), {"norms": norms}).fetchall()
        self.rows = {name: int(n) for kind, name, n in found if kind == "rows"}
        return [name for kind, name, _ in found if kind == "entity"]


class PrefetchedLookup:
    """An EntityLookup that already has the answer for `grams` (V3 reads it in its one statement:
    candidates.build_v3_candidates): it answers those n-grams with `names`, and asks `fallback`
    (a TableLookup in the same transaction) for any others, or when `names` is None (not read)."""

    def __init__(self, grams: list[str], names: list[str] | None, fallback: EntityLookup) -> None:
        self.grams, self.names, self.fallback = list(grams), names, fallback

    def __call__(self, grams: list[str]) -> list[str]:
        if not grams:
            return []
        if self.names is not None and list(grams) == self.grams:
            return list(self.names)
        return self.fallback(grams)


def subject_attribute(text: str, speaker: str | None = None) -> tuple[str | None, str | None]:
    """(subject, canonical attribute) from the first QUESTION_PATTERNS shape that fits, else Nones."""
    for pattern, attribute in _QUESTIONS:
        for m in _overlapping(pattern, text):
            first = m.group("subject").split()[0].casefold()
            if first in (_PRONOUNS | STARTERS) - FIRST_PERSON:
                continue
            subject = resolve_subject(m.group("subject"), speaker)
            groups = m.groupdict()
            phrase = _trim_attribute(groups.get("phrase") or "")
            name = (attribute or "{attribute}").format(attribute=groups.get("attribute") or "", phrase=phrase)
            if subject and name.strip() and (phrase or "{phrase}" not in (attribute or "")):
                return subject, canonical_attribute(name)
    return None, None


def _overlapping(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    # A rejected match ("What's ...") must not hide one starting inside it ("Alice's ...").
    m = pattern.search(text)
    while m is not None:
        yield m
        m = pattern.search(text, m.start() + 1)


def _trim_attribute(phrase: str) -> str:
    words = phrase.split()
    for i, word in enumerate(words):
        if re.sub(r"['’]s$", "", word.casefold()) in _ATTR_STOP:
            return " ".join(words[:i])
    return phrase


def candidate_ngrams(text: str, max_n: int = 3) -> list[str]:
    """Lower-cased 1..max_n word n-grams worth asking the entity table about, in text order."""
    words = [re.sub(r"'s$", "", w) for w in _NGRAM_WORD.findall(text.casefold().replace("’", "'"))]
    grams: dict[str, None] = {}
    for i in range(len(words)):
        for n in range(1, max_n + 1):
            gram = words[i : i + n]
            if len(gram) < n or gram[-1] in STOPWORDS or (gram[0] in STOPWORDS and gram[0] != "the"):
                continue
            if n == 1 and gram[0] == "the":
                continue
            grams.setdefault(" ".join(gram), None)
    return list(grams)


def _merge(first: list[str], more: list[str]) -> list[str]:
    """The items of `first`, then of `more`, each once (by entity_key): a quoted phrase may repeat."""
    merged: list[str] = []
    keys: set[str] = set()
    for item in [*first, *more]:
        key = entity_key(item) or item
        if key not in keys:
            keys.add(key)
            merged.append(item)
    return merged
