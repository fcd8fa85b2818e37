"""`memoria-pg demo`: store the bundled sample memories and run a few queries against them."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources

from .config import Config
from .ingest.files import read_records

DEMO_QUERIES = (
    ("What is Maya's favourite colour?", None),
    ("Where does Jonas live?", None),
    ("How do I deploy the pipeline?", None),
    ("What should I know before cooking dinner for Maya?", None),
    ("Who is Maya's manager?", None),
)


def run_demo(config: Config, echo: Callable[[str], None]) -> None:
    from .system import MemorySystem

    path = resources.files("memoria_pg") / "data" / "sample_memories.jsonl"
    with resources.as_file(path) as file:
        records = list(read_records(file, "jsonl"))
    t0 = time.perf_counter()
    with MemorySystem(config.replace(default_tenant="demo")) as system:
        echo(f"server: {system.dsn.split('?')[0]}  graph backend: {system.graph_backend}")
        result = system.store_many([r for _, r in records], wheres=[w for w, _ in records])
        echo(
            f"stored {result.inserted} sample memories ({result.duplicates} already there) "
            f"in {time.perf_counter() - t0:.1f}s (includes loading the embedding model)"
        )
        for text, memory_type in DEMO_QUERIES:
            response = system.query(text, tenant="demo", memory_type=memory_type, top_k=3)
            d = response.diagnostics
            echo(f"\n? {text}")
            echo(
                f"  route={d.route} sources={','.join(d.completed_sources) or '-'} "
                f"candidates={d.candidate_count} {d.total_ms:.0f} ms"
            )
            for i, m in enumerate(response.memories, 1):
                echo(f"  {i}. [{m.final_score:.3f}] {m.content}  ({'+'.join(m.sources)})")
