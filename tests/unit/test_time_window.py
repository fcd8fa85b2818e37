"""Relative time expressions resolved against the query's time (query/time_window.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from memoria_pg.query.time_window import time_window

NOW = dt.datetime(2023, 4, 1, 8, 30, tzinfo=dt.UTC)  # a Saturday


def days_back(text: str) -> tuple[float, float] | None:
    """The window as (days back at its start, days back at its end)."""
    window = time_window(text, NOW)
    if window is None:
        return None
    return ((NOW - window[0]) / dt.timedelta(days=1), (NOW - window[1]) / dt.timedelta(days=1))


@pytest.mark.parametrize(
    ("text", "holds", "excludes"),
    [
        ("What did I buy four weeks ago?", [21, 28, 34], [14, 40]),
        ("Which bike did I service the past weekend?", [5, 6, 8], [1, 10]),  # said on a Saturday: the one before
        ("How often did I bake in the past two weeks?", [0, 7, 15], [20]),
        ("How many hours of yoga did I do last week?", [5, 9, 13], [2, 15]),  # Monday 3/20 to Sunday 3/26
        ("Which shoes did I clean last month?", [1, 15, 31], [35, 60]),  # March
        ("What did I eat yesterday?", [0.5, 1, 2], [4]),
        ("What did we talk about 3 days ago?", [1.5, 3, 4.5], [7]),
        ("a couple of days ago", [1, 2, 3], [6]),
        ("What did I say earlier today?", [0, 1], [3]),
        ("LAST YEAR we moved", [100, 400], [50, 500]),  # 2022
    ],
)
def test_an_expression_gives_the_window_it_speaks_of(text, holds, excludes):
    start, end = days_back(text)
    for d in holds:
        assert end <= d <= start, (text, d, (start, end))
    for d in excludes:
        assert not end <= d <= start, (text, d, (start, end))


def test_a_window_in_the_past_ends_before_the_query_time():
    start, end = days_back("I mentioned it four weeks ago")
    assert 0 < end < start


@pytest.mark.parametrize(
    "text",
    ["When did Caroline go to the support group?", "What is my dog's name?", "the last straw", "a week-long trip", ""],
)
def test_no_expression_no_window(text):
    assert time_window(text, NOW) is None


def test_the_first_expression_decides():
    assert days_back("yesterday, or was it four weeks ago?") == days_back("yesterday")


def test_last_weekend_of_a_weekday_is_the_one_just_past():
    tuesday = dt.datetime(2023, 3, 21, 21, 43, tzinfo=dt.UTC)
    start, end = time_window("Which bike did I fix the past weekend?", tuesday)
    assert (start, end) == (dt.datetime(2023, 3, 17, tzinfo=dt.UTC), dt.datetime(2023, 3, 21, tzinfo=dt.UTC))


def test_the_past_week_is_the_seven_days_up_to_now_and_last_week_the_calendar_week_before():
    monday = dt.datetime(2023, 3, 20, 9, 0, tzinfo=dt.UTC)
    day = dt.timedelta(days=1)
    # the seven days before, a day of slack on each side
    assert time_window("what did I read the past week?", monday) == (monday - 8 * day, monday + day)
    # Monday 3/13 to Sunday 3/19 (the week before this one), a day of slack on each side
    assert time_window("what did I read last week?", monday) == (
        dt.datetime(2023, 3, 12, tzinfo=dt.UTC),
        dt.datetime(2023, 3, 21, tzinfo=dt.UTC),
    )


@pytest.mark.parametrize(
    "reference",
    [dt.datetime(1, 1, 3, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, 23, tzinfo=dt.UTC)],
    ids=["year 1", "year 9999"],
)
@pytest.mark.parametrize(
    "text",
    ["yesterday", "last weekend", "this week", "last month", "this year", "last year", "two weeks ago",
     "the past 5 years", "999 years ago"],
)  # fmt: skip
def test_a_reference_at_the_ends_of_the_calendar_is_no_error(text, reference):
    """A reference time (or as_of) in year 1 or 9999 is valid input: an expression whose window would
    pass the calendar's ends gives no window (the temporal worker does not run), never an exception."""
    window = time_window(f"what did I do {text}?", reference)
    assert window is None or window[0] < window[1]


def test_a_window_inside_the_calendar_near_its_end_is_kept():
    reference = dt.datetime(1, 3, 10, 12, tzinfo=dt.UTC)
    assert time_window("what did I do yesterday?", reference) == (
        dt.datetime(1, 3, 8, tzinfo=dt.UTC),
        dt.datetime(1, 3, 11, tzinfo=dt.UTC),
    )
