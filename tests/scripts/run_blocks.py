"""Run Python blocks of the documentation, or scripts, each in a process of its own, as pasted into (or run by) a
fresh interpreter: one interpreter imports the third-party libraries they use (torch, transformers,
sentence-transformers, datasets, peft: seconds of start-up), then each runs in a child forked from it, with a fresh
namespace, in ``cwd``. contrastive_hf itself is not imported ahead: a block imports what it uses, as a reader's
interpreter would.

Usage: ``python run_blocks.py BLOCKS.json CWD RESULTS.json``, BLOCKS.json a list of source texts, or of scripts as
``{"script": path, "argv": [...], "cwd": folder}`` (run as ``python path argv...`` in that folder, default CWD);
RESULTS.json gets, for each in order, ``{"status": exit status, "output": what it wrote, "seconds": wall time}``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import time
import traceback

import datasets  # noqa: F401
import peft  # noqa: F401
import sentence_transformers  # noqa: F401
import torch  # noqa: F401
import transformers
from transformers import modeling_utils  # noqa: F401  (transformers' lazy modules, loaded once)

transformers.AutoModel  # noqa: B018


def run_block(source: str | dict, cwd: str, log: str) -> int:
    """``source`` (a block's text, or a script: see the module docstring) in a forked child, its output appended to
    the file ``log``: the child's exit status."""
    pid = os.fork()
    if pid == 0:  # the child
        script = source if isinstance(source, dict) else None
        cwd = script.get("cwd", cwd) if script else cwd
        os.chdir(cwd)
        handle = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(handle, 1)
        os.dup2(handle, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        try:
            if script:  # what `python path argv...` sets: its arguments, and its folder first on the path
                sys.argv = [script["script"], *script.get("argv", [])]
                sys.path.insert(0, os.path.dirname(os.path.abspath(script["script"])))
                runpy.run_path(script["script"], run_name="__main__")
            else:
                sys.path.insert(0, cwd)  # what `python -c` puts first: the folder it runs in
                exec(compile(source, "<block>", "exec"), {"__name__": "__main__"})
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001  (printed, exit status 1, as python -c does)
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def main(blocks_file: str, cwd: str, results_file: str) -> None:
    results = []
    with tempfile.TemporaryDirectory() as logs:
        for index, source in enumerate(json.loads(open(blocks_file).read())):
            # A file of its own, read through a handle of its own: a process the child started may outlive it and
            # still write (multiprocessing's resource tracker warns at its exit), which must neither move where
            # this read starts nor reach the next block's output.
            log = os.path.join(logs, f"{index}.out")
            began = time.monotonic()
            status = run_block(source, cwd, log)
            seconds = round(time.monotonic() - began, 1)
            with open(log, errors="replace") as output:
                results.append({"status": status, "output": output.read(), "seconds": seconds})
    with open(results_file, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
