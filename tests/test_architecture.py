"""The layers and module sizes DESIGN.md and STYLE.md promise, checked on the source.

The import graph is built from the ast of every module under trainlens/ (no import is
run). What counts as an import: every ``import`` / ``from ... import`` statement, at module
level or inside a function (a function-level import is a real dependency, only a later
one: it still runs, and it still makes a cycle), resolved to the trainlens module it
names (``from pkg import sub`` is pkg.sub when that module exists, else pkg). Not
counted: imports under ``if TYPE_CHECKING:`` (never run; they only name types), and the
implicit import of a package's ``__init__`` when one of its submodules is imported (the
usual package layout would otherwise be a cycle everywhere).

Checked: no import cycle; no module outside trainlens/detectors imports a private module
or a private name of trainlens.detectors; a detector module imports no other detector
module (shared helpers go in private helper modules or core); core imports nothing
above core; readers import only core and readers; no module over MAX_LINES lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import trainlens

PKG = Path(trainlens.__file__).parent
MAX_LINES = 600


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the trainlens module imported
    names: tuple[str, ...]  # names taken from it (``from target import a, b``)
    line: int


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


@cache
def _imports() -> tuple[Import, ...]:
    mods = _modules()
    out: list[Import] = []
    for module, path in mods.items():
        for node in _statements(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        out.append(Import(module, alias.name, (), node.lineno))
                continue
            base = _resolve(module, path, node)
            if not base.startswith("trainlens"):
                continue
            plain: list[str] = []
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in mods:
                    out.append(Import(module, sub, (), node.lineno))
                else:
                    plain.append(alias.name)
            if plain and base in mods:
                out.append(Import(module, base, tuple(plain), node.lineno))
    return tuple(out)


def _package(module: str) -> str:
    """trainlens.gate for trainlens.gate.output; trainlens.api for trainlens.api."""
    return ".".join(module.split(".")[:2])


def _cycles() -> list[frozenset[str]]:
    """Import cycles: between modules, and between the packages (and top-level modules)
    of trainlens — two packages that import each other are one layer, not two."""
    modules: dict[str, set[str]] = {m: set() for m in _modules()}
    packages: dict[str, set[str]] = {_package(m): set() for m in _modules()}
    for imp in _imports():
        if imp.target != imp.source:
            modules[imp.source].add(imp.target)
        a, b = _package(imp.source), _package(imp.target)
        if a != b:
            packages[a].add(b)
    return _components(modules) + [
        c for c in _components(packages) if c not in _components(modules)
    ]


def _components(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[frozenset[str]] = []

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
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _edges_within(comp: frozenset[str]) -> list[str]:
    return sorted(
        f"{i.source} -> {i.target} (line {i.line})"
        for i in _imports()
        if i.source != i.target
        and (
            (i.source in comp and i.target in comp)
            or (
                _package(i.source) in comp
                and _package(i.target) in comp
                and _package(i.source) != _package(i.target)
            )
        )
    )


def test_the_graph_sees_imports() -> None:
    """The checks below are only as good as the graph: it must hold known edges."""
    edges = {(i.source, i.target) for i in _imports()}
    assert ("trainlens.core.run", "trainlens.core.names") in edges  # module level
    assert ("trainlens.api", "trainlens.detectors") in edges  # inside a function
    assert len(_modules()) > 50


def test_no_import_cycle() -> None:
    new = _cycles()
    assert not new, "import cycles:\n" + "\n".join(
        "  " + " <-> ".join(sorted(c)) + "\n    " + "\n    ".join(_edges_within(c)) for c in new
    )


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _bad(rule: str, found: list[Import]) -> str:
    return rule + ":\n" + "\n".join(f"  {i.source}:{i.line} imports {i.target}" for i in found)


def test_core_imports_nothing_above_core() -> None:
    bad = [
        i
        for i in _imports()
        if _layer(i.source) == "core" and i.target != "trainlens" and _layer(i.target) != "core"
    ]
    assert not bad, _bad("core imports above core", bad)


def test_readers_import_only_core_and_readers() -> None:
    bad = [
        i
        for i in _imports()
        if _layer(i.source) == "readers" and _layer(i.target) not in ("core", "readers")
    ]
    assert not bad, _bad("readers import beyond core", bad)


def _is_private_detector_import(i: Import) -> bool:
    if not i.target.startswith("trainlens.detectors."):
        return False
    rest = i.target.removeprefix("trainlens.detectors.").split(".")
    return any(p.startswith("_") for p in rest) or any(n.startswith("_") for n in i.names)


def test_nothing_outside_detectors_imports_their_private_parts() -> None:
    bad = [
        i
        for i in _imports()
        if not i.source.startswith("trainlens.detectors") and _is_private_detector_import(i)
    ]
    assert not bad, _bad("private detector modules or names imported from outside", bad)


def _detector_to_detector() -> list[Import]:
    from trainlens.detectors import available

    detectors = {f"trainlens.detectors.{n}" for n in available()}

    def owner(module: str) -> str | None:
        return next((d for d in detectors if module == d or module.startswith(d + ".")), None)

    return [
        i
        for i in _imports()
        if owner(i.source) is not None
        and owner(i.target) is not None
        and owner(i.source) != owner(i.target)
    ]


def test_a_detector_module_imports_no_other_detector() -> None:
    bad = [i for i in _detector_to_detector()]
    assert not bad, _bad("a detector imports another detector", bad)


def _sizes() -> dict[str, int]:
    root = PKG.parent
    return {
        str(p.relative_to(root)): len(p.read_text("utf-8").splitlines())
        for p in _modules().values()
    }


def test_no_module_over_the_size_limit() -> None:
    big = {p: n for p, n in _sizes().items() if n > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"
