"""A data ledger: run example scripts with every example that reaches a collator recorded, by the id in its text.

Usage (once per process, e.g. under ``accelerate launch``): ``python ledger.py JOBS.json LEDGER_DIR``. ``JOBS.json``
is a list of ``{"name": ..., "script": "examples/run_clear.py", "argv": [...]}``; each job's script runs in turn in
this process (as ``python script argv...`` would), and every batch its collator builds is appended to
``LEDGER_DIR/<name>.rank<R>.jsonl`` as one line, ``{"epoch": the trainer's whole epochs done, "rows": [...]}``, with
for each example of the batch ``{column: [ids]}``, the ids being the numbers ``N`` of the words ``ledgerN`` that the
column's text holds (decoded from its token ids with the demo tokenizer). The test data puts ``ledgerN`` at the start
of every text of row N, so that what training saw can be counted against what the files hold, with nothing of the
library's own bookkeeping (``example_index``) trusted.
A job's output (stdout and stderr) goes to ``LEDGER_DIR/<name>.rank<R>.log``; a failing job stops the run with its
name.
Every batch is also checked against what a GPU's pinned memory needs (`helpers.gpu_contracts.unpinnable_tensors`):
a tensor that cannot be pinned fails the job, naming the collator and the tensor.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import runpy
import sys
import threading
from pathlib import Path

from transformers import AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
from helpers.gpu_contracts import unpinnable_tensors  # noqa: E402

TAG = re.compile(r"ledger(\d+)")
_depth = threading.local()  # a collator calling another (a mixture's) is recorded once, at the outermost
_trainer: dict = {}  # the ContrastiveTrainer of the job that runs


def collator_classes() -> list[type]:
    """Every collator an example script trains with."""
    from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
    from contrastive_hf.data.mixture import MixtureCollator
    from contrastive_hf.recipes.declutr import SpanViewCollator
    from contrastive_hf.recipes.dpr import QueryPassageCollator
    from contrastive_hf.recipes.sg_bert.data import SelfGuidedCollator

    return [ContrastiveDataCollator, PairCollator, MixtureCollator, SpanViewCollator, QueryPassageCollator,
            SelfGuidedCollator]  # fmt: skip


def ids_in(value, tokenizer) -> list[int] | None:
    """The ``ledgerN`` numbers of a feature's value: token ids (a list of ints), several texts (a list of such
    lists: several hard negatives), or text; None for anything else."""
    if isinstance(value, str):
        return [int(number) for number in TAG.findall(value)]
    if isinstance(value, list) and value and all(isinstance(item, int) for item in value):
        return ids_in(tokenizer.decode(value, skip_special_tokens=True), tokenizer)
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        found = [ids_in(item, tokenizer) for item in value]
        return None if any(ids is None for ids in found) else [i for ids in found for i in ids]
    return None


def record(call, path: Path, tokenizer):
    @functools.wraps(call)
    def recording(self, features):
        depth = getattr(_depth, "value", 0)
        if depth == 0:
            rows = []
            for feature in features:
                columns = {name: ids_in(value, tokenizer) for name, value in feature.items()}
                rows.append({name: ids for name, ids in columns.items() if ids is not None})
            trainer = _trainer.get("current")  # the epoch the trainer is in (whole epochs done, as state.epoch)
            epoch = int(trainer.state.epoch or 0) if trainer is not None else None
            with path.open("a") as handle:
                handle.write(json.dumps({"epoch": epoch, "rows": rows}) + "\n")
        _depth.value = depth + 1
        try:
            batch = call(self, features)
        finally:
            _depth.value = depth
        unpinnable = unpinnable_tensors(batch, type(self).__name__)
        if unpinnable:  # a DataLoader that pins memory (any GPU run) would fail on this batch
            raise AssertionError(f"a batch that pinned memory cannot take: {'; '.join(unpinnable)}")
        return batch

    return recording


def main(jobs_file: str, ledger_dir: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    tokenizer = AutoTokenizer.from_pretrained(REPO_ROOT / "examples" / "demo" / "tokenizer")
    classes = collator_classes()
    originals = {cls: cls.__call__ for cls in classes}
    from contrastive_hf.training.trainer import ContrastiveTrainer

    built = ContrastiveTrainer.__init__

    def keep(trainer, *args, **kwargs):
        built(trainer, *args, **kwargs)
        _trainer["current"] = trainer

    ContrastiveTrainer.__init__ = keep
    for job in json.loads(Path(jobs_file).read_text()):
        path = Path(ledger_dir) / f"{job['name']}.rank{rank}.jsonl"
        path.unlink(missing_ok=True)
        for cls in classes:
            cls.__call__ = record(originals[cls], path, tokenizer)
        script = str(REPO_ROOT / job["script"])
        sys.argv = [script, *job["argv"]]
        with _output_to(Path(ledger_dir) / f"{job['name']}.rank{rank}.log"):
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exit_:
                if exit_.code not in (0, None):
                    raise RuntimeError(f"ledger job {job['name']} exited with status {exit_.code}") from exit_


@contextlib.contextmanager
def _output_to(path: Path):
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


if __name__ == "__main__":
    main(*sys.argv[1:])
