"""A data ledger: run example scripts with every example that reaches training recorded, by the id in its text.

Usage (once per process, e.g. under ``accelerate launch``): ``python ledger.py JOBS.json LEDGER_DIR``. ``JOBS.json``
is a list of ``{"name": ..., "script": "examples/run_clear.py", "argv": [...]}`` (and ``"status": N`` for a job
expected to end with exit status N: a run refused before training); each job's script runs in turn in this process
(`run_jobs.run_job`: as ``python script argv...`` would), and every batch the trainer takes to train on is appended
to ``LEDGER_DIR/<name>.rank<R>.jsonl`` as one line, in the order it is trained, ``{"epoch": the trainer's whole
epochs done, "rows": [...]}``, with for each example of the batch ``{column: [ids]}``, the ids being the numbers
``N`` of the words ``ledgerN`` that the column's text holds (decoded from its token ids with the demo tokenizer). The
ids are read where the collator builds the batch (in a dataloader worker, when there are workers) from the examples
it is given, before any augmentation, and travel with the batch to the trainer, which records them when it takes
the batch (`ContrastiveTrainer.get_batch_samples`): batches a resumed run skips, or that workers build ahead, are not
recorded. The test data puts ``ledgerN`` at the start of every text of row N, so that what training saw can be
counted against what the files hold, with nothing of the library's own bookkeeping (``example_index``) trusted.
A job's output (stdout and stderr) goes to ``LEDGER_DIR/<name>.rank<R>.log``; a job ending with another status than
expected stops the run with its name.
Every batch is also checked against what a GPU's pinned memory needs (`helpers.gpu_contracts.unpinnable_tensors`):
a tensor that cannot be pinned fails the job, naming the collator and the tensor.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
from pathlib import Path

from transformers import AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
from run_jobs import run_job, settle_garbage  # noqa: E402  (beside this script, on the path of a script run)

from helpers.gpu_contracts import unpinnable_tensors  # noqa: E402

TAG = re.compile(r"ledger(\d+)")
ROWS_KEY = "ledger_rows"  # the batch's ids, from the collator to the trainer
_depth = threading.local()  # a collator calling another (a mixture's) is recorded once, at the outermost


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


def with_ids(call, tokenizer):
    """A collator's ``__call__`` that checks its batch can be pinned and adds to it (under `ROWS_KEY`) the ids of
    each example it is given."""

    @functools.wraps(call)
    def collating(self, features):
        depth = getattr(_depth, "value", 0)
        _depth.value = depth + 1
        try:
            batch = call(self, features)
        finally:
            _depth.value = depth
        unpinnable = unpinnable_tensors(batch, type(self).__name__)
        if unpinnable:  # a DataLoader that pins memory (any GPU run) would fail on this batch
            raise AssertionError(f"a batch that pinned memory cannot take: {'; '.join(unpinnable)}")
        if depth == 0:
            rows = []
            for feature in features:
                columns = {name: ids_in(value, tokenizer) for name, value in feature.items()}
                rows.append({name: ids for name, ids in columns.items() if ids is not None})
            batch[ROWS_KEY] = rows
        return batch

    return collating


def recording(get_batch_samples, ledger: dict):
    """`ContrastiveTrainer.get_batch_samples` that appends each batch it returns (those trained on, in order) to the
    ledger file of the job that runs, and takes the ids out of it."""

    @functools.wraps(get_batch_samples)
    def taking(trainer, *args, **kwargs):
        batches, *rest = get_batch_samples(trainer, *args, **kwargs)
        epoch = int(trainer.state.epoch or 0)  # whole epochs done
        with ledger["path"].open("a") as handle:
            for batch in batches:
                handle.write(json.dumps({"epoch": epoch, "rows": batch.pop(ROWS_KEY)}) + "\n")
        return (batches, *rest)

    return taking


def main(jobs_file: str, ledger_dir: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    # datasets sleeps 5 s each time a streamed parquet pass ends (its guard against an Arrow crash at interpreter
    # exit, apache/arrow#45214): 15 s per Hub-style streaming job, for nothing this ledger records
    import datasets.config

    datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0
    tokenizer = AutoTokenizer.from_pretrained(REPO_ROOT / "examples" / "demo" / "tokenizer")
    for cls in collator_classes():
        cls.__call__ = with_ids(cls.__call__, tokenizer)
    from contrastive_hf.training.trainer import ContrastiveTrainer

    ledger = {}
    ContrastiveTrainer.get_batch_samples = recording(ContrastiveTrainer.get_batch_samples, ledger)
    for job in json.loads(Path(jobs_file).read_text()):
        ledger["path"] = path = Path(ledger_dir) / f"{job['name']}.rank{rank}.jsonl"
        path.unlink(missing_ok=True)
        path.touch()
        status = run_job(job, Path(ledger_dir) / f"{job['name']}.rank{rank}.log")
        settle_garbage()
        if status != job.get("status", 0):
            raise RuntimeError(f"ledger job {job['name']} exited with status {status}, not {job.get('status', 0)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
