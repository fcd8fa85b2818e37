"""The time a query speaks of: relative expressions ("last week", "four weeks ago", "the past two
weeks", "yesterday", "last month") resolved against the query's time (`reference_time`, else its
`as_of`, else now) into a window of creation times, which the temporal worker searches
(sql/workers/temporal.sql).

Calendar expressions mean their calendar span ("last weekend" of a Tuesday is the Saturday and Sunday
just before it, "last month" of May 24 is April), counted ones a span around their distance ("four
weeks ago": 21 to 35 days back). Every window has a day of slack on each side: a conversation's
memories carry the time they were stored, which may follow what they tell by a day, and people say
"last week" of eight days back. Nothing after the reference time is spoken of. The first expression
in the text decides. Plain Python over the lowercased text; no date library: the expressions are few,
and their meaning relative to a reference time is what matters.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable

DAY = dt.timedelta(days=1)
SLACK = DAY  # on each side of a window
UNITS = {"day": 1, "week": 7, "fortnight": 14, "month": 30, "year": 365}
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "a couple of": 2,
    "few": 3, "a few": 3, "several": 3,
}  # fmt: skip
# the number words, longest first, so that "a couple of" is not read as "a"
_NUMBER = rf"(?P<n>\d{{1,3}}|{'|'.join(sorted(NUMBERS, key=len, reverse=True))})"
_UNIT = r"(?P<unit>day|week|fortnight|month|year)s?"
_AGO = re.compile(rf"\b{_NUMBER}\s+{_UNIT}\s+ago\b")
_PAST = re.compile(rf"\b(?:(?:in|over|during|for|within)\s+)?the\s+(?:past|last|previous)\s+{_NUMBER}\s+{_UNIT}\b")
_LAST = r"(?:the\s+past|the\s+last|the\s+previous|last|previous|past)"

Window = tuple[dt.datetime, dt.datetime]


def _midnight(t: dt.datetime) -> dt.datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def _weekend(ref: dt.datetime, last: bool) -> Window:
    """The most recent weekend that has begun by `ref` ("this weekend"; on a weekday also "last
    weekend", the one just past), or, for "last weekend" said on a Saturday or Sunday, the one before."""
    saturday = _midnight(ref) - (ref.weekday() - 5) % 7 * DAY
    if last and ref.weekday() >= 5:
        saturday -= 7 * DAY
    return saturday, saturday + 2 * DAY


def _week(ref: dt.datetime, back: int) -> Window:
    monday = _midnight(ref) - ref.weekday() * DAY - 7 * back * DAY
    return monday, monday + 7 * DAY


def _month(ref: dt.datetime, back: int) -> Window:
    first = _midnight(ref).replace(day=1)
    for _ in range(back):
        first = (first - DAY).replace(day=1)
    return first, (first + 32 * DAY).replace(day=1)


def _year(ref: dt.datetime, back: int) -> Window:
    first = _midnight(ref).replace(month=1, day=1)
    first = first.replace(year=first.year - back)
    return first, first.replace(year=first.year + 1)


_FIXED: tuple[tuple[re.Pattern[str], Callable[[dt.datetime], Window]], ...] = tuple(
    (re.compile(pattern), window)
    for pattern, window in (
        (
            r"\b(?:today|this morning|earlier today|tonight|this afternoon|this evening)\b",
            lambda r: (_midnight(r), r),
        ),
        (r"\b(?:yesterday|last night)\b", lambda r: (_midnight(r) - DAY, _midnight(r))),
        (r"\bthe other day\b", lambda r: (r - 7 * DAY, r)),
        (r"\bthis\s+week\s*-?\s*end\b", lambda r: _weekend(r, last=False)),
        (rf"\b{_LAST}\s+week\s*-?\s*end\b", lambda r: _weekend(r, last=True)),
        # "the past week" is the seven days up to now, "last week" the calendar week before this one
        (r"\bthe\s+(?:past|last)\s+week\b", lambda r: (r - 7 * DAY, r)),
        (r"\bthe\s+(?:past|last)\s+month\b", lambda r: (r - 30 * DAY, r)),
        (r"\bthe\s+(?:past|last)\s+year\b", lambda r: (r - 365 * DAY, r)),
        (r"\bthis\s+week\b", lambda r: _week(r, 0)),
        (r"\b(?:last|previous|past|the\s+previous)\s+week\b", lambda r: _week(r, 1)),
        (r"\bthis\s+month\b", lambda r: _month(r, 0)),
        (r"\b(?:last|previous|past|the\s+previous)\s+month\b", lambda r: _month(r, 1)),
        (r"\bthis\s+year\b", lambda r: _year(r, 0)),
        (r"\b(?:last|previous|past|the\s+previous)\s+year\b", lambda r: _year(r, 1)),
    )
)


def time_window(text: str, reference: dt.datetime) -> Window | None:
    """The window of creation times the query speaks of, [start, end), or None: no expression, or
    one whose window would pass the ends of the calendar (year 1 or 9999: a reference time there)."""
    lowered = text.lower()
    # each expression's window as a function of the reference, computed for the one chosen only
    found: list[tuple[int, Callable[[dt.datetime], Window]]] = []
    for match in _AGO.finditer(lowered):
        back = _number(match.group("n")) * UNITS[match.group("unit")] * DAY
        spread = max(DAY, 0.25 * back)  # "four weeks ago": 21 to 35 days back
        found.append((match.start(), functools.partial(_around, back=back, spread=spread)))
    for match in _PAST.finditer(lowered):
        back = _number(match.group("n")) * UNITS[match.group("unit")] * DAY
        found.append((match.start(), functools.partial(_since, back=back)))
    for pattern, window in _FIXED:
        found.extend((match.start(), window) for match in pattern.finditer(lowered))
    if not found:
        return None
    try:
        start, end = min(found, key=lambda f: f[0])[1](reference)
        return start - SLACK, min(end, reference) + SLACK
    except (OverflowError, ValueError):  # past datetime's range: nothing can have been stored then
        return None


def _around(reference: dt.datetime, *, back: dt.timedelta, spread: dt.timedelta) -> Window:
    return reference - back - spread, reference - back + spread


def _since(reference: dt.datetime, *, back: dt.timedelta) -> Window:
    return reference - back, reference


def _number(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text]
