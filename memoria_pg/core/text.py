"""Text normalization and the tokenizer shared by ingestion (BM25 postings) and queries."""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable

import Stemmer

# Short English stopword list: removing the commonest function words keeps BM25 posting lists short
# without hurting recall (they carry almost no IDF).
STOPWORDS = frozenset(
    """a an and are as at be been but by did do does for from had has have he her him his i if in
    into is it its me my of on or our she so than that the their them then there these they this
    those to was we were what when where which who whom why will with would you your""".split()
)

# Index entries are bounded: a b-tree entry holds at most 2,704 bytes, beside the tenant (at most 200
# characters, 800 bytes). Every text that is part of an index key beside the tenant (a BM25 term, an
# entity's normalized name, an attribute's subject, an external id) is bounded by MAX_KEY_BYTES.
MAX_KEY_BYTES = 1000
# A BM25 term keeps its first MAX_TERM_CHARS characters (at most 800 bytes): a longer run of letters
# without spaces or punctuation (a hex blob, a DNA sequence, CJK text) is one term, cut at this length,
# the same way in a memory and in a query, so the same run still matches itself.
MAX_TERM_CHARS = 200
MAX_NAME_CHARS = 200  # an entity name, after normalization (normalize_entity)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_POSSESSIVE = re.compile(r"'s(?=\s|$)")


def normalize(text: str) -> str:
    """NFKC, whitespace collapsed, stripped; case kept (entity recognition needs it)."""
    # str.split() splits at the characters re's \s matches (str.isspace), and drops the ends.
    return " ".join(unicodedata.normalize("NFKC", text).split())


# The BM25 terms are Snowball (Porter 2) English stems: "painting", "painted" and "paints" are one
# term, "hiking" and "hike", "cities" and "city". Before migration 0021 a light plural stemmer ("dogs"
# -> "dog", nothing else); the Snowball stems won or tied every dev set's main metric (docs/measurements.md,
# "Why these defaults", which also says the one figure that fell).
# PyStemmer's Stemmer is not safe to share between threads: one per thread.
_STEMMERS = threading.local()


def _stem(token: str) -> str:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    stem: str = stemmer.stemWord(token)
    return stem


def tokenize(text: str, *, stem: Callable[[str], str] | None = None) -> list[str]:
    """Lower-cased word tokens minus stopwords, stemmed (Snowball English, or `stem`); the BM25
    vocabulary. A token is cut at MAX_TERM_CHARS characters before it is stemmed."""
    stem = stem or _stem
    folded = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    # Possessive 's before any whitespace or the end: ingestion tokenizes raw content, queries
    # their normalized text, and both must give "boss's\nbook" and "boss's book" the same tokens.
    folded = _POSSESSIVE.sub(" ", folded).replace("'", "")
    return [stem(t[:MAX_TERM_CHARS]) for t in _TOKEN.findall(folded) if t not in STOPWORDS]


# A memory stored with a context (the turns before it in a conversation, a document's title...) is
# indexed as a two-field document, BM25F style: its own words count CONTENT_WEIGHT times, the
# context's once. The context makes a short turn findable by what it answers ("They're a real
# support" after "How is your family?"), and the weight keeps the memory's own words first.
# The weight was chosen on the LoCoMo dev set (docs/measurements.md, "Why these defaults").
CONTENT_WEIGHT = 2


def indexed_tokens(content: str, context: str | None = None, *, stem: Callable[[str], str] | None = None) -> list[str]:
    """The tokens BM25 indexes for a memory: the content's (CONTENT_WEIGHT times when there is a
    context) followed by the context's."""
    tokens = tokenize(content, stem=stem)
    if not context:
        return tokens
    return tokens * CONTENT_WEIGHT + tokenize(context, stem=stem)


def indexed_term_counts(
    content: str, context: str | None = None, *, stem: Callable[[str], str] | None = None
) -> tuple[Counter[str], int]:
    """(term frequencies, document length) of indexed_tokens: a memory's BM25 postings."""
    tokens = indexed_tokens(content, context, stem=stem)
    return Counter(tokens), len(tokens)


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()


def normalize_entity(name: str) -> str:
    """The key an entity is stored and looked up by: normalized, case-folded, one apostrophe."""
    return " ".join(normalize(name).casefold().replace("\u2019", "'").split())


def dedupe_names(names: Iterable[str]) -> list[str]:
    """Normalized names, the first spelling of each normalize_entity key, in order."""
    seen: dict[str, str] = {}
    for name in names:
        clean = normalize(name)
        if clean:
            seen.setdefault(normalize_entity(clean), clean)
    return list(seen.values())


def indexable_key(text: str) -> bool:
    """Whether `text` fits an index key beside the tenant (at most MAX_KEY_BYTES in UTF-8)."""
    return len(text) * 4 <= MAX_KEY_BYTES or len(text.encode("utf-8")) <= MAX_KEY_BYTES


def indexable_name(name: str) -> bool:
    """Whether an entity name can be stored: its key (normalize_entity) is at most MAX_NAME_CHARS
    characters and MAX_KEY_BYTES bytes (NFKC may lengthen a name: one character can become 18)."""
    key = normalize_entity(name)
    return len(key) <= MAX_NAME_CHARS and indexable_key(key)
