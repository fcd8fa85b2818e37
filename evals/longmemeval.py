"""LongMemEval S (Wu et al., ICLR 2025): each question has its own haystack of chat sessions.

Every turn of a question's haystack is a memory of one tenant per question (the question id).
Content is the turn's text; metadata holds the role, session id and date, and created_at is the
session's date. Context (MemoryRecord.context): the `context_turns` turns before and after it in its
session (default 1: the turns here are long, an assistant's answer often a few hundred words; 0
stores bare turns). A turn's doc_id is "<session id>:<turn index>". The answers are the turns marked
has_answer (questions without any are left out of turn recall) and the answer sessions.
Turn recall is reported both as LongMemEval's recall_any@k (some has_answer turn in the top k: the
convention the BM25 baseline of 0.757 uses) and as the share of has_answer turns in the top k.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

from .data import Dataset, Document, Query, neighbour_context, require

FILE = "longmemeval/longmemeval_s_dev.jsonl.gz"


CONTEXT_TURNS = 1


def load(root: Path, *, context_turns: int = CONTEXT_TURNS) -> Dataset:
    path = require(root / FILE, f"LongMemEval S ({FILE})")
    documents: list[Document] = []
    queries: list[Query] = []
    empty = repeated = 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    for item in items:
        tenant = str(item["question_id"])
        relevant: set[str] = set()
        seen: set[str] = set()
        for session_id, date_text, turns in zip(
            item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
        ):
            if session_id in seen:  # a haystack may list a session twice: its turns are stored once
                repeated += 1
                continue
            seen.add(session_id)
            created = session_date(date_text)
            kept = []  # (turn index, turn) of the turns with text
            for i, turn in enumerate(turns):
                if turn.get("has_answer"):
                    relevant.add(turn_id(session_id, i))
                if str(turn.get("content") or "").strip():
                    kept.append((i, turn))
                else:
                    empty += 1
            contents = [str(turn["content"]) for _, turn in kept]
            for k, (i, turn) in enumerate(kept):
                documents.append(
                    Document(
                        doc_id=turn_id(session_id, i),
                        tenant=tenant,
                        content=contents[k],
                        created_at=created,
                        metadata={
                            "role": turn.get("role"),
                            "session_id": session_id,
                            "session_date": date_text,
                            "turn": i,
                        },
                        context=neighbour_context(contents, k, context_turns),
                    )
                )
        queries.append(
            Query(
                query_id=tenant,
                tenant=tenant,
                text=str(item["question"]),
                relevant=frozenset(relevant),
                group=str(item["question_type"]),
                answer_sessions=frozenset(map(str, item["answer_session_ids"])),
                reference_time=session_date(item.get("question_date")),
            )
        )
    without = sum(1 for q in queries if not q.relevant)
    notes = [
        (
            f"{len(queries)} questions, {len(documents)} turns ({empty} empty turns skipped, {repeated} "
            f"repeated sessions stored once); "
            f"{without} questions have no has_answer turn (left out of turn recall); context: the "
            f"{context_turns} turn(s) before and after in the session"
        )
    ]
    return Dataset("longmemeval", "longmemeval", documents, queries, notes)


def turn_id(session_id: str, index: int) -> str:
    return f"{session_id}:{index}"


def session_of(doc_id: str) -> str:
    return doc_id.rsplit(":", 1)[0]


def session_date(text: str | None) -> dt.datetime | None:
    """'2023/04/21 (Fri) 00:28' -> a UTC datetime; None when absent or in another shape."""
    if not text:
        return None
    try:
        return dt.datetime.strptime(text.strip(), "%Y/%m/%d (%a) %H:%M").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
