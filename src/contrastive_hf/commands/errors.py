"""The errors of an example script's user: a `UsageError` (a flag, a file it names) is one line on stderr and exit
status 2, as argparse ends a bad command line; any other error keeps its traceback, which is what a bug needs."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["UsageError", "as_usage_error", "exit_on_usage_error", "run_script"]

_Main = TypeVar("_Main", bound=Callable[..., object])


class UsageError(ValueError):
    """A mistake in how a script was called (a flag, a file it names), which the user fixes in the command:
    `exit_on_usage_error` prints it as one line, without a traceback."""


@contextmanager
def as_usage_error(hint: str = ""):
    """Within this block, a `ValueError` of library code (e.g. a column flag naming a column the data lacks) is a
    `UsageError`: one line, with ``hint`` after the library's message, no traceback."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(f"{error} {hint}".rstrip()) from error


def exit_on_usage_error(main: _Main) -> _Main:
    """Decorate an example script's ``main(argv=None)``: a `UsageError`, a missing file, a corpus without text
    (`EmptyCorpusError`) or a DeepSpeed ZeRO-3 configuration that could not save the model (`ZeroCannotSaveError`,
    refused when the trainer is built) ends the run with one line on stderr, ``<script>: error: <what was wrong>``,
    and exit status 2 (argparse's for a bad command line), whether the script runs as a command or ``main`` is called
    in process."""
    module = sys.modules.get(main.__module__)
    return _ending_usage_errors(main, lambda: getattr(module, "__file__", None) or sys.argv[0])


def run_script(main: Callable[[], object]) -> None:
    """Run ``main()`` as `exit_on_usage_error` runs a decorated ``main``, the script named by ``sys.argv[0]``."""
    _ending_usage_errors(main, lambda: sys.argv[0])()


def _ending_usage_errors(main: _Main, script_path: Callable[[], str]) -> _Main:
    @functools.wraps(main)
    def checked(*args, **kwargs):
        from ..data.reading import EmptyCorpusError
        from ..training.deepspeed_weights import ZeroCannotSaveError

        try:
            return main(*args, **kwargs)
        except (UsageError, FileNotFoundError, EmptyCorpusError, ZeroCannotSaveError) as error:
            print(f"{os.path.basename(script_path())}: error: {error}", file=sys.stderr)
            sys.exit(2)

    return checked  # type: ignore[return-value]
