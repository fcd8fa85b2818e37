"""BEIR-format sets (SciFact, HotpotQA): every corpus document is a memory of one tenant.

Memory content is the title, a blank line, then the text. Queries are those the qrels judge
(SciFact: the 809 train queries; HotpotQA: the 103 dev questions).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from .data import Dataset, Document, Query, require

QRELS = {"scifact": "qrels/train.tsv", "hotpotqa": "qrels.tsv"}


def load(root: Path, name: str) -> Dataset:
    folder = require(root / name, f"{name} (BEIR folder)")
    qrels = read_qrels(require(folder / QRELS[name], f"{name} qrels"))
    documents = [
        Document(
            doc_id=str(row["_id"]), tenant=name, content=doc_content(row), metadata={"title": row.get("title") or ""}
        )
        for row in _jsonl(require(folder / "corpus.jsonl", f"{name} corpus"))
    ]
    queries = [
        Query(query_id=str(row["_id"]), tenant=name, text=str(row["text"]), relevant=frozenset(qrels[str(row["_id"])]))
        for row in _jsonl(require(folder / "queries.jsonl", f"{name} queries"))
        if str(row["_id"]) in qrels
    ]
    notes = [f"{len(documents)} documents, {len(queries)} judged queries ({QRELS[name]})"]
    return Dataset(name, "beir", documents, queries, notes)


def doc_content(row: dict) -> str:
    title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
    return f"{title}\n\n{text}" if title and text else (title or text)


def read_qrels(path: Path) -> dict[str, set[str]]:
    """query id -> corpus ids judged relevant (score > 0)."""
    qrels: dict[str, set[str]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(str(row["query-id"]), set()).add(str(row["corpus-id"]))
    return qrels


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
