"""Run several example scripts one after the other in this process, as ``python script argv...`` would run each:
one ``accelerate launch`` then serves many runs (DeepSpeed's start-up is paid once).

Usage (once per process, e.g. under ``accelerate launch``): ``python run_jobs.py JOBS.json LOG_DIR [--keep-going]``.
``JOBS.json`` is a list of ``{"name": ..., "script": "examples/run_clear.py", "argv": [...]}`` (and ``"status": N``
for a job expected to end with exit status N, a run refused or stopped on purpose; ``"env": {...}``, environment
variables set, or removed where null, for the job alone). Each job's output (stdout and stderr) goes to
``LOG_DIR/<name>.rank<R>.log`` and its exit status into ``LOG_DIR/statuses.rank<R>.json``. A job ending with another
status than expected stops the run with its name and its log's end, also written to ``LOG_DIR/failure.rank<R>.txt``
for a launcher whose own output buries it (the launcher then stops the other processes, which may wait for this one
in a collective); with ``--keep-going`` (one process: no collective to leave waiting) the next job runs.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import sys
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_job(job: dict, log: Path) -> int:
    """Run ``job`` in this process with its output in ``log``; its exit status (1 for an uncaught exception)."""
    script = str(REPO_ROOT / job["script"])
    sys.argv = [script, *job["argv"]]
    with output_to(log), environment(job.get("env") or {}):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001  (in the job's log; the run stops below)
            traceback.print_exc()
            return 1
    return 0


def skip_deepspeed_shm_build() -> None:
    """Under DeepSpeed on its CPU accelerator (``DS_ACCELERATOR=cpu``), mark its shared-memory communication op
    incompatible before DeepSpeed starts its communication backend, which would otherwise compile it (two C++ files:
    41 to 107 s of both cores on the 2-core machine, at the first DeepSpeed start of every fresh environment).
    DeepSpeed uses that op only for inference's all-reduce, never in training, and a GPU never builds it: without it,
    the CPU runs take the process group's all-reduce, as a GPU's take NCCL's."""
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        return
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def settle_garbage() -> None:
    """Collect what a finished job left, then move what remains (the modules it imported) out of the garbage
    collector's reach (`gc.freeze`): the next job's Trainer collects garbage at the start of `train`, which would
    otherwise walk every object of the jobs before it."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def environment(values: dict[str, str | None]):
    """``values`` in the environment while it lasts (None: the variable removed); then the environment as it was,
    whatever the job changed."""
    saved = dict(os.environ)
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def output_to(path: Path):
    """Standard output and error (the file descriptors: every logger and print) into ``path`` while it lasts."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("w") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def main(jobs_file: str, log_dir: str, *options: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    skip_deepspeed_shm_build()
    statuses = {}
    for job in json.loads(Path(jobs_file).read_text()):
        statuses[job["name"]] = status = run_job(job, Path(log_dir) / f"{job['name']}.rank{rank}.log")
        settle_garbage()
        (Path(log_dir) / f"statuses.rank{rank}.json").write_text(json.dumps(statuses, indent=1))
        if status != job.get("status", 0) and "--keep-going" not in options:
            log = (Path(log_dir) / f"{job['name']}.rank{rank}.log").read_text()
            failure = f"job {job['name']} exited with status {status} on process {rank}; its log ends:\n{log[-2500:]}"
            (Path(log_dir) / f"failure.rank{rank}.txt").write_text(failure)
            raise SystemExit(failure)


if __name__ == "__main__":
    main(*sys.argv[1:])
