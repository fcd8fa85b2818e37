"""BEIR-format sets (SciFact, HotpotQA, MS MARCO): every corpus document is a memory of one tenant.

Memory content is the title, a blank line, then the text. Queries are those the qrels judge
(SciFact: the 809 train queries; HotpotQA: the 103 dev questions; MS MARCO: the 43 judged TREC DL
2019 queries of the subset). A qrels file may or may not start with a header line (MS MARCO's has
none); its grades are kept as the queries' gains, so nDCG is graded as BEIR computes it (SciFact and
HotpotQA judge every document 1).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from .data import Dataset, Document, Query, require

QRELS = {"scifact": "qrels/train.tsv", "hotpotqa": "qrels.tsv", "msmarco": "qrels/test.tsv"}


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
        Query(
            query_id=str(row["_id"]),
            tenant=name,
            text=str(row["text"]),
            relevant=frozenset(qrels[str(row["_id"])]),
            grades=dict(qrels[str(row["_id"])]),
        )
        for row in _jsonl(require(folder / "queries.jsonl", f"{name} queries"))
        if str(row["_id"]) in qrels
    ]
    notes = [f"{len(documents)} documents, {len(queries)} judged queries ({QRELS[name]})"]
    return Dataset(name, "beir", documents, queries, notes)


def doc_content(row: dict) -> str:
    title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
    return f"{title}\n\n{text}" if title and text else (title or text)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {corpus id judged relevant (grade > 0): its grade}. The header line
    (`query-id corpus-id score`) is optional: a first row whose grade is not a number is one."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.reader(f, delimiter="\t")):
            if not row or (i == 0 and not row[-1].strip().lstrip("-").isdigit()):
                continue
            query_id, doc_id, grade = row[0], row[-2], int(row[-1])
            if grade > 0:
                qrels.setdefault(str(query_id), {})[str(doc_id)] = grade
    return qrels


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
