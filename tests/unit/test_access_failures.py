"""The log of access-statistics writes that failed after their queries returned (AccessFailures): the
first failure at once, then at most one line per interval with how many failed meanwhile."""

from __future__ import annotations

import logging

import pytest

from memoria_pg.query import pipeline
from memoria_pg.query.pipeline import AccessFailures


def test_failures_are_logged_once_per_interval_with_their_count(monkeypatch, caplog):
    clock = [1000.0]
    monkeypatch.setattr(pipeline.time, "monotonic", lambda: clock[0])
    failures = AccessFailures()
    with caplog.at_level(logging.WARNING, logger="memoria_pg.query.pipeline"):
        failures.outcome(None)  # a write that succeeded: nothing
        assert not caplog.records and failures.failed == 0
        failures.outcome(TimeoutError("lock timeout"))
        for _ in range(4):
            clock[0] += 10
            failures.outcome(RuntimeError("row lock\nmore detail"))
        assert [r.getMessage() for r in caplog.records] == [
            "the access statistics of a ranked query were not recorded (best effort; the answers were not "
            "affected): TimeoutError: lock timeout"
        ]
        clock[0] += AccessFailures.LOG_EVERY_S
        failures.outcome(RuntimeError("row lock\nmore detail"))
    assert failures.failed == 6
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith(
            "of 5 ranked queries were not recorded (best effort; the answers were not affected): RuntimeError: row lock"
        )
    )


@pytest.mark.parametrize("error", [ValueError(""), OSError()])
def test_an_error_without_a_message_is_named(error, caplog):
    with caplog.at_level(logging.WARNING, logger="memoria_pg.query.pipeline"):
        AccessFailures().outcome(error)
    assert caplog.records[0].getMessage().endswith(f"{type(error).__name__}: {type(error).__name__}")
