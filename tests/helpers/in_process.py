"""An example script run in the test process, as ``python examples/<name>.py argv...`` runs it: the same code path
as the command (the script file executed as ``__main__``), without a second interpreter paying the imports of torch,
transformers and the package again (about 10 s of CPU a run on the development machines).

What the run writes (file descriptors 1 and 2, ``sys.stdout`` and ``sys.stderr``, every logging handler's stream) is
captured, and the logging state the script sets up (the root logger's handlers, the levels of the loggers it sets,
transformers' verbosity and progress bars) is put back afterwards, so the next test starts as it would have.

Launch a process instead where one proves more: several processes (accelerate launch), DeepSpeed, a fresh
interpreter (what an import loads), a command line as a user types it (the demo), a process killed mid-run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import runpy
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO_ROOT


@dataclass
class ScriptRun:
    """The end of a script run, as `subprocess.CompletedProcess` gives it: exit status, standard output and error."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_script(script: str | os.PathLike, argv, cwd: str | os.PathLike | None = None, check: bool = True) -> ScriptRun:
    """Run ``script`` (a path, or the name of an example script: ``"run_clear"``) with ``argv`` in this process,
    in ``cwd``; with ``check``, a failed run fails the test with the end of its output."""
    path = Path(script) if os.sep in str(script) else REPO_ROOT / "examples" / f"{script}.py"
    argv = [str(argument) for argument in argv]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out, tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        with _captured(out, err), _logging_restored(), _working_directory(cwd), _argv([str(path), *argv]):
            returncode = _exit_status(path)
        out.seek(0)
        err.seek(0)
        run = ScriptRun(returncode, out.read(), err.read())
    if check:
        assert returncode == 0, f"{path.name} {' '.join(argv)}\nexited with {returncode}:\n{run.output[-6000:]}"
    return run


def _exit_status(path: Path) -> int:
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001  (what the interpreter would print, then exit status 1)
        traceback.print_exc()
        return 1
    return 0


@contextlib.contextmanager
def _captured(out, err):
    """File descriptor 1, sys.stdout and the logging handlers writing to it into ``out``; descriptor 2, sys.stderr and
    every other logging handler's stream into ``err``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    streams = [open(os.dup(file.fileno()), "w", buffering=1, encoding="utf-8") for file in (out, err)]  # noqa: SIM115
    handlers = [  # logging.lastResort (a _StderrHandler) writes to the sys.stderr of the moment: left as it is
        (handler, handler.stream)
        for handler in _all_handlers()
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging._StderrHandler)
    ]
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = streams
    for handler, original in handlers:
        handler.setStream(streams[0] if original in (saved_streams[0], sys.__stdout__) else streams[1])
    try:
        yield
    finally:
        for stream in streams:
            stream.flush()
        for handler, original in handlers:
            handler.setStream(original)
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for stream in streams:
            stream.close()


def _all_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger(), *(item for item in logging.Logger.manager.loggerDict.values())]
    return [handler for logger in loggers if isinstance(logger, logging.Logger) for handler in logger.handlers]


@contextlib.contextmanager
def _logging_restored():
    """Whatever the script does to logging (a handler on the root logger, levels, filters, transformers' verbosity
    and progress bars), undone when it ends."""
    import transformers

    root = logging.getLogger()
    root_handlers, root_level = root.handlers[:], root.level
    root.handlers = []  # so that the script's logging.basicConfig installs its handler, as in a fresh process
    loggers = {name: logger for name, logger in logging.Logger.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}  # fmt: skip
    states = {name: (logger.level, logger.filters[:], logger.handlers[:]) for name, logger in loggers.items()}
    verbosity = transformers.utils.logging.get_verbosity()
    progress_bars = transformers.utils.logging.is_progress_bar_enabled()
    try:
        yield
    finally:
        root.handlers, root.level = root_handlers, root_level
        for name, logger in logging.Logger.manager.loggerDict.items():
            if not isinstance(logger, logging.Logger):
                continue
            level, filters, handlers = states.get(name, (logging.NOTSET, [], []))
            logger.setLevel(level)
            logger.filters, logger.handlers = filters, handlers
        transformers.utils.logging.set_verbosity(verbosity)
        if progress_bars:
            transformers.utils.logging.enable_progress_bar()
        else:
            transformers.utils.logging.disable_progress_bar()


@contextlib.contextmanager
def _working_directory(cwd):
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _argv(argv: list[str]):
    """``sys.argv``, and the script's folder first on ``sys.path``, as ``python script`` has them."""
    saved = sys.argv, sys.path[:]
    sys.argv = argv
    sys.path.insert(0, str(Path(argv[0]).parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved
