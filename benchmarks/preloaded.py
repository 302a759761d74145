"""Python commands run in processes that start with torch, transformers and contrastive_hf imported.

A benchmark that runs many training or evaluation commands (reproduce.py: a dozen example-script runs, each
evaluated) pays each fresh interpreter's imports, about 12 s of CPU on a 2-core machine, once per command. Here each
command runs in a child of a fork server that imported them once (`multiprocessing`'s ``forkserver``: a process of
its own that has run nothing but those imports, so no thread, OpenMP pool or accelerator state is forked), as the
command would run in a fresh interpreter otherwise: ``sys.argv``, ``__main__``, the working folder, the environment
and the output (the log file) are its own, and its exit status is the command's.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

__all__ = ["PRELOAD", "run_python"]

# What the fork server imports once: what every example script and `contrastive-hf` command imports first.
PRELOAD = ["torch", "transformers", "datasets", "contrastive_hf"]
PRELOAD += [f"contrastive_hf.commands.{name}" for name in ("errors", "arguments", "logs", "run_end")]

_context = None


def _fork_server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def run_python(command: list[str], log: Path, env: dict[str, str], cwd: Path, timeout: float | None = None) -> int:
    """Run ``command`` (``[sys.executable, script.py, *args]``, ``[sys.executable, "-m", module, *args]`` or
    ``[sys.executable, "-c", code, *args]``) with ``env`` as its environment and ``cwd`` as its working folder, its
    output appended to ``log``; its exit status. A command still running after ``timeout`` seconds is killed, and
    `subprocess.TimeoutExpired` raised."""
    if command[0] != sys.executable:
        raise ValueError(f"run_python runs Python commands of this interpreter, got {command[0]!r}.")
    process = _fork_server().Process(target=_run, args=(command[1:], str(log), dict(env), str(cwd)))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        raise subprocess.TimeoutExpired(command, timeout)
    return process.exitcode


def _run(arguments: list[str], log: str, env: dict[str, str], cwd: str) -> None:
    """In the child: the command's environment, folder and output, then its ``__main__``."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    handle = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    if "OMP_NUM_THREADS" in env:  # read when torch was imported, before this process had the command's environment
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if arguments[0] == "-m":
        sys.argv = [arguments[1], *arguments[2:]]
        sys.path[0] = os.getcwd()  # as python -m puts it first
        target, run = arguments[1], runpy.run_module
        options = {"run_name": "__main__", "alter_sys": True}
    elif arguments[0] == "-c":
        sys.argv = ["-c", *arguments[2:]]
        sys.path[0] = ""
        target, options = arguments[1], {}

        def run(code):
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})

    else:
        sys.argv = list(arguments)
        sys.path[0] = os.path.dirname(os.path.abspath(arguments[0]))
        target, run, options = arguments[0], runpy.run_path, {"run_name": "__main__"}
    code = 0
    try:
        run(target, **options)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int) and exit_.code is not None:
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
