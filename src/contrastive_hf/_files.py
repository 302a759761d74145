"""A user's files: reading text and JSON with errors that name the file and the line (Python's own name neither:
"'utf-8' codec can't decode byte 0xe9 in position 333", "Expecting ',' delimiter: line 1 column 22"), and telling a
local path from a Hub id."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["naming_undecodable_line", "read_json_file", "written_as_local_path", "hub_id_or_none"]


@contextmanager
def naming_undecodable_line(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[None]:
    """Around reading the text file ``path``: a `UnicodeDecodeError` becomes a `ValueError` naming the file, the
    line and the byte that is not ``encoding``, and how to convert the file."""
    try:
        yield
    except UnicodeDecodeError as error:
        where = _first_undecodable(path, encoding)
        place = f"{os.fspath(path)}:{where[0]}" if where else os.fspath(path)
        byte = f"byte 0x{where[2]:02x} at byte {where[1]} of the line" if where else error.reason
        raise ValueError(
            f"{place}: not {encoding} text ({byte}); save the file as {encoding}, e.g. "
            f"`iconv -f latin1 -t {encoding} FILE > NEW_FILE` for a Latin-1 file."
        ) from error


def _first_undecodable(path: str | os.PathLike, encoding: str) -> tuple[int, int, int] | None:
    """``(line, byte column, byte)`` of the first byte of ``path`` that is not ``encoding``, counted from 1; None
    when every line decodes on its own (an encoding whose characters span lines)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError as error:
                return number, error.start + 1, line[error.start]
    return None


def read_json_file(path: str | os.PathLike):
    """The content of the JSON file ``path``; a file that is not UTF-8 or not valid JSON is a `ValueError` naming
    the file, the line and the column."""
    with open(path, encoding="utf-8") as handle, naming_undecodable_line(path):
        text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{os.fspath(path)}:{error.lineno}:{error.colno}: not valid JSON ({error.msg}); was the file cut short "
            "or edited by hand?"
        ) from None


def written_as_local_path(name: str) -> bool:
    """Whether ``name`` (of a model, tokenizer or config) can only be a local path, never a Hub id: absolute,
    starting with . or ~, or with more slashes than a Hub id's one."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1


def hub_id_or_none(name_or_path: str | os.PathLike | None) -> str | None:
    """A Hub id for a model card's base_model; None for local folders (no local paths in cards), whether or not they
    exist on this machine (`written_as_local_path`), or from scratch."""
    if not name_or_path:
        return None
    name = os.fspath(name_or_path)
    if written_as_local_path(name) or os.path.exists(name):
        return None
    return name
