"""Fuzz the ingest and query entry points (issue 15): no exception but InputError, no input over 1 s.

Hypothesis generates calls of `MemorySystem.store`, `store_many` and `query` on a database seeded with
a small synthetic corpus: any text (surrogates, NUL, control characters), texts the extraction rules
fire on, repeated units (hyphen-joined capitals, runs of spaces, quotes) up to and over
max_content_chars, and every other field as a value of the right type, an edge of it or a wrong type
(tenants, memory types, metadata nested deep, times such as 0001-01-01T00:00:00+14:00, importance NaN,
vectors of the wrong length or of near-zero norm, top_k past any integer type...). Each call either
returns or raises InputError; anything else is a finding, and so is a call over --slow-s seconds that
takes as long again when replayed at the end (a call slow only once is the shared machine's load:
reported with its CPU time, the load average and its replay times, not a finding). The run
goes on for --minutes in batches of --batch examples (each batch a fresh hypothesis run with its own
seed, generation only: no shrinking, no example database), and reports the calls, the InputErrors by
message, the findings and the slowest calls (wall and this process's CPU time, and the load average,
since the machine may be shared).

    python benchmarks/fuzz.py --minutes 10               # the acceptance run
    python benchmarks/fuzz.py --minutes 1 --json out.json

Loopback only (as soak.py): the database (--db-name) is dropped and created, and dropped at the end.
Exit status 1 when there was any finding.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import math
import os
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import corpus
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisWarning
from soak import DEFAULT_ADMIN_DSN, drop_database, fresh_database, require_loopback

from memoria_pg import DEFAULT_MEMORY_TYPES, Config, HashEmbedder, InputError, MemorySystem, normalize

MAX_CONTENT = Config().max_content_chars
MAX_QUERY = Config().max_query_chars
TENANTS = ("t0", "t1", "t2")
WORDS = (
    "Alice Bob Carol Jean-Paul O'Brien I my My she lives in Paris works at Acme as a nurse was born on 1999 "
    "from Rome married to likes prefers green tea dog named Rex cat called Tom is am 's 'm and but the of "
    'what where does who how old when "Old Town" “Big Apple” « Le Monde » Monday yesterday '
    # the temporal worker's expressions (query/time_window.py): "last weekend", "four weeks ago", ...
    "last past this week weekend month year ago four two 999 days weeks years today"
).split()
UNITS = ("Aa-", "A'B-", "my-", "Aa ", " ", "\t", "  \n", "«", "“", '"', "»", "-", "'s ", "I like a ", ", ", "x")
TIMES = (
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59-14:00",
    "2024-02-30T00:00:00",
    "2024-06-01",
    "yesterday",
    "",
    "1970-01-01T00:00:00+00:00",
)


# -- strategies --------------------------------------------------------------------------------------------


def repeated(prefix: str, unit: str, share: float, suffix: str) -> str:
    """`unit` repeated to `share` of max_content_chars, between two phrases."""
    return prefix + unit * int(share * MAX_CONTENT / len(unit)) + suffix


any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=200)  # surrogates and NUL too
sentences = st.lists(st.sampled_from(WORDS), max_size=30).map(" ".join)
# Up to a little over max_content_chars: a long text is a repeated unit (hypothesis' own data is small).
long_texts = st.builds(
    repeated,
    sentences,
    st.sampled_from(UNITS) | st.text(min_size=1, max_size=4),
    st.floats(0.0, 1.01),
    sentences,
)
texts = st.one_of(any_text, sentences, sentences, long_texts)
wrong = st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=3))
tenants = st.one_of(st.sampled_from(TENANTS), st.sampled_from(("", " ", "default", "x" * 300)), any_text, wrong)
memory_types = st.one_of(st.none(), st.sampled_from(DEFAULT_MEMORY_TYPES), st.sampled_from(("", "nope")), wrong)
leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text)
metadata = st.one_of(
    st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4)),
    st.integers(1, 2000).map(lambda depth: _nested(depth)),
    wrong,
)
times = st.one_of(
    st.none(), st.sampled_from(TIMES), st.datetimes(), st.datetimes(timezones=st.timezones()), any_text, wrong
)
floats = st.one_of(st.floats(), st.integers(), st.sampled_from((math.nan, math.inf, -1.0, 0.5, 1.0)), any_text)
vectors = st.one_of(
    st.none(),
    st.lists(st.floats(width=32), min_size=384, max_size=384),
    st.sampled_from(([1e-23] * 384, [0.0] * 384, [1.0] * 384, [math.nan] * 384, [1.0] * 383, [])),
    st.lists(st.floats(), max_size=8),
    any_text,
    wrong,
)


def record_fields(content: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"content": content}, optional=OPTIONAL_FIELDS)


OPTIONAL_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "tenant": tenants,
    "memory_type": memory_types,
    "metadata": metadata,
    "importance": floats,
    "created_at": times,
    "valid_from": times,
    "entities": st.one_of(st.lists(any_text, max_size=4), wrong, any_text),
    "attributes": st.one_of(st.lists(st.tuples(any_text, any_text, any_text), max_size=3), wrong, any_text),
    "external_id": st.one_of(any_text, wrong, st.dictionaries(any_text, any_text, max_size=2)),
    "embedding": vectors,
    "pinned": st.one_of(st.booleans(), st.sampled_from(("banana", "true", 1, 0)), wrong),
    "context": st.one_of(st.none(), texts),
}
# One record in ten also has a field MemoryRecord does not have.
records = st.tuples(record_fields(texts), st.integers(0, 9)).map(
    lambda pair: {**pair[0], "no_such_field": 1} if pair[1] == 7 else pair[0]
)
# A batch: short records and one that may be long (a call is one input, up to max_content_chars long).
batches = st.builds(
    lambda short, one: [*short, one], st.lists(record_fields(any_text | sentences), max_size=3), records
)
queries = st.fixed_dictionaries(
    {
        "text": st.one_of(
            any_text, sentences, sentences, long_texts.map(lambda t: t[: MAX_QUERY + int(len(t) % 7 == 0)])
        )
    },
    optional={
        "tenant": tenants,
        "memory_type": memory_types,
        "top_k": st.one_of(st.none(), st.integers(-5, 300), st.sampled_from((10**12, 2**63, 2**64)), wrong, any_text),
        "embedding": vectors,
        "workers": st.one_of(
            st.none(),
            st.lists(st.sampled_from(("vector", "bm25", "graph", "phrase", "attribute", "temporal", "nope"))),
            any_text,
        ),
        "ranking": st.booleans(),
        "v4": st.booleans(),
        "as_of": times,
        "reference_time": times,
        "include_invalid": st.booleans(),
        "candidates": st.booleans(),
    },
)
calls = st.one_of(
    st.tuples(st.just("store"), records),
    st.tuples(st.just("store_many"), batches),
    st.tuples(st.just("query"), queries),
    st.tuples(st.just("query"), queries),
)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


# -- the run -----------------------------------------------------------------------------------------------


@dataclass
class Stats:
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    input_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    findings: list[dict] = field(default_factory=list)
    slowest: list[dict] = field(default_factory=list)  # the 10 slowest calls
    slow_calls: list[tuple[str, Any, dict]] = field(default_factory=list)  # over --slow-s, to replay
    slow_under_load: list[dict] = field(default_factory=list)  # over --slow-s, not on replay
    longest_text: int = 0
    batches: int = 0


def describe(kind: str, payload: Any) -> str:
    """A short account of a call's input (texts by length and start)."""

    def short(value: Any, depth: int = 0) -> Any:
        if depth > 4 and isinstance(value, (dict, list, tuple)):
            return "<nested deeper>"
        if isinstance(value, str):
            return value if len(value) <= 60 else f"<{len(value)} chars: {value[:40]!r}...>"
        if isinstance(value, dict):
            return {k: short(v, depth + 1) for k, v in list(value.items())[:12]}
        if isinstance(value, (list, tuple)):
            return [short(v, depth + 1) for v in value[:6]] + (["..."] if len(value) > 6 else [])
        return value

    return f"{kind}({str(short(payload))[:600]})"


def call(system: MemorySystem, kind: str, payload: Any) -> None:
    if kind == "store":
        fields = dict(payload)
        system.store(fields.pop("content"), **fields)
    elif kind == "store_many":
        system.store_many([dict(r) for r in payload])
    else:
        arguments = dict(payload)
        system.query(arguments.pop("text"), **arguments)


def exercise(system: MemorySystem, kind: str, payload: Any, stats: Stats, slow_s: float) -> None:
    stats.calls[kind] += 1
    texts_in = [payload] if kind != "store_many" else payload
    for item in texts_in:
        for key in ("content", "text"):
            if isinstance(item.get(key), str):
                stats.longest_text = max(stats.longest_text, len(item[key]))
    wall, cpu = time.perf_counter(), time.process_time()
    outcome = "ok"
    try:
        call(system, kind, payload)
    except InputError as exc:
        outcome = "InputError"
        stats.input_errors[re.sub(r"^record \d+: ", "", str(exc))[:70]] += 1
    except Exception as exc:  # a finding: any other exception
        outcome = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else "?"
        stats.findings.append({"kind": "exception", "error": outcome, "at": where, "input": describe(kind, payload)})
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    entry = {
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "outcome": outcome[:120],
        "input": describe(kind, payload),
    }
    if wall > slow_s and len(stats.slow_calls) < 100:
        entry["load"] = round(os.getloadavg()[0], 1)
        stats.slow_calls.append((kind, payload, entry))
    stats.slowest = sorted([*stats.slowest, entry], key=lambda e: -e["wall_s"])[:10]


def replay_slow(system: MemorySystem, stats: Stats, slow_s: float) -> None:
    """Each call that took over `slow_s`, run twice more (records for a fresh tenant, so that they are
    written again, not found to be duplicates): over `slow_s` both times is a finding; faster is the
    machine's load at the time (the run shares its CPUs), reported but not a finding."""
    for number, (kind, payload, entry) in enumerate(stats.slow_calls):
        fresh = f"replay{number}"
        if kind == "store":
            payload = _retenanted(payload, fresh)
        elif kind == "store_many":
            payload = [_retenanted(record, fresh) for record in payload]
        best_wall, best_cpu = math.inf, math.inf
        for _ in range(2):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                call(system, kind, payload)
            except Exception:  # the same outcome as the first time, already counted
                pass
            best_wall = min(best_wall, time.perf_counter() - wall)
            best_cpu = min(best_cpu, time.process_time() - cpu)
        entry.update(replay_wall_s=round(best_wall, 4), replay_cpu_s=round(best_cpu, 4))
        if best_wall > slow_s:
            stats.findings.append({"kind": "slow", **entry})
        else:
            stats.slow_under_load.append(entry)


def _retenanted(record: dict[str, Any], tenant: str) -> dict[str, Any]:
    current = record.get("tenant", "default")
    return {**record, "tenant": tenant} if isinstance(current, str) and current.strip() else record


def fuzz_batch(system: MemorySystem, stats: Stats, batch_seed: int, examples: int, until: float, slow_s: float) -> None:
    @seed(batch_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(calls)
    def one(step: tuple[str, Any]) -> None:
        if time.monotonic() < until:
            exercise(system, step[0], step[1], stats, slow_s)

    one()
    stats.batches += 1


def seed_corpus(system: MemorySystem, n: int) -> None:
    embedder = HashEmbedder()
    world = corpus.universe(7, len(TENANTS))
    # Short memories: the seed corpus the fuzzed calls meet, not a cost measurement.
    records = list(corpus.memories(n, seed=7, n_tenants=len(TENANTS), world=world, profile="short"))
    for record in records:
        record["tenant"] = TENANTS[hash(record["tenant"]) % len(TENANTS)]
        record["embedding"] = embedder.embed([normalize(record["content"])])[0]
    system.store_many(records)


def report(stats: Stats, elapsed: float, args: argparse.Namespace) -> str:
    total = sum(stats.calls.values())
    lines = [
        f"fuzz: {total} calls in {elapsed / 60:.1f} min ({dict(stats.calls)}), {stats.batches} batches of "
        f"{args.batch} examples; longest text {stats.longest_text} chars; load average at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
        f"InputError: {sum(stats.input_errors.values())} calls; most common:",
        *[f"  {count:6d} x {message}" for message, count in stats.input_errors.most_common(15)],
        f"findings: {len(stats.findings)} (exceptions other than InputError, calls over {args.slow_s} s also when "
        "replayed)",
        *[f"  {json.dumps(f, default=str)[:900]}" for f in stats.findings[:30]],
        f"calls over {args.slow_s} s under the machine's load only ({len(stats.slow_under_load)}; wall, CPU, "
        "load average, then the best of two replays):",
        *[
            f"  {e['wall_s']:7.3f} {e['cpu_s']:7.3f} load {e['load']:4.1f} | replay {e['replay_wall_s']:6.3f} "
            f"{e['replay_cpu_s']:6.3f}  {e['input'][:150]}"
            for e in stats.slow_under_load
        ],
        "slowest calls (wall s, this process's CPU s):",
        *[f"  {e['wall_s']:7.3f} {e['cpu_s']:7.3f}  {e['outcome'][:40]:40s} {e['input'][:200]}" for e in stats.slowest],
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("MEMORIA_BENCH_DSN", DEFAULT_ADMIN_DSN), help="superuser DSN")
    p.add_argument("--db-name", default="memoria_fuzz", help="database to (re)create")
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run")
    p.add_argument("--batch", type=int, default=2000, help="examples per hypothesis run")
    p.add_argument("--slow-s", type=float, default=1.0, help="a call taking longer is a finding")
    p.add_argument("--corpus", type=int, default=600, help="memories stored before fuzzing")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--json", help="also write the results to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=HypothesisWarning)  # "overly large repr" of long texts
    require_loopback(args.dsn)
    dsn = fresh_database(args.dsn, args.db_name)
    stats = Stats()
    try:
        with MemorySystem(Config(dsn=dsn), embedder=HashEmbedder(), auto_migrate=True) as system:
            seed_corpus(system, args.corpus)
            started = time.monotonic()
            until = started + args.minutes * 60
            while time.monotonic() < until:
                fuzz_batch(system, stats, args.seed + stats.batches, args.batch, until, args.slow_s)
            elapsed = time.monotonic() - started
            replay_slow(system, stats, args.slow_s)
    finally:
        drop_database(args.dsn, args.db_name)
    print(report(stats, elapsed, args))
    if args.json:
        payload = {
            "args": vars(args),
            "elapsed_s": elapsed,
            "calls": dict(stats.calls),
            "input_errors": dict(stats.input_errors),
            "findings": stats.findings,
            "slowest": stats.slowest,
            "slow_under_load": stats.slow_under_load,
            "longest_text": stats.longest_text,
            "finished": dt.datetime.now(dt.UTC).isoformat(),
        }
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
    print("FUZZ FAILED" if stats.findings else "FUZZ PASSED")
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
