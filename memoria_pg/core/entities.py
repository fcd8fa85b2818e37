"""Rule-based entity and attribute extraction: offline, no model, shared by ingestion and queries.

Entities are capitalized words and multi-word names ("New York", "Bank of America"), quoted names,
and known names (the entity table) found case-insensitively. Attributes are (subject, attribute,
value) triples from a table of sentence patterns. `canonical_attribute` is the one attribute
vocabulary: the query side maps "where does Bob live" to the "location" that "Bob lives in Paris"
stored. Better extractors plug in through the `EntityExtractor` protocol.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Protocol


def _char_class(pred: Callable[[str], bool]) -> str:
    # Python's re has no \p{Lu}: build the class from Latin, Greek, Cyrillic and Latin Extended
    # Additional, which covers the names European-language memories contain.
    chars = [chr(c) for lo, hi in ((0x41, 0x530), (0x1E00, 0x2000)) for c in range(lo, hi)]
    return "".join(re.escape(ch) for ch in chars if pred(ch))


UPPER = _char_class(str.isupper)
CAP = rf"[{UPPER}][\w\-]*(?:['’](?!s\b)[\w\-]+)*"  # "O'Brien" is a word, "Alice's" is not
NAME = rf"{CAP}(?:[ \t]+{CAP}){{0,2}}"
WORD = re.compile(r"[^\W\d_][\w\-]*(?:['’](?!s\b)[\w\-]+)*")
_KEY_WORD = re.compile(r"\w+(?:['&.\-]\w+)*")

# Capitalized only because they start a sentence (or a question), never names there.
STARTERS = frozenset(
    """a an the i i'm i've i'd i'll my me we our you your he she it they his her its
their this that these those what when where which who whom whose why how is are was were do does did
can could should would will shall might must have has had if then so and but or also yes no ok okay
hey hi hello oh well please thanks thank sure tell show find list give remind remember let lets
today yesterday tomorrow tonight last next every after before during since until while there here
mr mrs ms dr prof sir""".split()
)
# Never a name on their own, wherever they stand: dates make huge graph hubs and carry no identity.
NEVER_NAMES = frozenset(
    """i monday tuesday wednesday thursday friday saturday sunday january
february march april may june july august september october november december""".split()
)
TITLES = frozenset({"mr", "mrs", "ms", "dr", "prof", "sir"})
CONNECTORS = frozenset({"of", "de", "da", "del", "der", "van", "von", "la", "le", "du", "di", "bin"})
FIRST_PERSON = frozenset({"i", "me", "my", "mine"})

QUOTED = re.compile(r'"([^"\n]{1,200})"|“([^”\n]{1,200})”|«\s*([^»\n]{1,200}?)\s*»')
MAX_NAME_WORDS = 6


class EntityExtractor(Protocol):
    def extract(self, text: str, known: Iterable[str] = ()) -> list[str]: ...


def quoted_spans(text: str) -> list[str]:
    """Text between double quotes (straight, curly or guillemets), stripped, in order."""
    spans = (next(g for g in m.groups() if g is not None).strip() for m in QUOTED.finditer(text))
    return [s for s in spans if any(ch.isalnum() for ch in s)]


def capitalized_names(text: str) -> list[str]:
    """Runs of capitalized words, minus sentence-initial STARTERS, titles and NEVER_NAMES."""
    return [name for _, name in _capitalized(text)]


_SENTENCE_GAP = re.compile(r"[.!?:\n\"“«]")  # between two words: the second may start a sentence


def _capitalized(text: str) -> list[tuple[int, str]]:
    words = list(WORD.finditer(text))
    names: list[tuple[int, str]] = []
    run: list[re.Match[str]] = []
    for i, m in enumerate(words):
        word = m.group()
        key = word.casefold()
        if not word[0].isupper() and key not in CONNECTORS:  # most words: the end of any run
            if run:
                _close(run, text, names)
                run = []
            continue
        gap = text[words[i - 1].end() : m.start()] if i else text[: m.start()]
        initial = i == 0 or (
            bool(_SENTENCE_GAP.search(gap)) and not (words[i - 1].group().casefold() in TITLES and gap.strip() == ".")
        )
        joined = bool(run) and not initial and gap in (" ", "\t")
        capital = word[0].isupper() and key not in NEVER_NAMES and key not in TITLES
        if capital and not (initial and key in STARTERS):
            if not joined:
                _close(run, text, names)
                run = []
            run.append(m)
        elif joined and key in CONNECTORS and _next_capital(words, i, text):
            run.append(m)
        else:
            _close(run, text, names)
            run = []
    _close(run, text, names)
    return names


def _next_capital(words: list[re.Match[str]], i: int, text: str) -> bool:
    return (
        i + 1 < len(words) and words[i + 1].group()[0].isupper() and text[words[i].end() : words[i + 1].start()] == " "
    )


def _close(run: list[re.Match[str]], text: str, names: list[tuple[int, str]]) -> None:
    if run and len(run) <= MAX_NAME_WORDS:
        names.append((run[0].start(), text[run[0].start() : run[-1].end()]))


def entity_key(name: str) -> str:
    """Case- and punctuation-insensitive form used to compare names."""
    words = _KEY_WORD.findall(name.casefold().replace("’", "'"))
    return " ".join(w[:-2] if w.endswith("'s") else w for w in words)


def known_mentions(text: str, known: Iterable[str]) -> list[tuple[int, str]]:
    """(position, known spelling) of every known name in `text`, longest match first."""
    by_key: dict[str, str] = {}
    for name in known:
        key = entity_key(name)
        if key:
            by_key.setdefault(key, name)
    if not by_key:
        return []
    longest = min(max(k.count(" ") + 1 for k in by_key), 8)
    words = [(m.start(), entity_key(m.group())) for m in _KEY_WORD.finditer(text.replace("’", "'"))]
    found: list[tuple[int, str]] = []
    i = 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 0, -1):
            match = by_key.get(" ".join(w for _, w in words[i : i + n]))
            if match is not None:
                found.append((words[i][0], match))
                i += n
                break
        else:
            i += 1
    return found


def extract_entities(text: str, known: Iterable[str] = ()) -> list[str]:
    """Known names, quoted names and capitalized names in text order, deduplicated by entity_key."""
    known = list(known)
    spelling = {entity_key(k): k for k in reversed(known)}
    quoted = [
        (text.find(q), q)
        for q in quoted_spans(text)
        if _first_letter_upper(q) and len(q.split()) <= MAX_NAME_WORDS and len(q) <= 80
    ]
    found = known_mentions(text, known) + quoted + _capitalized(text)
    found.sort(key=lambda item: item[0])  # stable: a known spelling beats a rule at one position
    result: dict[str, str] = {}
    for _, name in found:
        key = entity_key(name)
        if key and key not in result:
            result[key] = spelling.get(key, name)
    return list(result.values())


def _first_letter_upper(text: str) -> bool:
    return next((ch.isupper() for ch in text if ch.isalpha()), False)


class RuleBasedExtractor:
    """The default EntityExtractor; also callable as `extractor(text)`."""

    def extract(self, text: str, known: Iterable[str] = ()) -> list[str]:
        return extract_entities(text, known)

    __call__ = extract


# --- attributes -----------------------------------------------------------------------------------

SPELLING = {
    "favorite": "favourite",
    "fave": "favourite",
    "fav": "favourite",
    "color": "colour",
    "colors": "colours",
    "flavor": "flavour",
    "neighbor": "neighbour",
    "puppy": "dog",
    "kitten": "cat",
}
# canonical -> "single words|multi-word phrase|..." that mean it, on either side of the path.
_SYNONYM_GROUPS = {
    "location": "live lives lived living reside resides residence location located based home address|lives in|live in",
    "hometown": "from hometown origin|home town|come from|comes from",
    "birthplace": "birthplace|born in|place of birth",
    "birthday": "birthday bday born dob|birth date|date of birth|born on",
    "age": "age old|how old",
    "employer": "employer company workplace work works working|works at|work at|works for|"
    "work for|worked at|worked for",
    "occupation": "occupation job profession career|works as|work as|line of work|do for a living",
    "spouse": "spouse wife husband married|married to",
    "manager": "manager boss supervisor",
    "likes": "like likes love loves enjoy enjoys",
    "email": "email e-mail|email address",
    "phone": "phone|phone number",
}
ATTRIBUTE_SYNONYMS = {
    phrase: canonical
    for canonical, spec in _SYNONYM_GROUPS.items()
    for phrase in spec.split("|")[0].split() + spec.split("|")[1:]
}


def canonical_attribute(phrase: str) -> str:
    """Lower-cased, spelling-unified attribute name: "Favorite Color" -> "favourite colour"."""
    words = [
        w[:-2] if w.endswith("'s") else w for w in re.findall(r"[^\W\d_]+(?:'s)?", phrase.casefold().replace("’", "'"))
    ]
    words = [SPELLING.get(w, w) for w in words]
    while words and words[0] in ("the", "a", "an", "my", "his", "her", "their"):
        words = words[1:]
    key = " ".join(words)
    return ATTRIBUTE_SYNONYMS.get(key, key)


PET = r"(?P<attribute>dog|cat|puppy|kitten|hamster|rabbit|bird|parrot|fish|horse|pony|snake|turtle|pet)"
ATTR = r"(?P<attribute>[^\W\d_A-Z]+(?:['’]s)?(?:[ \t][^\W\d_A-Z]+(?:['’]s)?){0,2})"
SUBJ = rf"(?<![\w'’])(?P<subject>{NAME}|I)"
POSS = rf"(?<![\w'’])(?P<subject>{NAME}['’]s|[Mm]y)"
BE = r"(?:[ \t]+(?:is|am|are|was|were)|['’]m)"
_VALUE_END = (
    r"(?=[ \t]*(?:[.;!?\n\"“”]|,(?![ \t]*\d)|$)|[ \t](?:and|but|because|since|who|which|when|"
    r"while|where|so|then|until|after|before|for|with|now|if|though|although|I|we|he|she|"
    r"they|you)\b)"
)
VALUE = rf"(?P<value>[^.;!?\n\"“”]+?){_VALUE_END}"

# (pattern, attribute): an attribute of None takes the pattern's `attribute` group; "{attribute}"
# is formatted from it. Earlier patterns win where matches overlap, so specific ones come first.
ATTRIBUTE_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (rf"{SUBJ}[ \t]+(?:has|have|had|got)[ \t]+an?[ \t]+{PET}[ \t]+(?:named|called)[ \t]+{VALUE}", "{attribute} name"),
    (rf"{POSS}[ \t]+{PET}(?:['’]s[ \t]+name)?{BE}?[ \t]+(?:named|called)[ \t]+{VALUE}", "{attribute} name"),
    (rf"{POSS}[ \t]+{PET}[ \t]+(?P<value>{NAME})(?![\w'’])", "{attribute} name"),
    (rf"{POSS}[ \t]+{ATTR}{BE}[ \t]+{VALUE}", None),
    (rf"{SUBJ}[ \t]+(?:lives?|lived|resides?)[ \t]+in[ \t]+{VALUE}", "location"),
    (
        rf"{SUBJ}(?:{BE}[ \t]+(?:based|located|living)[ \t]+in|[ \t]+(?:moved|relocated)[ \t]+to)[ \t]+{VALUE}",
        "location",
    ),
    (rf"{SUBJ}(?:[ \t]+(?:works?|worked)|{BE}[ \t]+working)[ \t]+as[ \t]+(?:an?[ \t]+)?{VALUE}", "occupation"),
    (rf"{SUBJ}(?:[ \t]+(?:works?|worked)|{BE}[ \t]+working)[ \t]+(?:at|for)[ \t]+{VALUE}", "employer"),
    (rf"{SUBJ}{BE}[ \t]+(?P<value>\d{{1,3}})(?:[ \t]+years?[ \t]+old\b|(?=[ \t]*(?:[.,;!?\n]|$)))", "age"),
    (rf"{SUBJ}[ \t]+(?:was|were)[ \t]+born[ \t]+on[ \t]+{VALUE}", "birthday"),
    (rf"{SUBJ}[ \t]+(?:was|were)[ \t]+born[ \t]+in[ \t]+(?P<value>\d{{4}})\b", "birth year"),
    (rf"{SUBJ}[ \t]+(?:was|were)[ \t]+born[ \t]+in[ \t]+(?!\d){VALUE}", "birthplace"),
    (rf"{SUBJ}(?:{BE}|[ \t]+(?:comes?|came))[ \t]+from[ \t]+{VALUE}", "hometown"),
    (rf"{SUBJ}{BE}[ \t]+married[ \t]+to[ \t]+{VALUE}", "spouse"),
    (rf"{SUBJ}[ \t]+(?:really[ \t]+)?(?:likes?|loves?|enjoys?)[ \t]+{VALUE}", "likes"),
    (rf"{SUBJ}[ \t]+(?:prefers?)[ \t]+{VALUE}", "prefers"),
)
# Words that every match of the pattern at the same position in ATTRIBUTE_PATTERNS contains (one of
# them at least): a text without any cannot match it, and is not searched with it. Most texts hold
# none of most patterns' words, and a regular expression that starts with a name is slow to run over
# a text. "\d": a digit.
_NEEDLES: tuple[str, ...] = (
    "named|called",
    "named|called",
    "dog|cat|puppy|kitten|hamster|rabbit|bird|parrot|fish|horse|pony|snake|turtle|pet",
    "'s|’s|my|My",
    "live|resid",
    "based|located|living|moved",
    "work",
    "work",
    r"\d",
    "born",
    "born",
    "born",
    "from",
    "married",
    "like|love|enjoy",
    "prefer",
)
_COMPILED = [(re.compile(p), a, re.compile(n)) for (p, a), n in zip(ATTRIBUTE_PATTERNS, _NEEDLES, strict=True)]
MAX_VALUE_WORDS = 8


def extract_attributes(text: str, speaker: str | None = None) -> list[tuple[str, str, str]]:
    """(subject, attribute, value) triples; first-person subjects become `speaker` or are dropped."""
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, tuple[str, str, str]]] = []
    for pattern, attribute, needle in _COMPILED:
        if not needle.search(text):
            continue
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            triple = _triple(m, attribute, speaker)
            if triple is not None:
                taken.append((m.start(), m.end()))
                found.append((m.start(), triple))
    found.sort(key=lambda item: item[0])
    return list(dict.fromkeys(triple for _, triple in found))


def _triple(m: re.Match[str], attribute: str | None, speaker: str | None) -> tuple[str, str, str] | None:
    subject = resolve_subject(m.group("subject"), speaker)
    value = re.sub(r"^(?:in|at|on)[ \t]+", "", m.group("value").strip().strip("'’").strip())
    groups = m.groupdict()
    name = (attribute or "{attribute}").format(attribute=groups.get("attribute") or "")
    if not subject or not value or len(value.split()) > MAX_VALUE_WORDS:
        return None
    return subject, canonical_attribute(name), value


def resolve_subject(subject: str, speaker: str | None) -> str | None:
    """Strip the possessive and leading STARTERS; first person means the speaker."""
    words = re.sub(r"['’]s$", "", subject.strip()).split()
    while len(words) > 1 and (words[0].casefold() in STARTERS or words[0].casefold() in NEVER_NAMES):
        words = words[1:]
    if len(words) == 1 and words[0].casefold() in FIRST_PERSON:
        return speaker
    if not words or words[0].casefold() in STARTERS or words[0].casefold() in NEVER_NAMES:
        return None
    return " ".join(words)
