"""Finding evaluation data in a directory laid out like SentEval's ``data/downstream``.

SentEval keeps each task in a folder of its own (``STS/STS12-en-test``, ``STS/STSBenchmark``, ``SICK``, ``MR``,
``SST/binary``, ...). Users point ``--data-dir`` at SentEval's ``data`` or ``data/downstream`` folder, or at any
folder holding the task folders (letter case is ignored, so ``sts/stsbenchmark`` is found as ``STS/STSBenchmark``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["DATA_HINT", "resolve_task_directory", "require_files", "find_case_insensitive"]

# Where the public copies come from, for error messages.
DATA_HINT = (
    "SentEval's data/downstream/get_transfer_data.bash downloads every task in this layout "
    "(https://github.com/facebookresearch/SentEval)."
)

# Roots under which SentEval's task folders may sit, relative to the directory the user gives.
_ROOTS = ("", "downstream", "data/downstream", "senteval", "SentEval/data/downstream")


def find_case_insensitive(directory: str | os.PathLike, relative: str) -> str | None:
    """The path of ``relative`` (``/``-separated) under ``directory``, matching each part case-insensitively;
    an exact match wins. None when some part is missing."""
    current = os.fspath(directory)
    for part in [p for p in relative.split("/") if p]:
        exact = os.path.join(current, part)
        if os.path.exists(exact):
            current = exact
            continue
        try:
            entries = os.listdir(current)
        except OSError:
            return None
        matches = sorted(entry for entry in entries if entry.lower() == part.lower())
        if not matches:
            return None
        current = os.path.join(current, matches[0])
    return current


def resolve_task_directory(data_dir: str | os.PathLike, task: str, folders: Sequence[str], holds: str) -> str:
    """The folder of ``task`` under ``data_dir``: the first of ``folders`` found under one of SentEval's roots.

    Raises a `FileNotFoundError` naming every place looked at and what the folder should hold (``holds``).
    """
    data_dir = os.fspath(data_dir)
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"Evaluation data directory not found: {data_dir}. {DATA_HINT}")
    tried = []
    for root in _ROOTS:
        for folder in folders:
            relative = f"{root}/{folder}" if root else folder
            found = find_case_insensitive(data_dir, relative)
            if found is not None and os.path.isdir(found):
                return found
            tried.append(os.path.join(data_dir, *relative.split("/")))
    raise FileNotFoundError(
        f"{task}: no data folder found. Looked for (letter case ignored): {', '.join(tried)}. The folder should hold "
        f"{holds}. {DATA_HINT}"
    )


def require_files(task: str, directory: str, names: Sequence[str], hint: str = DATA_HINT) -> list[str]:
    """The paths of ``names`` in ``directory`` (letter case ignored); a `FileNotFoundError` names the missing folder,
    or the missing files, and ends with ``hint`` (where the data set's public copies come from)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{task}: folder not found: {directory} (it should hold {', '.join(names)}).")
    paths, missing = [], []
    for name in names:
        found = find_case_insensitive(directory, name)
        if found is None or not os.path.isfile(found):
            missing.append(name)
        paths.append(found)
    if missing:
        present = [name for name in names if name not in missing]
        holds = f" (it holds {', '.join(present)})" if present else ""
        raise FileNotFoundError(f"{task}: {directory} lacks {', '.join(missing)}{holds}. {hint}")
    return paths
