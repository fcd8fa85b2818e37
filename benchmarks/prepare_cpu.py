"""Client CPU of ingestion's per-record preparation (`memoria_pg.ingest.records.prepare`) on real text.

    python benchmarks/prepare_cpu.py                         # this checkout, every set
    python benchmarks/prepare_cpu.py --compare ade5c6b       # a git revision side by side
    python benchmarks/prepare_cpu.py --sets scifact --limit 500 --profile

Records are the evaluation sets' memories, read where they lie (--data, default MEMORIA_EVAL_DATA):
the SciFact, HotpotQA and MS MARCO corpora (title, blank line, text) and the LoCoMo dialog turns
(with their speaker and context). Each record is prepared --repeat times; its CPU time
(time.process_time_ns) is the median of those, and a set's figure is the median over its records
(and their mean). The extraction steps inside `prepare` are timed the same way on the content:
`extract_entities`, `extract_attributes`, `tokenize` and `normalize`.

With --compare REV the library of that revision (`git archive REV memoria_pg`, imported under another
name from a temporary folder; this checkout is not touched) is measured in the same process, the two
alternating per repetition (old then new, then new then old), and the outputs of both are checked
identical for every record: each field of `Prepared` (terms in their order), and the extraction
functions on the content and on the set's queries (which take the query path).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime as dt
import importlib
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETS = ("scifact", "hotpotqa", "msmarco", "locomo")
STEPS = ("prepare", "extract_entities", "extract_attributes", "tokenize", "normalize")


@dataclasses.dataclass
class Library:
    """One version of the library: the modules the measurement calls."""

    label: str
    records: ModuleType
    entities: ModuleType
    text: ModuleType
    types: ModuleType

    @classmethod
    def load(cls, label: str, package: str) -> Library:
        def module(name: str) -> ModuleType:
            return importlib.import_module(f"{package}.{name}")

        return cls(label, module("ingest.records"), module("core.entities"), module("core.text"), module("core.types"))

    def rules(self) -> Any:
        return self.records.RecordRules(
            memory_types=("semantic", "episodic"),
            default_type="semantic",
            default_tenant="default",
            dim=384,
            max_chars=100_000,
        )

    def calls(self, doc: Any, now: dt.datetime) -> dict[str, Callable[[], Any]]:
        """One zero-argument call per step; `prepare` gets a fresh record (it normalizes it in place)."""
        rules = self.rules()
        ents, text, content = self.entities, self.text, doc.content
        return {
            "prepare": lambda: self.records.prepare(self.record(doc), "record", now, rules),
            "extract_entities": lambda: ents.extract_entities(content),
            "extract_attributes": lambda: ents.extract_attributes(content, speaker=doc.metadata.get("speaker")),
            "tokenize": lambda: text.tokenize(content),
            "normalize": lambda: text.normalize(content),
        }

    def record(self, doc: Any) -> Any:
        return self.types.MemoryRecord(
            content=doc.content,
            tenant=doc.tenant,
            metadata=dict(doc.metadata),
            created_at=doc.created_at,
            context=doc.context,
        )


def revision_package(rev: str, into: Path) -> str:
    """The package of revision `rev` extracted into `into` as memoria_pg_<rev>; its importable name."""
    name = "memoria_pg_" + "".join(ch if ch.isalnum() else "_" for ch in rev)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, "memoria_pg"], check=True, capture_output=True)
    with tarfile.open(fileobj=BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    (into / "memoria_pg").rename(into / name)
    sys.path.insert(0, str(into))
    return name


@dataclasses.dataclass
class Doc:
    tenant: str
    content: str
    metadata: dict[str, Any]
    created_at: dt.datetime | None
    context: str | None


def load_set(root: Path, name: str, limit: int) -> tuple[list[Doc], list[str]]:
    """(records, query texts) of an evaluation set, the first `limit` of each (0: all)."""
    from evals import beir, locomo

    dataset = locomo.load(root) if name == "locomo" else beir.load(root, name)
    docs = [
        Doc(d.tenant, d.content, dict(d.metadata), d.created_at, d.context) for d in dataset.documents[: limit or None]
    ]
    return docs, [q.text for q in dataset.queries[: limit or None]]


def measure(libraries: Sequence[Library], docs: Sequence[Doc], repeat: int) -> dict[str, dict[str, list[list[int]]]]:
    """{library label: {step: [[ns of each repetition] per record]}}, the libraries alternating."""
    now = dt.datetime.now(dt.UTC)
    calls = [[lib.calls(doc, now) for doc in docs] for lib in libraries]
    times: dict[str, dict[str, list[list[int]]]] = {
        lib.label: {step: [[] for _ in docs] for step in STEPS} for lib in libraries
    }
    clock = time.process_time_ns
    for rep in range(repeat):
        order = range(len(libraries)) if rep % 2 == 0 else reversed(range(len(libraries)))
        for k in order:
            per_step = times[libraries[k].label]
            for step in STEPS:
                samples = per_step[step]
                for i, doc_calls in enumerate(calls[k]):
                    call = doc_calls[step]
                    start = clock()
                    call()
                    samples[i].append(clock() - start)
    return times


def same_outputs(old: Library, new: Library, docs: Sequence[Doc], queries: Sequence[str]) -> tuple[int, list[str]]:
    """(records checked, differences) between two libraries' outputs on every record and query."""
    now = dt.datetime.now(dt.UTC)
    differences: list[str] = []
    for i, doc in enumerate(docs):
        old_calls, new_calls = old.calls(doc, now), new.calls(doc, now)
        a = _prepared_fields(old_calls["prepare"]())
        b = _prepared_fields(new_calls["prepare"]())
        for step in STEPS[1:]:
            a[step], b[step] = old_calls[step](), new_calls[step]()
        differences += [f"record {i}: {field}" for field in a if a[field] != b[field]]
    for i, query in enumerate(queries):
        old_calls, new_calls = _query_calls(old, query), _query_calls(new, query)
        differences += [f"query {i}: {step}" for step in old_calls if old_calls[step]() != new_calls[step]()]
    return len(docs), differences


def _prepared_fields(prepared: Any) -> dict[str, Any]:
    fields = {f.name: getattr(prepared, f.name) for f in dataclasses.fields(prepared)}
    fields["record"] = dataclasses.astuple(fields["record"])
    fields["terms"] = list(fields["terms"].items())  # the order too
    return fields


def _query_calls(lib: Library, query: str) -> dict[str, Callable[[], Any]]:
    ents, text = lib.entities, lib.text
    normalized = text.normalize(query)
    return {
        "query normalize": lambda: text.normalize(query),
        "query tokenize": lambda: text.tokenize(normalized),
        "query extract_entities": lambda: ents.extract_entities(normalized),
        "query extract_attributes": lambda: ents.extract_attributes(normalized),
    }


def median_us(samples: list[list[int]]) -> tuple[float, float]:
    """(median over records, mean over records) of each record's median over repetitions, in µs."""
    per_record = [statistics.median(s) / 1000 for s in samples]
    return statistics.median(per_record), statistics.fmean(per_record)


def profile(lib: Library, docs: Sequence[Doc], top: int) -> None:
    now = dt.datetime.now(dt.UTC)
    calls = [lib.calls(doc, now)["prepare"] for doc in docs]
    profiler = cProfile.Profile()
    profiler.enable()
    for call in calls:
        call()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=os.environ.get("MEMORIA_EVAL_DATA") or REPO.parent / "shared/eval")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated, of " + ", ".join(SETS))
    parser.add_argument("--limit", type=int, default=1000, help="records (and queries) per set; 0: all")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of every record (alternating)")
    parser.add_argument("--compare", metavar="REV", help="a git revision measured side by side")
    parser.add_argument("--profile", action="store_true", help="cProfile prepare over each set (this checkout)")
    parser.add_argument("--top", type=int, default=25, help="functions the profile lists")
    args = parser.parse_args(argv)

    new = Library.load("this checkout", "memoria_pg")
    with tempfile.TemporaryDirectory(prefix="memoria-prepare-") as tmp:
        libraries = [new]
        if args.compare:
            libraries = [Library.load(args.compare, revision_package(args.compare, Path(tmp))), new]
        failed = False
        for name in args.sets.split(","):
            docs, queries = load_set(args.data, name, args.limit)
            chars = statistics.median(len(d.content) for d in docs)
            print(f"\n## {name}: {len(docs)} records (median {chars:.0f} characters), {args.repeat} repetitions")
            if args.profile:
                profile(new, docs, args.top)
            if args.compare:
                checked, differences = same_outputs(libraries[0], new, docs, queries)
                failed |= bool(differences)
                verdict = "identical" if not differences else f"{len(differences)} DIFFERENCES: {differences[:10]}"
                print(f"outputs: {checked} records and {len(queries)} queries checked, {verdict}")
            times = measure(libraries, docs, args.repeat)
            header = "| step | " + " | ".join(f"{lib.label} median (mean) µs" for lib in libraries)
            print(header + (" | new/old |" if args.compare else " |"))
            print("|---" * (len(libraries) + 1 + bool(args.compare)) + "|")
            for step in STEPS:
                figures = [median_us(times[lib.label][step]) for lib in libraries]
                row = " | ".join(f"{m:.1f} ({mean:.1f})" for m, mean in figures)
                ratio = f" | {figures[1][0] / figures[0][0]:.2f} |" if args.compare else " |"
                print(f"| {step} | {row}{ratio}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
