"""No import loops among cheeto_like's modules (issue 32).

Every module's imports are read with ``ast`` (at module level, inside functions and
methods, under ``TYPE_CHECKING``: an import deferred into a function is still a
dependency, only a later one), resolved to cheeto_like modules, and the graph is
searched for strongly connected components. A loop means two modules each need the
other, so neither can be understood, tested or moved alone; deferring one side's import
into a function hides it from Python but not from the design.

Not edges: the body of ``if __name__ == "__main__":`` (a script entry runs as
``__main__``, never when the module is imported) and a package's implicit import of its
``__init__`` when a submodule is imported (Python's package mechanics, not a choice).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import cheeto_like

ROOT = Path(cheeto_like.__file__).parent
PACKAGE = "cheeto_like"


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``"""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    names = [test.left, *test.comparators]
    return (any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names))


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, outside a ``__main__`` guard."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_main_guard(node):
            stack.extend(getattr(node, "orelse", []))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def edges_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # ``from pkg import sub`` names the submodule; ``from mod import x``, the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for target in targets:
            if target.split(".")[0] != PACKAGE:
                continue
            resolved = _known(target, known)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: edges_of(name, path, known) for name, path in known.items()}


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def a_cycle(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """One loop through the component's first module, for the failure message."""
    inside = set(members)
    start = members[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & inside):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no loop in component {members}")


def test_graph_sees_deferred_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: a relative import inside a function is an edge, a ``__main__``
    guard's is not, and ``from pkg import sub`` points at the submodule."""
    known = {"cheeto_like.a": Path("a.py"), "cheeto_like.b": Path("b.py"),
             "cheeto_like.pkg": Path("pkg/__init__.py"), "cheeto_like.pkg.sub": Path("s.py")}
    source = ("def f():\n    from .b import x\n"
              "from .pkg import sub\n"
              "if __name__ == '__main__':\n    from . import b as main_only\n"
              "    import cheeto_like.pkg\n")
    names = [type(n).__name__ for n in _imports(ast.parse(source))]
    assert names == ["ImportFrom", "ImportFrom"]
    path = tmp_path / "a.py"
    path.write_text(source)
    assert edges_of("cheeto_like.a", path, known) == {"cheeto_like.b", "cheeto_like.pkg.sub"}
    loop = {"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}
    assert components(loop) == [["x", "y", "z"]]
    assert a_cycle(loop, ["x", "y", "z"]) == ["x", "y", "z", "x"]


def test_no_import_loops() -> None:
    graph = import_graph()
    assert len(graph) > 100 and "cheeto_like.sync.slurm.run" in graph
    found = components(graph)
    loops = [" -> ".join(a_cycle(graph, c)) for c in found]
    assert not loops, "import loops (move what both need into a module both import):\n" + \
        "\n".join(loops)
