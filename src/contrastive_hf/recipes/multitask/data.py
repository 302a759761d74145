"""Multitask data: task datasets, their collators, and the batch schedules.

Batches hold one task each; `MultitaskBatchSampler` decides their order (`SCHEDULES`): `fixed` (all of task 1, then
all of task 2...), `round_robin`, `random` interleaving, or `super_batch` (one batch of every task per step, the
setting PCGrad needs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from ...data import seeding
from .modeling import TaskSpec

__all__ = [
    "SCHEDULES",
    "task_dataset",
    "MultitaskDataset",
    "TaskCollator",
    "MultitaskCollator",
    "MultitaskBatchSampler",
]

SCHEDULES = ("fixed", "round_robin", "random", "super_batch")


def task_dataset(data, normalize_scores: float | None = None):
    """A `datasets.Dataset` with the columns the collators read, from the evaluation readers' dataclasses:
    ``sentence, label`` from `ClassificationData` (SST-2...), ``sentence1, sentence2, label`` from
    `PairClassificationData` (MRPC) or `STSData` (STS-B; ``label`` is the score divided by ``normalize_scores``,
    e.g. 5.0 to put STS-B's 0-5 scale in [0, 1] for a cosine head)."""
    import datasets

    if hasattr(data, "sentences"):
        return datasets.Dataset.from_dict({"sentence": list(data.sentences), "label": list(data.labels)})
    if hasattr(data, "scores"):
        scale = normalize_scores or 1.0
        labels = [float(score) / scale for score in data.scores]
    elif hasattr(data, "labels"):
        labels = list(data.labels)
    else:
        raise TypeError(f"task_dataset takes ClassificationData, PairClassificationData or STSData, got {type(data)}.")
    return datasets.Dataset.from_dict(
        {"sentence1": list(data.sentences1), "sentence2": list(data.sentences2), "label": labels}
    )


class MultitaskDataset(Dataset):
    """The examples of several tasks behind one index: global index ``offsets[t] + i`` is example i of task t, and
    every example comes back with its task's name under ``"task"``. Batches are drawn by `MultitaskBatchSampler`."""

    def __init__(self, task_datasets: Mapping[str, Sequence]):
        if not task_datasets:
            raise ValueError("MultitaskDataset needs at least one task's dataset.")
        self.task_names = list(task_datasets)
        self.datasets = [task_datasets[name] for name in self.task_names]
        self.sizes = [len(dataset) for dataset in self.datasets]
        empty = [name for name, size in zip(self.task_names, self.sizes, strict=True) if size == 0]
        if empty:
            raise ValueError(f"The training data of {', '.join(empty)} is empty.")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(int).tolist()

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, index: int) -> dict:
        task = int(np.searchsorted(self.offsets, index, side="right")) - 1
        example = dict(self.datasets[task][index - self.offsets[task]])
        example["task"] = self.task_names[task]
        return example


class TaskCollator:
    """Tokenizes and pads one task's examples: ``sentence`` -> ``input_ids (B, L)``, or ``sentence1, sentence2`` ->
    ``input_ids (B, 2, L)`` (both sentences padded to one length), plus ``attention_mask`` and ``labels`` (float
    for regression). With ``add_task_name`` the batch also carries ``task`` (what `MultitaskModel.forward` reads)."""

    def __init__(self, tokenizer, spec: TaskSpec, max_length: int | None = 128, add_task_name: bool = True):
        self.tokenizer = tokenizer
        self.spec = spec
        self.max_length = max_length
        self.add_task_name = add_task_name

    def __call__(self, examples: Sequence[Mapping]) -> dict:
        spec = self.spec
        columns = ("sentence1", "sentence2") if spec.is_pair else ("sentence",)
        missing = [column for column in (*columns, "label") if column not in examples[0]]
        if missing:
            raise ValueError(
                f"Task {spec.name!r} ({spec.type}) reads the columns {', '.join(columns)} and label; the examples "
                f"lack {', '.join(missing)} (see contrastive_hf.recipes.multitask.task_dataset)."
            )
        texts = [example[column] for column in columns for example in examples]  # column-major: (S * B,)
        encoded = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        batch = {}
        for key in ("input_ids", "attention_mask"):
            tensor = encoded[key]  # (S * B, L)
            if spec.is_pair:
                tensor = tensor.view(2, len(examples), -1).transpose(0, 1).contiguous()  # (B, 2, L)
            batch[key] = tensor
        labels = [example["label"] for example in examples]
        batch["labels"] = torch.tensor(labels, dtype=torch.float32 if spec.is_regression else torch.long)
        if self.add_task_name:
            batch = {"task": spec.name, **batch}
        return batch


class MultitaskCollator:
    """Collates a batch of `MultitaskDataset` examples (any mix of tasks) into ``{task: batch}``, each task's batch
    built by its `TaskCollator`, in the order of ``tasks``. A one-task batch is ``{task: batch}`` too."""

    def __init__(self, tokenizer, tasks: Sequence[TaskSpec], max_length: int | None = 128):
        self.collators = {spec.name: TaskCollator(tokenizer, spec, max_length, add_task_name=False) for spec in tasks}

    def __call__(self, examples: Sequence[Mapping]) -> dict[str, dict]:
        groups: dict[str, list] = {name: [] for name in self.collators}
        for example in examples:
            task = example.get("task")
            if task not in groups:
                raise ValueError(f"Example of unknown task {task!r}; the collator knows {', '.join(groups)}.")
            groups[task].append(example)
        return {name: self.collators[name](group) for name, group in groups.items() if group}


class MultitaskBatchSampler(Sampler[list[int]]):
    """The order in which the tasks' batches are seen: yields lists of `MultitaskDataset` indices, each one task's
    batch, or one batch of every task for ``super_batch``.

    Schedules (`SCHEDULES`), per epoch:

    - ``fixed``: every batch of the first task, then every batch of the second, ... (in ``task_sizes`` order);
    - ``round_robin``: one batch of each task in turn; a task that has run out is skipped;
    - ``random``: the batches of all tasks in a random order (each task's share of the steps is its share of the
      batches), what the CS224N projects found best;
    - ``super_batch``: every step holds one batch of every task (the step PCGrad projects). Tasks differ in size:
      ``super_batch_length="max"`` runs as many steps as the largest task has batches, and a smaller task starts
      again (reshuffled) when it runs out, so every example of every task is seen at least once per epoch;
      ``"min"`` runs as many steps as the smallest task has batches, each task's batches being a fresh random
      subset every epoch.

    For the first three, an epoch uses every example of every task exactly once. Examples are shuffled within each
    task (every epoch anew, from ``seed`` and the epoch: deterministic, and resumable with `set_epoch`).

    Several processes: a step's batch is the *global* batch (``batch_size * num_processes`` examples of one task),
    and each process takes its contiguous slice, so all processes train on the same task at every step, and the
    global batch does not depend on the number of processes. A task's last, smaller global batch is dropped with
    ``drop_last``; otherwise it is padded with the task's first examples up to a multiple of ``num_processes``.
    The sampler is rank-aware: `MultitaskTrainer` keeps accelerate from sharding its batches again.
    """

    def __init__(
        self,
        task_sizes: Sequence[int],
        batch_size: int,
        schedule: str = "random",
        seed: int = 0,
        num_processes: int = 1,
        process_index: int = 0,
        drop_last: bool = False,
        shuffle: bool = True,
        super_batch_length: str = "max",
    ):
        if schedule not in SCHEDULES:
            raise ValueError(f"Unknown task schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}.")
        if super_batch_length not in ("max", "min"):
            raise ValueError(f"super_batch_length must be 'max' or 'min', got {super_batch_length!r}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if not 0 <= process_index < num_processes:
            raise ValueError(f"process_index {process_index} is not in [0, num_processes={num_processes}).")
        if not task_sizes or min(task_sizes) < 1:
            raise ValueError(f"Every task needs at least one example, got sizes {list(task_sizes)}.")
        self.task_sizes = list(task_sizes)
        self.batch_size = None  # batches vary in size and task: accelerate must not assume a fixed size
        self.per_process_batch_size = batch_size
        self.schedule = schedule
        self.seed = seed
        self.num_processes = num_processes
        self.process_index = process_index
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.super_batch_length = super_batch_length
        self.offsets = np.concatenate([[0], np.cumsum(self.task_sizes)[:-1]]).astype(int).tolist()
        self.epoch = 0
        global_batch = batch_size * num_processes
        counts = [size // global_batch if drop_last else math.ceil(size / global_batch) for size in self.task_sizes]
        if drop_last and min(counts) == 0:
            small = [i for i, count in enumerate(counts) if count == 0]
            raise ValueError(
                f"With drop_last, tasks {small} have fewer examples than one global batch ({global_batch}); "
                "lower the batch size or keep the last batch (drop_last=False)."
            )
        self.batches_per_task = counts

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if self.schedule == "super_batch":
            pick = max if self.super_batch_length == "max" else min
            return pick(self.batches_per_task)
        return sum(self.batches_per_task)

    def _generator(self, *keys: int) -> torch.Generator:
        key = seeding.combine(seeding.mix64(self.seed), self.epoch)
        for value in keys:
            key = seeding.combine(key, value)
        return torch.Generator().manual_seed(int(key))

    def _global_batches(self, task: int, cycle: int = 0) -> list[list[int]]:
        """Task ``task``'s global batches (local indices) for this epoch; ``cycle`` > 0 for a reshuffled rerun."""
        size, global_batch = self.task_sizes[task], self.per_process_batch_size * self.num_processes
        if self.shuffle:
            order = torch.randperm(size, generator=self._generator(task, cycle)).tolist()
        else:
            order = list(range(size))
        batches = [order[start : start + global_batch] for start in range(0, size, global_batch)]
        if batches and len(batches[-1]) < global_batch:
            if self.drop_last:
                batches.pop()
            elif len(batches[-1]) % self.num_processes:
                missing = self.num_processes - len(batches[-1]) % self.num_processes
                batches[-1] = batches[-1] + [order[i % size] for i in range(missing)]
        return batches

    def steps(self) -> list[list[tuple[int, list[int]]]]:
        """This epoch's steps: each a list of (task, global batch of local indices), one entry per task in it."""
        num_tasks = len(self.task_sizes)
        if self.schedule == "super_batch":
            length = len(self)
            columns = []
            for task in range(num_tasks):
                batches, cycle = [], 0
                while len(batches) < length:
                    batches += self._global_batches(task, cycle)
                    cycle += 1
                columns.append(batches[:length])
            return [[(task, columns[task][step]) for task in range(num_tasks)] for step in range(length)]
        per_task = [self._global_batches(task) for task in range(num_tasks)]
        if self.schedule == "fixed":
            sequence = [task for task in range(num_tasks) for _ in per_task[task]]
        elif self.schedule == "round_robin":
            rounds = max(len(batches) for batches in per_task)
            sequence = [task for turn in range(rounds) for task in range(num_tasks) if turn < len(per_task[task])]
        else:  # random: a random permutation of the multiset of tasks' batches
            sequence = [task for task in range(num_tasks) for _ in per_task[task]]
            permutation = torch.randperm(len(sequence), generator=self._generator(-1)).tolist()
            sequence = [sequence[i] for i in permutation]
        cursors = [0] * num_tasks
        steps = []
        for task in sequence:
            steps.append([(task, per_task[task][cursors[task]])])
            cursors[task] += 1
        return steps

    def _process_slice(self, global_batch: list[int]) -> list[int]:
        share = len(global_batch) // self.num_processes
        return global_batch[self.process_index * share : (self.process_index + 1) * share]

    def __iter__(self):
        for step in self.steps():
            indices = []
            for task, global_batch in step:
                indices += [self.offsets[task] + i for i in self._process_slice(global_batch)]
            yield indices
