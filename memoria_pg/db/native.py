"""Long statements sent in PostgreSQL's own placeholders ($1, $2, ...), converted once.

psycopg turns a statement's %(name)s placeholders into $n on every execute, and caches that work only
for statements of at most 4 kB (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH). The final CTE (7 kB
with its comments) and V3's statement (8 kB) were converted again on every query: about 0.2 ms of
client CPU each time. `native` converts a statement once (cached), without its comments (the file keeps
them; the server gets the SQL under a first line that names the file, which is what pg_stat_activity
and pg_stat_statements show), and a psycopg RawCursor sends that text as it is (`cur.execute(s.text, s.args(params))`).
The values are still parameters: only the placeholders' spelling changes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A quoted string (E'...' with backslash escapes, or '...' with '' inside), a quoted identifier, or a
# comment (-- to the end of the line, or /* ... */, not nested in our files): comments go, the rest is
# kept. A $ outside a string is refused (a dollar quote or a placeholder this converter does not read).
_TOKEN = re.compile(
    r"""(?P<string>[Ee]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*'|"(?:[^"]|"")*")"""
    r"""|(?P<comment>--[^\n]*|/\*.*?\*/)"""
    r"""|(?P<dollar>\$)""",
    re.S,
)
# psycopg's placeholders, read everywhere as psycopg reads them (also inside strings): %(name)s, and
# %% for one %; any other % is refused, as psycopg refuses it.
_PERCENT = re.compile(r"%\((?P<name>[A-Za-z_]\w*)\)s|(?P<percent>%%)|(?P<odd>%)")


@dataclass(frozen=True)
class NativeStatement:
    """A statement's text with $n placeholders, and the parameter names in their order."""

    text: str
    names: tuple[str, ...]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """The values of `params` in placeholder order."""
        missing = [name for name in self.names if name not in params]
        if missing:
            raise KeyError(f"the statement's parameters {missing} were not given")
        return [params[name] for name in self.names]


@functools.cache
def native(text: str, source: str) -> NativeStatement:
    """`text` (a statement in psycopg's %(name)s style, as our SQL files are written) without its
    comments and with $n placeholders, under a first line naming `source`. A lone % (psycopg would
    refuse it) or a $ outside a string is refused (ValueError)."""
    names: dict[str, int] = {}

    def placeholders(part: str, at: int) -> str:
        def one(m: re.Match[str]) -> str:
            if m.group("name"):
                return f"${names.setdefault(m.group('name'), len(names) + 1)}"
            if m.group("percent"):
                return "%"
            raise ValueError(f"{source}, line {text.count(chr(10), 0, at + m.start()) + 1}: a lone '%'")

        return _PERCENT.sub(one, part)

    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        out.append(placeholders(text[pos : m.start()], pos))
        pos = m.end()
        if m.lastgroup == "string":
            out.append(placeholders(m.group(), m.start()))
        elif m.lastgroup == "comment":
            out.append("\n" if m.group().startswith("--") else " ")
        else:
            line = text.count("\n", 0, m.start()) + 1
            raise ValueError(f"{source}, line {line}: '$' outside a string (a dollar quote or a $n placeholder)")
    out.append(placeholders(text[pos:], pos))
    lines = [line.rstrip() for line in "".join(out).splitlines()]
    body = "\n".join(line for line in lines if line.strip())
    return NativeStatement(f"/* memoria-pg: {source} */\n{body}", tuple(names))
