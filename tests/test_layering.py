"""The layering docs/architecture.md states, checked from the code: imports point down the table of wings and never
up, and no module imports, through any chain, itself.

Every import of every module under src/contrastive_hf counts: module-level, inside functions, under
``TYPE_CHECKING``, relative or absolute, and the module paths a package's lazy exports (`_lazy.lazy_exports`) name.
The order is read from the table in docs/architecture.md (its first column, top to bottom), so the docs are the one
place that states it; its "imports" column must list exactly the wings each wing imports.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from pathlib import Path

from conftest import REPO_ROOT

SOURCE_ROOT = REPO_ROOT / "src"
PACKAGE = "contrastive_hf"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"

# Import circles that are known and scheduled to go, each with the change that removes it. Nothing else may be here.
KNOWN_CYCLES: list[set[str]] = []  # none left


# ----------------------------------------------------------------------------------------------------
# Reading the imports and the stated order
# ----------------------------------------------------------------------------------------------------


def package_modules(source_root: Path, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is_package)}`` of every module of ``package`` under ``source_root``."""
    modules = {}
    for path in sorted((source_root / package).rglob("*.py")):
        parts = list(path.relative_to(source_root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _resolve(name: str, modules: Iterable[str]) -> str | None:
    """The module ``name`` is in: itself, or the nearest enclosing module (``a.b.SomeClass`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def module_graph(source_root: Path, package: str = PACKAGE) -> dict[str, dict[str, int]]:
    """``{module: {imported module of the package: line}}`` over every import the module's code holds (see the
    module docstring); an import of a package's name that is a submodule (``from . import x``) points at ``x``."""
    modules = package_modules(source_root, package)
    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}

        def add(target: str | None, line: int, edges=edges, module=module) -> None:
            if target is not None and target != module:
                edges.setdefault(target, line)

        calls_lazy_exports = any(
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports" for node in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package:
                        add(_resolve(alias.name, modules), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, is_package, node.level, node.module) if node.level else node.module
                if not source or source.split(".")[0] != package:
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    add(submodule if submodule in modules else _resolve(source, modules), node.lineno)
            elif calls_lazy_exports and isinstance(node, ast.Constant) and isinstance(node.value, str):
                # lazy_exports maps names to module paths relative to the package: ".training.trainer"
                relative = re.fullmatch(r"(\.+)([A-Za-z_][\w.]*)", node.value)
                if relative:
                    target = _absolute(module, is_package, len(relative[1]), relative[2])
                    add(target if target in modules else None, node.lineno)
        graph[module] = edges
    return graph


def stated_wings(architecture: Path = ARCHITECTURE) -> list[tuple[str, set[str]]]:
    """The wings of docs/architecture.md's table, top to bottom, each with the wings its "imports" column names."""
    wings = []
    for line in architecture.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        folder = re.fullmatch(r"`(\w+)/`", cells[0]) if len(cells) == 3 else None
        if folder:
            wings.append((folder[1], set(re.findall(r"`(\w+)`", cells[2]))))
    return wings


def wing_of(module: str, package: str = PACKAGE) -> str | None:
    """The wing (top-level folder) ``module`` belongs to; None for the package root and its ``_*`` helpers."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1].startswith("_"):
        return None
    return parts[1]


def upward_imports(graph: dict[str, dict[str, int]], order: list[str], package: str = PACKAGE) -> list[str]:
    """Every import that points up ``order`` (wings, top first) or at the package root, and every ``_*`` helper's
    import of the package, one line each."""
    rank = {wing: index for index, wing in enumerate(order)}
    found = []
    for module, edges in sorted(graph.items()):
        wing = wing_of(module, package)
        for target, line in sorted(edges.items()):
            target_wing = wing_of(target, package)
            if target == package:
                found.append(f"{module}:{line} imports the package root {target} (a top layer nothing imports)")
            elif module != package and wing is None:
                found.append(f"{module}:{line} imports {target}: the root's helpers import nothing of the package")
            elif wing is not None and target_wing is not None and rank[target_wing] < rank[wing]:
                found.append(f"{module}:{line} imports {target}: {wing}/ may not import {target_wing}/, above it")
    return found


def import_cycles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The modules that import each other through some chain: the strongly connected components of more than one
    module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, {})))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(component)
    return cycles


def _describe(cycle: set[str], graph: dict[str, dict[str, int]]) -> str:
    edges = [f"{a} -> {b} (line {graph[a][b]})" for a in sorted(cycle) for b in sorted(graph[a]) if b in cycle]
    return "; ".join(edges)


# ----------------------------------------------------------------------------------------------------
# The package
# ----------------------------------------------------------------------------------------------------

GRAPH = module_graph(SOURCE_ROOT)
WINGS = stated_wings()
ORDER = [wing for wing, _ in WINGS]


def test_the_table_names_every_folder_of_the_package_once():
    folders = {wing_of(module) for module in GRAPH} - {None}
    assert len(ORDER) == len(set(ORDER)), ORDER
    assert set(ORDER) == folders, f"docs/architecture.md's table lists {ORDER}; the package has {sorted(folders)}"
    assert len(GRAPH) > 60  # the walk read the package, function-level imports included:
    assert "contrastive_hf.evaluation.encoders" in GRAPH["contrastive_hf.data.mining"]


def test_no_import_points_up_the_stated_order():
    upward = upward_imports(GRAPH, ORDER)
    assert not upward, "Imports against docs/architecture.md's order:\n" + "\n".join(upward)


def test_each_wing_imports_the_wings_the_table_names():
    for wing, stated in WINGS:
        actual = {wing_of(target) for module, edges in GRAPH.items() if wing_of(module) == wing for target in edges}
        actual -= {wing, None}
        assert actual == stated, f"{wing}/ imports {sorted(actual)}; docs/architecture.md says {sorted(stated)}"


def test_no_module_imports_itself_through_a_chain():
    unexpected = [cycle for cycle in import_cycles(GRAPH) if cycle not in KNOWN_CYCLES]
    assert not unexpected, "Import cycles:\n" + "\n".join(_describe(cycle, GRAPH) for cycle in unexpected)


def test_every_known_cycle_still_exists():
    """A known cycle that is gone leaves its exception behind: delete it from KNOWN_CYCLES."""
    cycles = import_cycles(GRAPH)
    assert all(known in cycles for known in KNOWN_CYCLES), f"remove from KNOWN_CYCLES: {KNOWN_CYCLES}"


# ----------------------------------------------------------------------------------------------------
# The checks themselves, on a made-up package
# ----------------------------------------------------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_function_level_lazy_and_type_checking_imports_count(tmp_path):
    root = write_package(
        tmp_path,
        {
            "__init__.py": "from ._lazy import lazy_exports\n"
            "__getattr__, __dir__ = lazy_exports(__name__, {'Trainer': '.top.trainer'})\n",
            "_lazy.py": "def lazy_exports(package, exports): ...\n",
            "_helper.py": "from .low import thing\n",
            "top/__init__.py": "",
            "top/trainer.py": "from ..low.model import Model\n",
            "low/__init__.py": "",
            "low/model.py": "def card():\n    from ..top import trainer\n",
            "low/encoders.py": "def load():\n    from .. import Model\n",
            "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import b\n",
            "low/b.py": "from . import a\n",
        },
    )
    graph = module_graph(root, "pkg")
    assert graph["pkg"] == {"pkg._lazy": 1, "pkg.top.trainer": 2}  # the lazy export is an edge
    assert upward_imports(graph, ["top", "low"], "pkg") == [
        "pkg._helper:1 imports pkg.low: the root's helpers import nothing of the package",
        "pkg.low.encoders:2 imports the package root pkg (a top layer nothing imports)",
        "pkg.low.model:2 imports pkg.top.trainer: low/ may not import top/, above it",
    ]
    assert sorted(map(sorted, import_cycles(graph))) == [
        ["pkg.low.a", "pkg.low.b"],  # inside a wing, through TYPE_CHECKING
        ["pkg.low.model", "pkg.top.trainer"],  # between wings, through a function
    ]


def test_the_docs_table_is_read_in_order(tmp_path):
    docs = tmp_path / "architecture.md"
    docs.write_text(
        "| folder | role | imports |\n|---|---|---|\n| `top/` | the top | `low`, `mid` |\n"
        "| `mid/` | the middle: `low` is not named here | `low` |\n| `low/` | the bottom | — |\n"
    )
    assert stated_wings(docs) == [("top", {"low", "mid"}), ("mid", {"low"}), ("low", set())]
