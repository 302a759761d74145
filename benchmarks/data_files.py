"""Where the benchmark scripts find their data, and the message they stop with when it is missing.

The public data sets (STS, SICK, SNLI, SentEval's transfer tasks, Wikipedia) are kept in ``../shared/data`` beside
the checkout on the development machines; that folder's README.md gives each one's source and layout. It is not part
of the repository: a clone elsewhere has it only if someone puts it there. The Wikipedia sentences the CPU
benchmarks train on do ship with the repository (``examples/demo/data/wiki1m_sample.txt`` is the same file as
``../shared/data/corpus/wiki1m_sample.txt``), so those benchmarks run on any clone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

__all__ = ["SHARED_DATA", "WIKI1M_SAMPLE", "exit_missing_data", "require_files"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# SimCSE's first 11,913 Wikipedia sentences, one per line: byte for byte ../shared/data/corpus/wiki1m_sample.txt
WIKI1M_SAMPLE = REPO / "examples" / "demo" / "data" / "wiki1m_sample.txt"


def exit_missing_data(problem: str, what_to_give: str) -> NoReturn:
    """Stop the script with ``problem``, where the public data sets live and ``what_to_give`` (the option and what
    the folder or file it names must hold); a message, not a traceback."""
    script = os.path.basename(sys.argv[0]) or "benchmark"
    sys.exit(
        f"{script}: {problem}\n"
        f"The public data sets this needs are kept in {SHARED_DATA} on the development machines (that folder's "
        f"README.md gives each one's source and layout); it is not part of the repository. Put them there (beside "
        f"the checkout), or give {what_to_give}."
    )


def require_files(paths: Iterable[str | os.PathLike], what_to_give: str) -> None:
    """`exit_missing_data` naming each of ``paths`` that does not exist; nothing when all do."""
    missing = [os.fspath(path) for path in paths if not os.path.exists(path)]
    if missing:
        exit_missing_data(f"missing data: {', '.join(missing)}.", what_to_give)
