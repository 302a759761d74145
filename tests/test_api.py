"""The API a user types: the main classes at the top level, imported on first use; and each public name exported by
one module, the one that defines it (and the front doors of its folders)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import contrastive_hf

from conftest import REPO_ROOT


def test_the_public_pieces_import_from_the_package():
    from contrastive_hf import (  # noqa: F401
        ContrastiveDataCollator,
        ContrastiveForPreTraining,
        ContrastiveModel,
        ContrastiveTrainer,
        ContrastiveTrainingArguments,
        DualEncoderModel,
        MultitaskTrainer,
        PairCollator,
        QueryPassageCollator,
        SelfGuidedTrainer,
        SpanViewCollator,
        evaluate_sts,
        load_corpus,
        read_stsbenchmark,
    )

    assert set(contrastive_hf.__all__) <= set(dir(contrastive_hf))
    for name in contrastive_hf.__all__:
        assert getattr(contrastive_hf, name) is not None, name


# ---- one home for each public name ----
#
# A module exports the names its ``__all__`` lists, and exports only what it defines: a ``def``, a ``class`` or an
# assignment at its top level (not an import, and not ``NEW = OLD``, a second name for one object). The one exception
# is a package's ``__init__.py``, its front door (docs/architecture.md: the package root re-exports the public names,
# most on first use): it may export names defined in the modules of its own folder, and no others.


def every_module() -> dict[str, types.ModuleType]:
    modules = {"contrastive_hf": contrastive_hf}
    for info in pkgutil.walk_packages(contrastive_hf.__path__, "contrastive_hf."):
        modules[info.name] = importlib.import_module(info.name)
    return modules


def defined_names(module: types.ModuleType) -> set[str]:
    """The names ``module``'s top level binds by a definition (an import or ``NEW = OLD`` is none)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: set[str] = set()

    def bind(target: ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(statement.name)
            elif isinstance(statement, ast.Assign) and not isinstance(statement.value, ast.Name):
                for target in statement.targets:
                    bind(target)
            elif isinstance(statement, ast.AnnAssign) and not isinstance(statement.value, ast.Name):
                bind(statement.target)
            elif isinstance(statement, (ast.If, ast.Try)):
                visit(statement.body)
                visit(statement.orelse)
                visit(getattr(statement, "finalbody", []))
                for handler in getattr(statement, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return names


def is_front_door(module: types.ModuleType) -> bool:
    return Path(module.__file__).name == "__init__.py"


def exports() -> tuple[dict[tuple[str, int], list[str]], list[str]]:
    """``{(name, id of the object): [modules exporting it]}``, and every export that breaks the rule above."""
    modules = every_module()
    defined = {name: defined_names(module) for name, module in modules.items()}
    homes: dict[tuple[str, int], list[str]] = {}
    for module_name, module in modules.items():
        for name in getattr(module, "__all__", ()):
            homes.setdefault((name, id(getattr(module, name))), []).append(module_name)
    broken = []
    for (name, _), exporters in sorted(homes.items()):
        defining = [module for module in exporters if name in defined[module]]
        for module in exporters:
            if name in defined[module]:
                continue
            own_folder = [home for home in defining if home.startswith(f"{module}.")]
            if not (is_front_door(modules[module]) and own_folder):
                where = ", ".join(defining) or "no module that exports it"
                broken.append(f"{module} exports {name}, defined in {where}")
    return homes, broken


def test_each_public_name_is_exported_by_the_module_that_defines_it_and_its_front_doors_only():
    homes, broken = exports()
    assert not broken, "\n".join(broken)
    load_corpus = contrastive_hf.load_corpus
    assert homes["load_corpus", id(load_corpus)] == [
        "contrastive_hf",
        "contrastive_hf.data",
        "contrastive_hf.data.reading",
    ]


def test_no_code_imports_the_module_paths_kept_for_files_saved_by_0_1():
    from contrastive_hf._saved_module_paths import SAVED_MODULE_PATHS

    # an import of a.b.c names c, whichever form it takes: only the files naming one are parsed
    last_names = {path.rsplit(".", 1)[-1] for path in SAVED_MODULE_PATHS}
    found = []
    for folder in ("src", "tests", "examples", "benchmarks"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if "fixtures" in path.parts or not any(name in text for name in last_names):
                continue
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                else:
                    continue
                found += [
                    f"{path}:{node.lineno} imports {module}" for module in modules if module in SAVED_MODULE_PATHS
                ]
    assert not found, "\n".join(found)
