"""LoCoMo (Maharana et al., ACL 2024): long conversations; every dialog turn is a memory.

Memory content is "Speaker: text", followed by " [shared an image: <blip_caption>]" when the turn
shared a photo (the caption is the only trace of what the image showed, and questions ask about it).
Metadata: speaker (the ingestor records it as an entity), dia_id, session number and date;
created_at is the session's date. Context (MemoryRecord.context): the `context_turns` turns before
and after it in the same session (default 2; 0 stores bare turns), because a chat turn is often
only understandable with what it answers and what answers it. One tenant per conversation (its
sample_id). Every question is a query whose answers are its evidence dia_ids; malformed ids
("D8:6; D9:17") are split on ';' and what still does not parse is skipped. Category 5
(adversarial: no answer in the conversation) is scored apart.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from .data import Dataset, Document, Query, neighbour_context, require

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = "adversarial"
_DIA_ID = re.compile(r"D\d+:\d+")
_SESSION = re.compile(r"session_(\d+)")


CONTEXT_TURNS = 2


def load(root: Path, *, context_turns: int = CONTEXT_TURNS) -> Dataset:
    path = require(root / "locomo" / "locomo.json", "LoCoMo (locomo/locomo.json)")
    conversations = json.loads(path.read_text(encoding="utf-8"))
    documents: list[Document] = []
    queries: list[Query] = []
    skipped_ids = no_evidence = 0
    for conv in conversations:
        tenant = conv["sample_id"]
        documents.extend(_turns(tenant, conv["conversation"], context_turns))
        for i, qa in enumerate(conv["qa"]):
            evidence, bad = evidence_ids(qa.get("evidence") or [])
            skipped_ids += bad
            if not evidence:
                no_evidence += 1
                continue
            queries.append(
                Query(
                    query_id=f"{tenant}/q{i}",
                    tenant=tenant,
                    text=str(qa["question"]),
                    relevant=frozenset(evidence),
                    group=CATEGORIES.get(int(qa["category"]), str(qa["category"])),
                )
            )
    notes = [
        (
            f"{len(conversations)} conversations, {len(documents)} turns; {no_evidence} questions without "
            f"evidence left out; {skipped_ids} unparseable evidence ids skipped; context: the "
            f"{context_turns} turn(s) before and after in the session"
        )
    ]
    return Dataset("locomo", "locomo", documents, queries, notes)


def evidence_ids(raw: list[str]) -> tuple[list[str], int]:
    """The dia_ids of an evidence list (split on ';'), and how many parts did not parse."""
    ids: list[str] = []
    bad = 0
    for item in raw:
        for raw_part in str(item).split(";"):
            part = raw_part.strip()
            if _DIA_ID.fullmatch(part):
                if part not in ids:
                    ids.append(part)
            elif part:
                bad += 1
    return ids, bad


def turn_content(turn: dict) -> str:
    content = f"{turn['speaker']}: {turn.get('text', '')}".strip()
    caption = (turn.get("blip_caption") or "").strip()
    return f"{content} [shared an image: {caption}]" if caption else content


def _turns(tenant: str, conversation: dict, context_turns: int) -> list[Document]:
    out = []
    sessions = sorted((int(m.group(1)), key) for key in conversation if (m := _SESSION.fullmatch(key)))
    for number, key in sessions:
        date_text = conversation.get(f"{key}_date_time")
        created = session_date(date_text)
        contents = [turn_content(turn) for turn in conversation[key]]
        for i, turn in enumerate(conversation[key]):
            out.append(
                Document(
                    doc_id=turn["dia_id"],
                    tenant=tenant,
                    content=contents[i],
                    created_at=created,
                    metadata={
                        "speaker": turn["speaker"],
                        "dia_id": turn["dia_id"],
                        "session": number,
                        "session_date": date_text,
                        "conversation": tenant,
                    },
                    context=neighbour_context(contents, i, context_turns),
                )
            )
    return out


def session_date(text: str | None) -> dt.datetime | None:
    """'1:56 pm on 8 May, 2023' -> a UTC datetime; None when absent or in another shape."""
    if not text:
        return None
    try:
        return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
