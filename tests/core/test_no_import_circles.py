"""No import circle between modules of moe_tui (quick tier: grimp reads the source, nothing runs).

import-linter's `acyclic_siblings` contract (pyproject.toml) forbids circles between the packages at
every level; this test asks the stricter question for single modules: is there any module A that
imports B (directly or through others) while B imports A? Imports inside functions count (they are
circles that only wait for a call); imports under TYPE_CHECKING do not (they never run).
"""

from __future__ import annotations

import grimp


def _circles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("moe_tui", exclude_type_checking_imports=True)
    modules = {m for m in graph.modules if m.startswith("moe_tui")}
    assert len(modules) > 100, f"the scan saw only {len(modules)} modules"  # an empty graph would pass anything
    circles = _circles(graph, modules)
    assert not circles, "import circles (each list imports itself back):\n" + "\n".join(map(" -> ".join, circles))


def test_the_circle_finder_finds_a_circle():
    """The finder itself: a two-module circle in a hand-made graph is found, a chain is not."""
    graph = grimp.ImportGraph()
    for name in ("p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert _circles(graph, {"p.a", "p.b", "p.c"}) == []
    graph.add_import(importer="p.c", imported="p.a")
    assert _circles(graph, {"p.a", "p.b", "p.c"}) == [["p.a", "p.b", "p.c"]]
