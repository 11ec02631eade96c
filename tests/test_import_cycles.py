"""No import cycles between the modules of gridctl.

import-linter's contracts order the packages; a cycle between two modules of one package
(or of two siblings) slips between them. This test reads the source with ``ast``, draws
the graph of module-level imports (``if TYPE_CHECKING:`` blocks included: a cycle for the
type checker is still a cycle for the reader; imports inside functions are not counted,
they run late) and fails on every strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# No cycle is allowed. A cycle that must be tolerated while it is removed is listed here
# (as a frozenset of module names) with why; an entry no longer in a cycle fails the test.
ALLOWED_CYCLES: tuple[frozenset[str], ...] = ()

Graph = Mapping[str, frozenset[str]]


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name (a package by its own)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: anywhere but inside a function."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))


def imported_modules(
    node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: Mapping[str, Path]
) -> set[str]:
    """The known modules one import statement names (``from a import b``: ``a.b`` when it
    is a module, else ``a``)."""
    if isinstance(node, ast.Import):
        return {owner for alias in node.names if (owner := nearest(alias.name, known))}
    base = node.module or ""
    if node.level:
        anchor = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    named = set()
    for alias in node.names:
        owner = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else nearest(base, known)
        if owner:
            named.add(owner)
    return named


def nearest(name: str, known: Mapping[str, Path]) -> str | None:
    """``name`` or its closest enclosing module that is known (None: not ours)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, package: str) -> dict[str, frozenset[str]]:
    known = module_files(root, package)
    graph = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets: set[str] = set()
        for node in module_level_imports(tree):
            targets |= imported_modules(node, module, path.name == "__init__.py", known)
        graph[module] = frozenset(targets - {module})
    return graph


def strongly_connected(graph: Graph) -> list[frozenset[str]]:
    """Tarjan's components of ``graph``, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(frozenset(component))
    return components


def cycles(graph: Graph) -> list[frozenset[str]]:
    return sorted((c for c in strongly_connected(graph) if len(c) > 1), key=sorted)


def one_loop(graph: Graph, component: frozenset[str]) -> list[str]:
    """A closed path through ``component``, to name the imports a fix has to cut."""
    start = min(component)
    seen = {start: ""}
    frontier = [start]
    while frontier:  # breadth first back to ``start``: the shortest loop through it
        nxt = []
        for node in frontier:
            for step in sorted(graph[node] & component):
                if step == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(seen[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if step not in seen:
                    seen[step] = node
                    nxt.append(step)
        frontier = nxt
    return sorted(component)


def allowed(component: frozenset[str]) -> bool:
    return any(component <= cycle for cycle in ALLOWED_CYCLES)


def test_gridctl_has_no_import_cycles() -> None:
    graph = import_graph(ROOT, "gridctl")
    assert len(graph) > 100  # the whole package was read
    found = [c for c in cycles(graph) if not allowed(c)]
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(one_loop(graph, c)) for c in found)


def test_the_cycle_allowlist_names_only_cycles_that_still_exist() -> None:
    in_cycles = set().union(*cycles(import_graph(ROOT, "gridctl")))
    for cycle in ALLOWED_CYCLES:
        stale = sorted(cycle - in_cycles)
        assert not stale, f"no longer in a cycle, delete them from the allowlist: {stale}"


def write_package(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_graph_finds_cycles_at_module_level_only(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "from . import c\nthing = 1\n",
            "pkg/c.py": "import pkg.a\n",  # a -> b -> c -> a
            "pkg/typed.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.sub.deep import Deep\n"
            ),
            "pkg/sub/__init__.py": "",
            "pkg/sub/deep.py": "from ..typed import x\nclass Deep: ...\n",  # typed <-> deep
            "pkg/late.py": "def f():\n    from pkg import early\n",
            "pkg/early.py": "from pkg.late import f\n",  # late -> early only inside f
            "pkg/alone.py": "import os\nfrom pkg.sub import deep\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.late"] == frozenset()
    assert graph["pkg.alone"] == {"pkg.sub.deep"}
    assert cycles(graph) == [
        frozenset({"pkg.a", "pkg.b", "pkg.c"}),
        frozenset({"pkg.sub.deep", "pkg.typed"}),
    ]
    assert one_loop(graph, cycles(graph)[0]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"a"}}, []),  # a module naming itself is no cycle between modules
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}}, [{"a", "b"}, {"c", "d"}]),
    ],
)
def test_components(edges: dict[str, set[str]], expected: list[set[str]]) -> None:
    graph = {k: frozenset(v) for k, v in edges.items()}
    assert cycles(graph) == [frozenset(c) for c in expected]
