"""A corpus's files: which `datasets` builder reads each (by its extension, that of the file under a ``.gz``), and the
error naming the first bytes of one that are not UTF-8 text. What loading a corpus (`reading`) and streaming its text
(`streams`) both need."""

from __future__ import annotations

import os

__all__ = ["EXTENSION_BUILDERS", "extension", "not_utf8_error"]

# The `datasets` builder that reads a corpus file, by its extension (`extension`).
EXTENSION_BUILDERS = {"txt": "text", "text": "text", "csv": "csv", "tsv": "csv", "json": "json", "jsonl": "json"}


def not_utf8_error(path: str, offset: int, undecodable: bytes, line: int | None = None) -> ValueError:
    """The error for the bytes ``undecodable`` of ``path`` at byte ``offset`` (of line ``line``), which are not UTF-8:
    where they are, and how to convert the file."""
    name = os.path.basename(path)
    where = f"byte {offset}" + (f" (line {line})" if line is not None else "")
    if path.lower().endswith(".gz"):
        where += " of the decompressed text"
    return ValueError(
        f"{path} is not UTF-8 text: the bytes {undecodable!r} at {where} cannot be decoded. Convert the file to "
        f"UTF-8 and give the converted file (e.g. `iconv -f latin1 -t utf-8 {name} > utf8-{name}` for Latin-1 "
        "text)."
    )


def extension(path) -> str:
    """The extension of ``path`` that says what it holds (that of the file under a ``.gz``); ``txt`` without one."""
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.rsplit(".", 1)[-1] if "." in os.path.basename(name) else "txt"
