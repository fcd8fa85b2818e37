"""The layout the README's architecture section describes, checked from the source: no import cycle
in the library, the two wings apart, the ground floors below them, and functions a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "memoria_pg"
MAX_FUNCTION_LINES = 50


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every library module -> the library modules it imports (at the top or inside a function)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _submodules_edges(graph: dict[str, set[str]], src: str, dst: str) -> list[tuple[str, str]]:
    inside = lambda module, pkg: module == pkg or module.startswith(pkg + ".")  # noqa: E731
    return [(a, b) for a, targets in graph.items() if inside(a, src) for b in targets if inside(b, dst)]


def test_no_import_cycle_in_the_library():
    # A package's __init__ re-exporting its own modules is not a cycle: leave those edges out.
    graph = {m: {t for t in ts if not (m.startswith(t + ".") and t != "memoria_pg")} for m, ts in _imports().items()}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("memoria_pg.query", "memoria_pg.ingest"),
        ("memoria_pg.ingest", "memoria_pg.query"),
        ("memoria_pg.ingest", "memoria_pg.ranking"),
        ("memoria_pg.core", "memoria_pg.query"),
        ("memoria_pg.core", "memoria_pg.ingest"),
        ("memoria_pg.core", "memoria_pg.db"),
        ("memoria_pg.db", "memoria_pg.query"),
        ("memoria_pg.db", "memoria_pg.ingest"),
        ("memoria_pg.ranking", "memoria_pg.query"),
        ("memoria_pg.ranking", "memoria_pg.db"),
    ],
)
def test_the_wings_do_not_import_each_other_and_the_ground_floors_import_neither(src, dst):
    assert _submodules_edges(_imports(), src, dst) == []


def test_no_library_function_is_longer_than_a_reader_can_hold():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
