"""Lazy package exports: a name is imported from its module on first use, so that ``import contrastive_hf`` does not
pay for the Trainer, datasets or the evaluation stack until they are used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """Module ``__getattr__`` and ``__dir__`` for ``package`` that import ``exports[name]`` (a module path relative
    to the package, e.g. ``".training.trainer"``) when ``name`` is first asked for."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
