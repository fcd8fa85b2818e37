"""Rule-based entity and attribute extraction: offline, no model, shared by ingestion and queries.

Entities are capitalized words and multi-word names ("New York", "Bank of America"), quoted names,
and known names (the entity table) found case-insensitively. Attributes are (subject, attribute,
value) triples from a table of sentence patterns. `canonical_attribute` is the one attribute
vocabulary: the query side maps "where does Bob live" to the "location" that "Bob lives in Paris"
stored. Better extractors plug in through the `EntityExtractor` protocol.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import numpy as np


def _char_class(pred: Callable[[str], bool]) -> str:
    # Python's re has no \p{Lu}: build the class from Latin, Greek, Cyrillic and Latin Extended
    # Additional, which covers the names European-language memories contain.
    chars = [chr(c) for lo, hi in ((0x41, 0x530), (0x1E00, 0x2000)) for c in range(lo, hi)]
    return "".join(re.escape(ch) for ch in chars if pred(ch))


UPPER = _char_class(str.isupper)
_CAP_REST = r"[\w\-]*(?:['’](?!s\b)[\w\-]+)*"  # a CAP after its capital
CAP = rf"[{UPPER}]{_CAP_REST}"  # "O'Brien" is a word, "Alice's" is not
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
    """Text between double quotes (straight, curly or guillemets), stripped, in order.

    The groups of QUOTED.finditer(text), found in linear time: the expression itself rescans up to
    200 characters from each of a run of opening quotes, and, after a guillemet and spaces, the rest
    of the spaces from every position of its group (cubic in a run of spaces)."""
    scan = _QuoteScan(text)
    spans: list[str] = []
    pos = 0
    while (opener := _OPENERS.search(text, pos)) is not None:
        found = scan.at(opener.start())
        if found is None:
            pos = opener.start() + 1
            continue
        group, pos = found
        group = group.strip()
        if any(ch.isalnum() for ch in group):
            spans.append(group)
    return spans


_OPENERS = re.compile('["“«]')
_SPACES = re.compile(r"\s*")
_CLOSER = {'"': '"', "“": "”"}
MAX_QUOTED = 200  # characters between quotes, as in QUOTED


class _QuoteScan:
    """QUOTED's alternative at one opening quote: (group, end of the match) or None. The next
    occurrence of each character is remembered, so that a run of openers shares one scan."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._next: dict[str, tuple[int, int]] = {}  # char -> (asked from, next occurrence or len)
        self._trim = (-1, -1)

    def _trimmed(self, close: int, start: int) -> int:
        """Where the spaces before `close` begin (after `start`); remembered for the last `close`."""
        if self._trim[0] != close:
            end = close
            while end - 1 > start and self.text[end - 1].isspace():
                end -= 1
            self._trim = (close, end)
        return max(self._trim[1], start + 1)

    def next(self, ch: str, pos: int) -> int:
        asked, found = self._next.get(ch, (1, 0))
        if not asked <= pos <= found:
            found = self.text.find(ch, pos)
            found = len(self.text) if found < 0 else found
            self._next[ch] = (pos, found)
        return found

    def at(self, q: int) -> tuple[str, int] | None:
        text = self.text
        if text[q] in _CLOSER:  # '"([^"\n]{1,200})"', '“([^”\n]{1,200})”'
            end = min(self.next(_CLOSER[text[q]], q + 1), self.next("\n", q + 1))
            if end < len(text) and text[end] == _CLOSER[text[q]] and 1 <= end - q - 1 <= MAX_QUOTED:
                return text[q + 1 : end], end + 1
            return None
        return self._guillemets(q)

    def _guillemets(self, q: int) -> tuple[str, int] | None:
        # '«\s*([^»\n]{1,200}?)\s*»': the group starts after the spaces and ends where only spaces
        # remain before the first '»'; when '»' follows the spaces at once, the expression backtracks
        # into them and the group is their last space that is not a newline.
        text = self.text
        start = _match_end(_SPACES, text, q + 1)
        if start == len(text):
            return None
        if text[start] == "»":
            last = start - 1
            while last > q and text[last] == "\n":
                last -= 1
            return (text[last], start + 1) if last > q else None
        close = self.next("»", start)
        if close == len(text):
            return None
        end = self._trimmed(close, start)
        if self.next("\n", start) < end or end - start > MAX_QUOTED:
            return None
        return text[start:end], close + 1


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
    folded = name.casefold().replace("’", "'")
    words = _KEY_WORD.findall(folded)
    if "'s" in folded:  # only then can a word end with a possessive to drop
        words = [w[:-2] if w.endswith("'s") else w for w in words]
    return " ".join(words)


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
    names = [
        q for q in quoted_spans(text) if _first_letter_upper(q) and len(q.split()) <= MAX_NAME_WORDS and len(q) <= 80
    ]
    first = first_positions(text, names)
    quoted = [(first[q], q) for q in names]
    found = known_mentions(text, known) + quoted + _capitalized(text)
    found.sort(key=lambda item: item[0])  # stable: a known spelling beats a rule at one position
    result: dict[str, str] = {}
    keys: dict[str, str] = {}  # a name found again and again is keyed once
    for _, name in found:
        key = keys.get(name)
        if key is None:
            key = keys[name] = entity_key(name)
        if key and key not in result:
            result[key] = spelling.get(key, name)
    return list(result.values())


FIND_AT_MOST = 32  # distinct names looked up with str.find; more are looked up by rolling hash
_HASH_BASE = 0x9E3779B97F4A7C15  # odd: invertible modulo 2**64


def first_positions(text: str, needles: Iterable[str]) -> dict[str, int]:
    """{needle: text.find(needle)} in O(len(text)) per distinct needle length, not per needle.

    Each find scans the text up to the needle's first occurrence: for a text of many distinct quoted
    names that is quadratic. Many needles are found instead by a polynomial hash (modulo 2**64) of
    every window of the text of each needle length; the first window whose hash matches is checked
    against the text, and str.find decides whenever that check fails."""
    distinct = list(dict.fromkeys(needles))
    if len(distinct) <= FIND_AT_MOST:
        return {q: text.find(q) for q in distinct}
    by_length: dict[int, list[str]] = {}
    for q in distinct:
        by_length.setdefault(len(q), []).append(q)
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    prefix, unscale = _window_tables(codes)
    found: dict[str, int] = {}
    for length, group in by_length.items():
        found.update(_find_by_hash(text, group, length, prefix, unscale))
    return found


def _window_tables(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums of code * B**i, and B**-i, modulo 2**64 (numpy's unsigned overflow wraps)."""
    n = len(codes)
    scale = np.ones(n, dtype=np.uint64)
    unscale = np.ones(n, dtype=np.uint64)
    if n > 1:
        scale[1:] = np.cumprod(np.full(n - 1, _HASH_BASE, dtype=np.uint64), dtype=np.uint64)
        unscale[1:] = np.cumprod(np.full(n - 1, pow(_HASH_BASE, -1, 2**64), dtype=np.uint64), dtype=np.uint64)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    prefix[1:] = np.cumsum(codes * scale, dtype=np.uint64)
    return prefix, unscale


def _find_by_hash(text: str, group: list[str], length: int, prefix: np.ndarray, unscale: np.ndarray) -> dict[str, int]:
    windows = len(prefix) - length
    if length == 0 or windows <= 0:
        return {q: text.find(q) for q in group}
    hashes = (prefix[length:] - prefix[:windows]) * unscale[:windows]
    wanted = {_hash(q): q for q in group}
    keys = np.array(sorted(wanted), dtype=np.uint64)
    slot = np.minimum(np.searchsorted(keys, hashes), len(keys) - 1)
    hits = np.flatnonzero(keys[slot] == hashes)
    found: dict[str, int] = {}
    for i in hits.tolist():  # in text order: the first hit of a hash is its first window
        q = wanted[int(hashes[i])]
        if q not in found:
            found[q] = i if text.startswith(q, i) else text.find(q)
    return {q: found[q] if q in found else text.find(q) for q in group}


def _hash(q: str) -> int:
    value, power = 0, 1
    for ch in q:
        value = (value + ord(ch) * power) % 2**64
        power = power * _HASH_BASE % 2**64
    return value


def _match_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern`, which matches the empty string too, ends when matched at `pos`."""
    m = pattern.match(text, pos)
    return pos if m is None else m.end()


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


_PETS = "dog|cat|puppy|kitten|hamster|rabbit|bird|parrot|fish|horse|pony|snake|turtle|pet"
PET = rf"(?P<attribute>{_PETS})"
ATTR = r"(?P<attribute>[^\W\d_A-Z]+(?:['’]s)?(?:[ \t][^\W\d_A-Z]+(?:['’]s)?){0,2})"
# A subject: a NAME, or a NAME's or "my" (POSS), not inside a word. SUBJ and POSS match as the plain
# `(?<![\w'’])(?P<subject>{NAME}|I)` and `(?<![\w'’])(?P<subject>{NAME}['’]s|[Mm]y)` do, and are fast to
# search a text with:
# - the first character comes first, then the lookbehind on the character before it (and, in POSS,
#   the check of that character for each alternative: a capital, or the M or m of "my"): re scans a
#   text for the first character of an expression that starts with a character class, but tries one
#   that starts with a lookbehind at every position;
# - "I" is a NAME: an alternative of its own could only match where the NAME "I" already failed;
# - the runs of word characters are possessive: what follows one, in the subject or after it in every
#   pattern, is an apostrophe, a space or a tab, never a word character, so giving characters back
#   could not help a match, and a failed attempt at a capital does not retry every shorter prefix of
#   every word.
_SUBJECT_CAP_REST = r"[\w\-]*+(?:['’](?!s\b)[\w\-]++)*"  # _CAP_REST, possessive
_SUBJECT_NAME_REST = rf"{_SUBJECT_CAP_REST}(?:[ \t]+[{UPPER}]{_SUBJECT_CAP_REST}){{0,2}}"  # NAME after its capital
SUBJ = rf"(?P<subject>[{UPPER}](?<![\w'’].){_SUBJECT_NAME_REST})"
POSS = rf"(?P<subject>[{UPPER}m](?<![\w'’].)(?:(?<!m){_SUBJECT_NAME_REST}['’]s|(?<=[Mm])y))"
BE = r"(?:[ \t]+(?:is|am|are|was|were)|['’]m)"
_VALUE_END = (
    r"(?=[ \t]*(?:[.;!?\n\"“”]|,(?![ \t]*\d)|$)|[ \t](?:and|but|because|since|who|which|when|"
    r"while|where|so|then|until|after|before|for|with|now|if|though|although|I|we|he|she|"
    r"they|you)\b)"
)
# The value ends at the first position where _VALUE_END holds. Inside a run of spaces it holds at the
# run's first position or nowhere before its last space (the spaces before a stop character are
# scanned to their end, and " and"... starts at the last one), so a run is one step of the lazy loop
# up to its last space: testing every position would rescan the rest of the run from each
# (quadratic in its length). The value is what `[^.;!?\n"“”]+?` followed by _VALUE_END matches.
VALUE = rf"(?P<value>(?:[^.;!?\n\"“” \t]|[ \t](?:[ \t](?=[ \t]))*+)+?){_VALUE_END}"

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
# What every match of the pattern at the same position in ATTRIBUTE_PATTERNS contains: one of the
# words of each "word|word|..." of its entry. A text without them cannot match the pattern, and is not
# searched with it: most texts lack most patterns' words, and a regular expression that starts with a
# name is slow to run over a text. "\d": a digit; other words are plain text, looked for with `in`
# (faster than a regular expression of alternative words, tried at every letter one of them starts
# with). The rarer words of an entry come first.
_POSSESSIVE = "'s|’s|my|My"  # what a possessive subject (POSS) ends with
_NEEDLES: tuple[tuple[str, ...], ...] = (
    ("named|called", _PETS),
    ("named|called", _POSSESSIVE),
    (_POSSESSIVE, _PETS),
    (_POSSESSIVE,),
    ("live|resid",),
    ("based|located|living|moved",),
    ("work",),
    ("work",),
    (r"\d",),
    ("born",),
    ("born",),
    ("born",),
    ("from",),
    ("married",),
    ("like|love|enjoy",),
    ("prefer",),
)


class _Needles:
    """The needles of a pattern: `search(text)` is true when the text holds one of the words of each
    (a regular expression's method: a test may put one in its place)."""

    def __init__(self, needles: tuple[str, ...]) -> None:
        self.needles = needles
        self._tests = tuple(_contains(needle) for needle in needles)

    def search(self, text: str) -> bool:
        for holds in self._tests:  # noqa: SIM110 (all() of a generator costs more than a short text's test)
            if not holds(text):
                return False
        return True


def _contains(needle: str) -> Callable[[str], bool]:
    """Whether a text holds one of the words of `needle` ("word|word"), or a digit ("\\d")."""
    if needle == r"\d":
        digit = re.compile(needle)
        return lambda text: digit.search(text) is not None
    words = tuple(needle.split("|"))
    return lambda text: any(map(text.__contains__, words))


_COMPILED = [(re.compile(p), a, _Needles(n)) for (p, a), n in zip(ATTRIBUTE_PATTERNS, _NEEDLES, strict=True)]
MAX_VALUE_WORDS = 8


def extract_attributes(text: str, speaker: str | None = None) -> list[tuple[str, str, str]]:
    """(subject, attribute, value) triples; first-person subjects become `speaker` or are dropped."""
    starts: list[int] = []  # the matches taken so far: disjoint, sorted by start
    ends: list[int] = []
    found: list[tuple[int, tuple[str, str, str]]] = []
    skipping = many_inner_starts(text)
    for pattern, attribute, needles in _COMPILED:
        if not needles.search(text):
            continue
        for m in skipping_matches(pattern, text) if skipping else pattern.finditer(text):
            i = bisect.bisect_left(starts, m.end())  # taken matches starting before this one ends
            if i and ends[i - 1] > m.start():  # the last of them is the one that ends last
                continue
            triple = _triple(m, attribute, speaker)
            if triple is not None:
                starts.insert(i, m.start())
                ends.insert(i, m.end())
                found.append((m.start(), triple))
    found.sort(key=lambda item: item[0])
    return list(dict.fromkeys(triple for _, triple in found))


# Where a pattern can start: its subject is a name (a capital), "I", or "my"/"My" (POSS).
_SUBJECT_START = re.compile(rf"(?<![\w'’])(?:[{UPPER}]|my)")
_CAP_REST_RE = re.compile(_CAP_REST)
_INNER_START = re.compile(rf"-(?:[{UPPER}]|my)")
INNER_STARTS_SCANNED = 8


def many_inner_starts(text: str) -> bool:
    """Whether `text` has more than INNER_STARTS_SCANNED places where a subject can start inside a
    word (after a hyphen): below that, finditer's rescans cost at most that many times the text."""
    return (
        sum(1 for _ in itertools.islice(_INNER_START.finditer(text), INNER_STARTS_SCANNED + 1)) > INNER_STARTS_SCANNED
    )


def skipping_matches(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """pattern.finditer(text) for a pattern of ATTRIBUTE_PATTERNS, in linear time.

    A pattern starts with a subject (SUBJ or POSS) after a character that is not a letter, digit or
    apostrophe, so also after each hyphen of "Aa-Bb-Cc-...", and a capitalized word (CAP) runs to the
    same end from each of them: finditer rescans the rest of the word from each hyphen (quadratic in
    its length). When the pattern fails at a capital, it fails at every later capital inside the CAP
    that starts there (each way to match from the later one is a way from the earlier one, with the
    same end), so those are skipped; a "my" ending the CAP (POSS's [Mm]y) is still tried."""
    pos = 0
    while (start := _SUBJECT_START.search(text, pos)) is not None:
        p = start.start()
        m = pattern.match(text, p)
        if m is not None:
            yield m
            pos = m.end()  # never empty: a subject has a character
        elif text[p] == "m":  # lower-case "my" is no CAP: nothing to skip
            pos = p + 1
        else:
            end = _match_end(_CAP_REST_RE, text, p + 1)
            my = end - 2
            inner_my = my > p and text[my - 1] == "-" and text[my:end] in ("my", "My")
            pos = my if inner_my and text[end : end + 1] in (" ", "\t") else end


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
