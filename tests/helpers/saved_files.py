"""What a run wrote or uploaded, read whole, and checked for what no saved or pushed byte may hold: the absolute paths
of this machine (and secrets a test names)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from conftest import REPO_ROOT


def every_file(*folders: str | os.PathLike) -> dict[str, bytes]:
    """Every file under ``folders`` (sub-folders included: each ``checkpoint-N``), by its path, with its bytes."""
    files = {}
    for folder in map(Path, folders):
        assert folder.is_dir(), f"{folder} was not written"
        files.update({str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()})
    return files


def local_paths(*paths: str | os.PathLike) -> list[str]:
    """``paths`` (a run's base model, output and working folders) and the other absolute paths of this machine that
    a saved file could leak: the repository, the home folder, the Python environment, pytest's temporary folders."""
    machine = [REPO_ROOT, os.path.expanduser("~") + "/", sys.prefix, "/tmp/pytest-of"]
    return [str(path) for path in (*paths, *machine)]


def assert_holds_none(files: dict[str, bytes], forbidden: list[str]) -> None:
    """No byte of any of ``files`` (`every_file`, or what was uploaded) spells one of the ``forbidden`` strings."""
    for name, content in files.items():
        for text in forbidden:
            assert text.encode() not in content, f"{name} holds {text!r}"
