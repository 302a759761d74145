"""Packages only some features need, installed as extras: a clear error names the extra to install."""

from __future__ import annotations

import importlib

__all__ = ["require"]


def require(module: str, extra: str, feature: str) -> None:
    """Import ``module``, or raise an ImportError saying that ``feature`` needs the extra ``extra``."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{feature} needs the package {module.split('.')[0]!r}, which is not installed: "
            f'pip install "contrastive_hf[{extra}]" (or pip install {module.split(".")[0]}).'
        ) from error
