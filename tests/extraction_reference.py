"""The attribute extraction as plain reference: every pattern run over the whole text, first match
wins, in text order (what memoria_pg.core.entities.extract_attributes computes faster), for tests that
check a faster or changed formulation against the one it replaces."""

from __future__ import annotations

import re

from memoria_pg.core import entities


def attributes_with(
    patterns: list[tuple[re.Pattern[str], str | None]], text: str, speaker: str | None
) -> list[tuple[str, str, str]]:
    """extract_attributes with `patterns` (compiled, with their attribute) instead of the library's."""
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, tuple[str, str, str]]] = []
    for pattern, attribute in patterns:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            triple = entities._triple(m, attribute, speaker)
            if triple is not None:
                taken.append((m.start(), m.end()))
                found.append((m.start(), triple))
    found.sort(key=lambda item: item[0])
    return list(dict.fromkeys(triple for _, triple in found))
