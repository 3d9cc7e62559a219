"""The package's import graph: no cycle anywhere, and the layers point one way.

Every ``import`` of a torch_monarch module counts, at module level or
inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(__file__).resolve().parents[1] / "torch_monarch"


def _modules(package: Path) -> dict[str, Path]:
    """Module name → file, for the package's sources and its extension stubs (``_C.pyi``)."""
    out = {}
    for path in [*package.rglob("*.py"), *package.rglob("*.pyi")]:
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    modules = _modules(package)
    root = package.name

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        anchor = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = anchor
                    for _ in range(node.level - 1):
                        parent = parent.rpartition(".")[0]
                    base = f"{parent}.{base}" if base else parent
                # ``from pkg import mod`` imports the submodule; ``from mod import name`` the module.
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for name in names:
                if name == root or name.startswith(root + "."):
                    target = known(name)
                    if target != module:
                        graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_walker_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import c\n",
            "pkg/c.py": "from . import a\n",
            "pkg/d.py": "import pkg.a\n",
        },
    )
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


@pytest.mark.parametrize(
    "lower, upper",
    [
        ("torch_monarch.monarch", "torch_monarch.launch"),
        ("torch_monarch.supervision", "torch_monarch.launch"),
        ("torch_monarch.supervision", "torch_monarch.monarch"),
        ("torch_monarch.job", "torch_monarch.launch"),
        ("torch_monarch.job", "torch_monarch.monarch"),
    ],
)
def test_layers_import_downwards_only(lower: str, upper: str) -> None:
    graph = import_graph(PACKAGE)
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith(lower)
        for target in targets
        if target.startswith(upper)
    )
    assert wrong == []
