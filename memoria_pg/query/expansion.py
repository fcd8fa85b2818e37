"""Query expansion (optional, MEMORIA_ENABLE_QUERY_EXPANSION): adds related tokens for the lexical workers.

The original and expanded token sets are both kept in the query metadata; BM25 reads the expanded set,
the embedding still comes from the original text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.text import tokenize

# A small, conservative built-in lexicon of words people use interchangeably when asking about
# personal memories. Keys and values are tokenizer output (lower-cased, lightly stemmed).
LEXICON: Mapping[str, tuple[str, ...]] = {
    "job": ("work", "occupation", "career"),
    "work": ("job", "career"),
    "occupation": ("job", "work"),
    "live": ("home", "lived", "moved"),
    "home": ("live", "house"),
    "favourite": ("favorite", "love", "like"),
    "favorite": ("favourite", "love", "like"),
    "like": ("love", "enjoy"),
    "love": ("like", "enjoy"),
    "car": ("vehicle", "drive"),
    "kid": ("child", "children", "son", "daughter"),
    "child": ("kid", "son", "daughter"),
    "children": ("kid", "son", "daughter"),
    "wife": ("husband", "spouse", "partner", "married"),
    "husband": ("wife", "spouse", "partner", "married"),
    "partner": ("spouse", "wife", "husband"),
    "pet": ("dog", "cat"),
    "movie": ("film",),
    "film": ("movie",),
    "book": ("read", "novel"),
    "trip": ("travel", "vacation", "visit"),
    "travel": ("trip", "vacation", "visit"),
    "vacation": ("trip", "holiday", "travel"),
    "holiday": ("vacation", "trip"),
    "birthday": ("born", "birth"),
    "hobby": ("enjoy", "free", "time"),
    "sport": ("play", "game"),
    "music": ("song", "band", "listen"),
    "school": ("study", "college", "university"),
    "doctor": ("physician", "medical"),
    "sick": ("ill", "illness"),
}


class LexiconExpander:
    """Adds the lexicon's related tokens for each query token (never removes any)."""

    def __init__(self, lexicon: Mapping[str, Iterable[str]] = LEXICON) -> None:
        self.lexicon = {
            tokenize(k)[0] if tokenize(k) else k: tuple(t for v in vs for t in tokenize(v)) for k, vs in lexicon.items()
        }

    def __call__(self, tokens: list[str]) -> list[str]:
        seen = set(tokens)
        extra: list[str] = []
        for token in tokens:
            for related in self.lexicon.get(token, ()):
                if related not in seen:
                    seen.add(related)
                    extra.append(related)
        return extra
