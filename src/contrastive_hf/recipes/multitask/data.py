"""Multitask data: task datasets, their collators, and the batch schedules.

Batches hold one task each; `MultitaskBatchSampler` decides their order (`SCHEDULES`): `fixed` (all of task 1, then
all of task 2...), `round_robin`, `random` interleaving, or `super_batch` (one batch of every task per step, the
setting PCGrad needs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ...data.batch_groups import GroupedBatchSampler, GroupedDataset
from ...data.collators import PairCollator
from ...models.host_data import host
from ...models.modeling_multitask import TaskSpec

__all__ = [
    "task_dataset",
    "MultitaskDataset",
    "TaskCollator",
    "MultitaskCollator",
    "MultitaskBatchSampler",
]


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


class MultitaskDataset(GroupedDataset):
    """The examples of several tasks behind one index: global index ``offsets[t] + i`` is example i of task t, and
    every example comes back with its task's name under ``"task"``. Batches are drawn by `MultitaskBatchSampler`."""

    group_key = "task"

    @property
    def task_names(self) -> list[str]:
        return self.names


class TaskCollator:
    """Tokenizes and pads one task's examples: ``sentence`` -> ``input_ids (B, L)``, or ``sentence1, sentence2`` ->
    ``input_ids (B, 2, L)`` (both sentences padded to one length), plus ``attention_mask`` and ``labels`` (float
    for regression). A contrastive task's rows (query, positive, hard negatives: the columns `PairCollator` finds,
    e.g. SimCSE's ``sent0, sent1, hard_neg``) are `PairCollator`'s batches ``(B, 2 + k, L)`` with their
    ``sentence_ids``, and ``labels`` each query's row. With ``add_task_name`` the batch also carries ``task`` (what
    `MultitaskModel.forward` reads)."""

    def __init__(self, tokenizer, spec: TaskSpec, max_length: int | None = 128, add_task_name: bool = True):
        self.tokenizer = tokenizer
        self.spec = spec
        self.max_length = max_length
        self.add_task_name = add_task_name
        self._pairs = PairCollator(tokenizer, max_length=max_length, seed=0) if spec.is_contrastive else None

    def card_description(self) -> dict:
        """What a model card says about these batches (a multitask run ends with the Trainer's own card)."""
        if self._pairs is not None:
            return {"views": f"{self._pairs.card_description()['views']} (the task {self.spec.name!r})"}
        return {"views": f"none: labelled examples of the task {self.spec.name!r}"}

    def hard_negatives_in_batches(self, dataset) -> bool | None:
        """Whether a contrastive task's batches give each query hard negatives (`training.sanity` asks); None for
        the other tasks, which have no negatives."""
        return None if self._pairs is None else self._pairs.hard_negatives_in_batches(dataset)

    def __call__(self, examples: Sequence[Mapping]) -> dict:
        spec = self.spec
        if self._pairs is not None:
            batch = self._pairs(examples)
            batch["labels"] = torch.arange(len(examples))  # each query's positive is its own row's
            return {"task": spec.name, **batch} if self.add_task_name else batch
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
        # each sentence's real tokens on the host too (models.host_data): the model reads nothing back to mask
        batch["input_lengths"] = host(batch["attention_mask"].sum(-1).numpy())  # (B,) or (B, 2)
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

    def card_description(self) -> dict:
        """What a model card says about these batches (a multitask run ends with the Trainer's own card)."""
        return {"views": "none: labelled examples of the tasks " + ", ".join(map(repr, self.collators))}

    def hard_negatives_in_batches(self, dataset) -> None:
        """None (`training.sanity` asks): the tasks' batches differ; `TaskCollator` answers for one task."""
        return None

    def __call__(self, examples: Sequence[Mapping]) -> dict[str, dict]:
        groups: dict[str, list] = {name: [] for name in self.collators}
        for example in examples:
            task = example.get("task")
            if task not in groups:
                raise ValueError(f"Example of unknown task {task!r}; the collator knows {', '.join(groups)}.")
            groups[task].append(example)
        return {name: self.collators[name](group) for name, group in groups.items() if group}


class MultitaskBatchSampler(GroupedBatchSampler):
    """The order in which the tasks' batches are seen (`data.batch_groups.GroupedBatchSampler`, whose groups are
    the tasks): ``fixed``, ``round_robin``, ``random`` or ``super_batch`` (one batch of every task per step, the
    step PCGrad projects); every process trains on the same task at every step."""

    noun = "task"
