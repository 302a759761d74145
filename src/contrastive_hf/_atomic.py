"""Writing a file whole or not at all: through a temporary file beside it, renamed over it once written."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO

__all__ = ["write_atomically"]


def write_atomically(path: str | os.PathLike, write: Callable[[IO[str]], None], newline: str | None = None) -> None:
    """Call ``write(handle)`` on a temporary text file beside ``path`` (its folder is created), then rename it to
    ``path``: a failure leaves whatever was at ``path`` before, never half a file."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8", newline=newline) as handle:
            write(handle)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
