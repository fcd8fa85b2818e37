"""Bad input: every invalid value is a clear InputError (a clean CLI message with a non-zero exit) or a
documented normalization, and nothing is half-written. Property-based tests (hypothesis) of the
QueryProcessor, without a database, and of store round trips on a real server."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memoria_pg.cli import cli
from memoria_pg.config import DEFAULT_MEMORY_TYPES
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.entities import entity_key
from memoria_pg.core.text import normalize, tokenize
from memoria_pg.errors import InputError
from memoria_pg.query.processor import QueryProcessor
from tests.tenant_tables import CORE_TENANT_TABLES

REPO = Path(__file__).resolve().parents[1]
# What a failed write must leave empty: the memories and what is derived from them (the access
# statistics and the history are written by other operations).
WRITTEN_TABLES = tuple(sorted(CORE_TENANT_TABLES - {"memory_access", "memory_history"}))
MAX_QUERY = 80  # a small limit, so generated queries cross it
SURROGATES = st.characters(categories=["Cs"])
# Pieces the rules react to: quotes, possessives, names, cue phrases, whitespace of every kind.
FRAGMENTS = [
    "'s",
    "’s",
    '"',
    "“",
    "”",
    "«",
    "»",
    " ",
    "\t",
    "\n",
    "\u00a0",
    "\u2028",
    "Alice",
    "New York",
    "O'Brien",
    "Bank of America",
    "how to",
    "when did",
    "favourite",
    "my",
    "What is",
    "where does",
    "Bob",
    "live",
    "?",
    "-",
    ".",
    "ß",
    "İ",
    "ﬁ",
    "①",
    "\u0301",
    "\x00",
    "\ud800",
    "\udfff",
]
ANY_TEXT = st.lists(
    st.one_of(
        st.text(st.characters(exclude_categories=()), max_size=8),
        st.text(SURROGATES, max_size=1),
        st.sampled_from(FRAGMENTS),
    ),
    max_size=14,
).map("".join)
VALID_TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=300
).filter(str.strip)


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def invalid(text: object, tenant: object) -> bool:
    if not isinstance(text, str) or not isinstance(tenant, str):
        return True
    bad_text = not text.strip() or "\x00" in text or has_surrogate(text) or len(text) > MAX_QUERY
    bad_tenant = not tenant.strip() or "\x00" in tenant or has_surrogate(tenant) or len(tenant) > 200
    return bad_text or bad_tenant


def stored_spelling(grams: list[str]) -> list[str]:
    """An entity table that knows every other n-gram it is asked about, spelled in upper case."""
    return [g.upper() for g in grams[::2]]


# -- the QueryProcessor ------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    text=ANY_TEXT,
    tenant=st.one_of(st.just("t"), ANY_TEXT),
    lookup=st.booleans(),
    memory_type=st.one_of(st.none(), st.sampled_from(DEFAULT_MEMORY_TYPES), st.text(max_size=5)),
    speaker=st.one_of(st.none(), st.just("Maya")),
)
@example(text="the boss's\nbook", tenant="t", lookup=False, memory_type=None, speaker=None)
@example(text="x\ud800", tenant="t", lookup=False, memory_type=None, speaker=None)
@example(text='"0""0"', tenant="t", lookup=False, memory_type=None, speaker=None)  # a quoted phrase twice
@example(text="hello", tenant="t\udcff", lookup=False, memory_type=None, speaker=None)
def test_query_processor_accepts_valid_text_and_raises_only_input_error(text, tenant, lookup, memory_type, speaker):
    qp = QueryProcessor(DEFAULT_MEMORY_TYPES, stored_spelling if lookup else None, max_chars=MAX_QUERY)
    try:
        q = qp.process(text, tenant, memory_type, speaker=speaker)
    except InputError:
        assert invalid(text, tenant) or memory_type not in (None, *DEFAULT_MEMORY_TYPES)
        return
    assert not invalid(text, tenant) and memory_type in (None, *DEFAULT_MEMORY_TYPES)

    assert q.text == text and q.tenant == tenant
    assert q.normalized == normalize(text) == normalize(q.normalized)
    assert q.normalized == q.normalized.strip() and "  " not in q.normalized
    # The query's tokens are the tokenizer's, on the raw text as on the normalized one: ingestion
    # tokenizes raw content, so a token only the query side produced could never match a posting.
    assert q.tokens == tokenize(q.normalized)
    assert set(q.tokens) <= set(tokenize(text))
    assert q.memory_type_hint == memory_type or (
        memory_type is None and q.memory_type_hint in (None, *DEFAULT_MEMORY_TYPES)
    )

    known = set(stored_spelling(_grams(q.normalized))) if lookup else set()
    for name in q.entities + q.phrases:
        assert name.strip() and (name in q.normalized or name in known or name == speaker), name
    keys = [entity_key(e) or e for e in q.entities]
    assert len(keys) == len(set(keys))  # deduplicated by entity_key
    assert len(q.phrases) == len(set(q.phrases))
    assert (q.subject is None) == (q.attribute is None)
    if q.subject is not None:
        assert entity_key(q.subject) in keys

    again = qp.process(text, tenant, memory_type, speaker=speaker)
    assert again == q  # deterministic


def _grams(normalized: str) -> list[str]:
    from memoria_pg.query.processor import candidate_ngrams

    return candidate_ngrams(normalized)


@settings(max_examples=200, deadline=None)
@given(text=ANY_TEXT)
@example(text="the boss's\nbook and James's")
def test_tokenize_does_not_depend_on_whitespace(text):
    assert tokenize(text) == tokenize(normalize(text))
    spaced = text.replace(" ", "\n\t ")
    assert tokenize(spaced) == tokenize(text)


# -- store round trips on a real server --------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), VALID_TEXT
)
JSON_KEYS = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
METADATA = st.dictionaries(
    JSON_KEYS,
    st.recursive(
        JSON_SCALARS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_KEYS, inner, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
ROUND_TRIP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@ROUND_TRIP
@given(
    content=VALID_TEXT,
    tenant_prefix=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20),
    metadata=METADATA,
    memory_type=st.sampled_from(DEFAULT_MEMORY_TYPES),
    entities=st.one_of(st.none(), st.lists(VALID_TEXT.filter(lambda s: len(s) <= 200), max_size=3)),
)
@example(
    content="Zoë’s café — 東京 🚀\r\n\tend",
    tenant_prefix="ünï",
    metadata={"k": "v", "": [1, 2.5]},
    memory_type="general",
    entities=["Zoë"],
)
def test_arbitrary_unicode_round_trips_and_is_found_by_its_own_text(
    system, dsn, content, tenant_prefix, metadata, memory_type, entities
):
    tenant = f"{tenant_prefix}-{uuid.uuid4().hex}"  # a fresh tenant per example, in one database
    memory_id = system.store(content, tenant=tenant, metadata=metadata, memory_type=memory_type, entities=entities)
    assert memory_id is not None

    with psycopg.connect(dsn) as conn:  # the superuser: what is really in the table
        row = conn.execute(
            "SELECT content, tenant, metadata, memory_type FROM memoria.memories WHERE id = %s", (memory_id,)
        ).fetchone()
    assert row[0] == content and row[1] == tenant and row[3] == memory_type
    assert as_decimals(row[2]) == as_decimals(metadata)

    response = system.query(content[:4000], tenant=tenant, memory_type=memory_type, workers=["vector"], ranking=False)
    assert response.diagnostics.completed_sources == ["vector"]
    assert [c.memory_id for c in response.memories] == [memory_id]
    assert response.memories[0].content == content
    assert response.memories[0].scores["vector_distance"] == pytest.approx(0.0, abs=1e-5)


@ROUND_TRIP
@given(
    content=VALID_TEXT,
    bad=st.sampled_from(["\x00", "\ud800", "\udcff"]),
    where=st.sampled_from(
        ["content", "tenant", "metadata key", "metadata value", "entity", "attribute", "external_id"]
    ),
)
def test_nul_and_surrogates_anywhere_in_a_record_write_nothing(system, dsn, content, bad, where):
    tenant = f"t-{uuid.uuid4().hex}"
    record = {"content": content, "tenant": tenant}
    if where == "content":
        record["content"] = content + bad
    elif where == "tenant":
        record["tenant"] = tenant + bad
    elif where == "metadata key":
        record["metadata"] = {"nested": {f"k{bad}": 1}}
    elif where == "metadata value":
        record["metadata"] = {"list": ["ok", f"v{bad}"]}
    elif where == "entity":
        record["entities"] = ["Alice", f"Bo{bad}b"]
    elif where == "attribute":
        record["attributes"] = [["Alice", "colour", f"bl{bad}ue"]]
    else:
        record["external_id"] = f"id{bad}"
    good = {"content": f"a good record {uuid.uuid4().hex}", "tenant": tenant}
    with pytest.raises(InputError, match="NUL|surrogate") as info:
        system.store_many([good, record])
    assert "record 2" in str(info.value)
    assert table_counts(dsn, tenant) == dict.fromkeys(WRITTEN_TABLES, 0)


def as_decimals(value):
    """JSON with numbers as Decimals: jsonb keeps a number's decimal value, not its Python type
    (1e308 comes back as the integer 10**308), which is the documented normalization."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {str(k): as_decimals(v) for k, v in value.items()}
    return [as_decimals(v) for v in value]


def table_counts(dsn: str, tenant: str | None = None) -> dict[str, int]:
    where = "" if tenant is None else " WHERE tenant = %s"
    params = () if tenant is None else (tenant,)
    with psycopg.connect(dsn) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM memoria.{t}{where}", params).fetchone()[0] for t in WRITTEN_TABLES
        }


# -- bad input, one case at a time -------------------------------------------------------------------

FUTURE = (dt.datetime.now(dt.UTC) + dt.timedelta(days=30)).isoformat()
BAD_RECORDS = {
    "content too long": ({"content": "x" * 100_001}, "over the limit of 100000"),
    "content not a string": ({"content": 42}, "content must be a string"),
    "whitespace content": ({"content": " \t\n\u00a0"}, "content is empty"),
    "tenant too long": ({"content": "x", "tenant": "t" * 201}, "over the limit of 200"),
    "unknown memory type": ({"content": "x", "memory_type": "Episodic"}, "unknown memory_type"),
    "non-numeric importance": ({"content": "x", "importance": "very"}, "importance must be a number"),
    "boolean importance": ({"content": "x", "importance": True}, "importance must be a number"),
    "infinite importance": ({"content": "x", "importance": float("inf")}, "importance must be a number"),
    "future date": ({"content": "x", "created_at": FUTURE}, "is in the future"),
    "unparseable date": ({"content": "x", "created_at": "last tuesday"}, "not an ISO 8601"),
    "wrong vector dimension": ({"content": "x", "embedding": [0.1] * 383}, r"shape \(383,\), expected \(384,\)"),
    "vector of strings": ({"content": "x", "embedding": ["a"] * 384}, "embedding must be a list of numbers"),
    "zero vector": ({"content": "x", "embedding": [0.0] * 384}, "finite and non-zero"),
    "NaN in vector": ({"content": "x", "embedding": [float("nan")] * 384}, "finite and non-zero"),
    "entities as a string": ({"content": "x", "entities": "Alice"}, "entities must be a list"),
    "entity not a string": ({"content": "x", "entities": [7]}, "entity must be a string"),
    "pinned as a string": ({"content": "x", "pinned": "false"}, "pinned must be true or false"),
    "metadata not an object": ({"content": "x", "metadata": ["a"]}, "metadata must be a JSON object"),
    "metadata with NaN": ({"content": "x", "metadata": {"score": float("nan")}}, "not JSON-serializable"),
    "unknown field": ({"content": "x", "body": "y"}, "unknown fields"),
}


@pytest.mark.parametrize("bad, message", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_a_bad_record_is_an_input_error_and_writes_nothing(system, dsn, bad, message):
    batch = [{"content": "Maya's favourite colour is green.", "tenant": "t"}, {"tenant": "t", **bad}]
    with pytest.raises(InputError, match=message) as info:
        system.store_many(batch)
    assert str(info.value).startswith("record 2: ")
    assert table_counts(dsn) == dict.fromkeys(WRITTEN_TABLES, 0)


def test_documented_normalizations(system, dsn):
    skewed = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)  # clock skew up to a day is allowed
    ids = system.store_many(
        [
            {"content": "importance as text", "tenant": "t", "importance": "0.25"},
            {"content": "naive date", "tenant": "t", "created_at": "2024-05-01T10:00:00"},  # taken as UTC
            {"content": "near future", "tenant": "t", "created_at": skewed.isoformat()},
            {"content": "integer key", "tenant": "t", "metadata": {1: "one"}},  # JSON object keys are text
            {"content": "numeric external id", "tenant": "t", "external_id": 1234},
            {"content": "null fields", "tenant": "t", "pinned": None, "importance": None, "created_at": None},
        ]
    ).ids
    assert None not in ids
    with psycopg.connect(dsn) as conn:
        rows = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT content, importance, created_at, metadata, external_id, pinned FROM memoria.memories"
            )
        }
    assert rows["importance as text"][0] == 0.25
    assert rows["naive date"][1] == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
    assert rows["near future"][1] == skewed
    assert rows["integer key"][2] == {"1": "one"}
    assert rows["numeric external id"][3] == "1234"
    assert rows["null fields"][0] == 0.5 and rows["null fields"][4] is False


@pytest.fixture
def stored(system):
    system.store("Maya keeps a green notebook.", tenant="t")
    return system


BAD_QUERIES = {
    "empty": (("",), {}, "query is empty"),
    "whitespace": ((" \n\t\u3000",), {}, "query is empty"),
    "too long": (("x" * 4001,), {}, "query is 4001 characters; the limit is 4000"),
    "NUL": (("green\x00notebook",), {}, "NUL byte"),
    "surrogate": (("green \udcff notebook",), {}, "surrogate"),
    "not a string": ((b"green",), {}, "query must be a string"),
    "tenant with NUL": (("green",), {"tenant": "t\x00"}, "tenant must be"),
    "tenant with surrogate": (("green",), {"tenant": "t\ud800"}, "tenant must be"),
    "tenant too long": (("green",), {"tenant": "t" * 201}, "the limit is 200"),
    "unknown memory type": (("green",), {"memory_type": "notes"}, "unknown memory_type"),
    "wrong vector dimension": (("green",), {"embedding": [0.1] * 12}, r"shape \(12,\)"),
    "zero vector": (("green",), {"embedding": [0.0] * 384}, "finite and non-zero"),
    "vector of strings": (("green",), {"embedding": ["x"] * 384}, "list of numbers"),
    "unknown worker": (("green",), {"workers": ["faiss"]}, r"unknown workers \['faiss'\]"),
    "zero top_k": (("green",), {"top_k": 0}, "top_k must be a positive integer"),
    "negative top_k": (("green",), {"top_k": -3}, "top_k must be a positive integer"),
}


@pytest.mark.parametrize("args, kwargs, message", BAD_QUERIES.values(), ids=BAD_QUERIES.keys())
def test_a_bad_query_is_an_input_error(stored, dsn, args, kwargs, message):
    with pytest.raises(InputError, match=message):
        stored.query(*args, **{"tenant": "t", **kwargs})
    assert table_counts(dsn)["memories"] == 1
    assert stored.query("green notebook", tenant="t").memories  # the system is unharmed


def test_the_query_limit_is_inclusive(stored):
    assert stored.query("green " * 666 + "nb", tenant="t", ranking=False).memories  # 3998 characters
    assert stored.query("g" * 4000, tenant="t", ranking=False).diagnostics.completed_sources


# -- the CLI: a message and a non-zero exit, never a traceback ----------------------------------------


def run_cli(*args: str | bytes, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in a child process: argv bytes that are not UTF-8 arrive as surrogates, as for users."""
    return subprocess.run(
        [sys.executable, "-m", "memoria_pg.cli", *args],
        cwd=REPO,
        capture_output=True,
        check=False,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"},
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ([b"green \xff notebook"], b"surrogate"),
        (["   "], b"query is empty"),
        (["x" * 4001], b"the limit is 4000"),
        (["green", "--type", "notes"], b"unknown memory_type 'notes'"),
        (["green", "--top-k", "0"], b"top_k must be a positive integer"),
        (["green", "--workers", "vector,faiss"], b"unknown workers ['faiss']"),
        (["green", "--tenant", b"t\xfe"], b"tenant must be"),
    ],
    ids=[
        "undecodable bytes",
        "whitespace",
        "too long",
        "unknown type",
        "top-k 0",
        "unknown worker",
        "undecodable tenant",
    ],
)
def test_cli_query_with_bad_input_exits_non_zero_with_a_message(dsn, args, message):
    result = run_cli("--dsn", dsn, "query", *args)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(b"Error: ") and message in result.stderr, result.stderr
    assert b"Traceback" not in result.stderr


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def good_line(i: int) -> str:
    content = f"good memory number {i}"
    return json.dumps({"content": content, "embedding": HashEmbedder().embed([content])[0].tolist()})


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"content": "nul \\u0000 inside"}', "content contains a NUL byte"),
        ('{"content": "lone \\ud800 surrogate"}', "content contains an invalid (surrogate) character"),
        ('{"content": "x", "metadata": {"k\\udcff": 1}}', "metadata contains an invalid (surrogate) character"),
        ('{"content": "x", "tenant": "a\\u0000b"}', "tenant contains a NUL byte"),
        ('{"content": "x", "entities": ["ok", "bad\\u0000"]}', "entity contains a NUL byte"),
        ('{"content": "x", "importance": "lots"}', "importance must be a number"),
        ('{"content": "x", "embedding": [1, 2, 3]}', "embedding has shape (3,), expected (384,)"),
        ('{"content": "x", "pinned": "yes"}', "pinned must be true or false"),
        ('{"content": "x", "created_at": "3024-01-01"}', "created_at 3024-01-01T00:00:00+00:00 is in the future"),
        ('["content", "x"]', "expected a JSON object, got list"),
        ('{"content": "x",}', "invalid JSON"),
        ('{"text": "x"}', "unknown fields ['text']"),
    ],
)
def test_cli_ingest_of_a_bad_line_exits_non_zero_and_writes_nothing(dsn, tmp_path, bad_line, message):
    path = write_lines(tmp_path / "in.jsonl", [good_line(1), good_line(2), bad_line, good_line(4)])
    result = CliRunner().invoke(cli, ["--dsn", dsn, "ingest", str(path)], env={"MEMORIA_DSN": None})
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert f"Error: in.jsonl line 3: {message}" in result.output, result.output
    assert table_counts(dsn) == dict.fromkeys(WRITTEN_TABLES, 0)


def test_cli_ingest_of_invalid_utf8_names_the_line(dsn, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes((good_line(1) + "\n").encode() + b'{"content": "caf\xe9"}\n')
    result = CliRunner().invoke(cli, ["--dsn", dsn, "ingest", str(path)], env={"MEMORIA_DSN": None})
    assert result.exit_code == 1
    assert "in.jsonl line 2: not valid UTF-8" in result.output
    assert table_counts(dsn)["memories"] == 0
