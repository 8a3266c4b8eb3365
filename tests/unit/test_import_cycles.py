"""No import cycle in the package: module-level imports and the imports inside functions alike.

A cycle hidden in a function (module a imports b at its top, b imports a
when one of its functions runs) still ties the two modules together: neither
can be read, tested or moved without the other, and the layers contract
cannot see it within one package. grimp reads every import statement of the
package, those in function bodies too. Imports under `if TYPE_CHECKING:` are
left out: they never run, and they are how an annotation names a class of a
module that imports this one.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (the strongly connected
    components of more than one module, by Tarjan's algorithm without recursion), each sorted, in name order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, todo = work[-1]
            nxt = next(todo, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def describe(graph: grimp.ImportGraph, group: list[str]) -> str:
    """One way round the group, each import with its line: where to start untying it."""
    first = group[0]
    back = next(m for m in sorted(graph.find_modules_that_directly_import(first)) if m in group)
    chain = graph.find_shortest_chain(importer=first, imported=back) or (first, back)
    path = [*chain, first]
    lines = []
    for importer, imported in pairwise(path):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
        lines.append(f"  {importer} → {imported} ({where})")
    return f"{len(group)} modules: {', '.join(group)}\n" + "\n".join(lines)


def test_no_module_of_the_package_imports_itself_through_others() -> None:
    graph = grimp.build_graph("qualitycheck", include_external_packages=False, exclude_type_checking_imports=True, cache_dir=None)
    found = cycles(graph)
    assert not found, "import cycles in qualitycheck:\n" + "\n".join(describe(graph, group) for group in found)


def test_a_cycle_through_an_import_inside_a_function_is_found_and_named() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="from pkg.b import run")
    graph.add_import(importer="pkg.b", imported="pkg.c", line_number=4, line_contents="from pkg.c import log")
    graph.add_import(importer="pkg.c", imported="pkg.a", line_number=9, line_contents="from pkg.a import helper")  # inside a function
    graph.add_import(importer="pkg.d", imported="pkg.a", line_number=1, line_contents="import pkg.a")
    found = cycles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.c"]]
    text = describe(graph, found[0])
    assert "pkg.c → pkg.a (line 9: from pkg.a import helper)" in text and "pkg.d" not in text
