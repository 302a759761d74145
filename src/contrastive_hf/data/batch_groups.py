"""Batches that each hold one group's examples (a task, a training dataset), and the schedules that order them.

`GroupedDataset` puts several datasets behind one index, `GroupedBatchSampler` decides which group each batch comes
from (`SCHEDULES`) and which of its examples, and `grouped_dataloader` makes a Trainer's training dataloader from
them. The multitask recipe (one batch per task) and dataset mixtures (`data.mixture`: one dataset per batch, so that
in-batch negatives stay within a dataset) are built on these.

Every draw is a function of (seed, epoch, group, cycle): the same on every process and on a resumed run. Several
processes share each step's group: a step's batch is the *global* batch of one group, and each process takes its
contiguous slice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from . import seeding

__all__ = ["SCHEDULES", "GroupedDataset", "GroupedBatchSampler", "grouped_dataloader", "loader_options"]

SCHEDULES = ("fixed", "round_robin", "random", "super_batch")


class GroupedDataset(Dataset):
    """The examples of several groups behind one index: global index ``offsets[g] + i`` is example i of group g, and
    every example comes back with its group's name under `group_key`. Batches are drawn by `GroupedBatchSampler`."""

    group_key = "group"  # the example's key naming its group

    def __init__(self, datasets: Mapping[str, Sequence]):
        if not datasets:
            raise ValueError(f"{type(self).__name__} needs at least one {self.group_key}'s dataset.")
        self.names = list(datasets)
        self.datasets = [datasets[name] for name in self.names]
        self.sizes = [len(dataset) for dataset in self.datasets]
        empty = [name for name, size in zip(self.names, self.sizes, strict=True) if size == 0]
        if empty:
            raise ValueError(f"The training data of {', '.join(empty)} is empty.")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(int).tolist()

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, index: int) -> dict:
        group = int(np.searchsorted(self.offsets, index, side="right")) - 1
        example = dict(self.datasets[group][index - self.offsets[group]])
        example[self.group_key] = self.names[group]
        return example


class GroupedBatchSampler(Sampler[list[int]]):
    """The order in which the groups' batches are seen: yields lists of `GroupedDataset` indices, each one group's
    batch, or one batch of every group for ``super_batch``.

    Schedules (`SCHEDULES`), per epoch:

    - ``fixed``: every batch of the first group, then every batch of the second, ... (in ``group_sizes`` order);
    - ``round_robin``: one batch of each group in turn; a group that has run out is skipped;
    - ``random``: the batches of all groups in a random order (each group's share of the steps is its share of the
      batches, i.e. proportional to its size), what the CS224N projects found best for tasks;
    - ``super_batch``: every step holds one batch of every group (the step PCGrad projects). Groups differ in size:
      ``super_batch_length="max"`` runs as many steps as the largest group has batches, and a smaller group starts
      again (reshuffled) when it runs out, so every example of every group is seen at least once per epoch;
      ``"min"`` runs as many steps as the smallest group has batches, each group's batches being a fresh random
      subset every epoch.

    For the first three, an epoch uses every example of every group exactly once. Examples are shuffled within each
    group (every epoch anew, from ``seed`` and the epoch: deterministic, and resumable with `set_epoch`).

    Several processes: a step's batch is the *global* batch (``batch_size * num_processes`` examples of one group),
    and each process takes its contiguous slice, so all processes train on the same group at every step, and the
    global batch does not depend on the number of processes. A group's last, smaller global batch is dropped with
    ``drop_last``; otherwise it is padded with the group's first examples up to a multiple of ``num_processes``.
    The sampler is rank-aware: `grouped_dataloader` keeps accelerate from sharding its batches again.
    """

    noun = "group"  # how messages name a group

    def __init__(
        self,
        group_sizes: Sequence[int],
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
            raise ValueError(f"Unknown {self.noun} schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}.")
        if super_batch_length not in ("max", "min"):
            raise ValueError(f"super_batch_length must be 'max' or 'min', got {super_batch_length!r}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if not 0 <= process_index < num_processes:
            raise ValueError(f"process_index {process_index} is not in [0, num_processes={num_processes}).")
        if not group_sizes or min(group_sizes) < 1:
            raise ValueError(f"Every {self.noun} needs at least one example, got sizes {list(group_sizes)}.")
        self.group_sizes = list(group_sizes)
        self.batch_size = None  # batches vary in size and group: accelerate must not assume a fixed size
        self.per_process_batch_size = batch_size
        self.schedule = schedule
        self.seed = seed
        self.num_processes = num_processes
        self.process_index = process_index
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.super_batch_length = super_batch_length
        self.offsets = np.concatenate([[0], np.cumsum(self.group_sizes)[:-1]]).astype(int).tolist()
        self.epoch = 0
        global_batch = batch_size * num_processes
        counts = [size // global_batch if drop_last else math.ceil(size / global_batch) for size in self.group_sizes]
        if drop_last and min(counts) == 0:
            small = [i for i, count in enumerate(counts) if count == 0]
            raise ValueError(
                f"With drop_last, {self.noun}s {small} have fewer examples than one global batch ({global_batch}); "
                "lower the batch size or keep the last batch (drop_last=False)."
            )
        self.batches_per_group = counts

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if self.schedule == "super_batch":
            pick = max if self.super_batch_length == "max" else min
            return pick(self.batches_per_group)
        return sum(self.batches_per_group)

    def _generator(self, *keys: int) -> torch.Generator:
        key = seeding.combine(seeding.mix64(self.seed), self.epoch)
        for value in keys:
            key = seeding.combine(key, value)
        return torch.Generator().manual_seed(int(key))

    def _global_batches(self, group: int, cycle: int = 0) -> list[list[int]]:
        """Group ``group``'s global batches (local indices) for this epoch; ``cycle`` > 0 for a reshuffled rerun."""
        size, global_batch = self.group_sizes[group], self.per_process_batch_size * self.num_processes
        if self.shuffle:
            order = torch.randperm(size, generator=self._generator(group, cycle)).tolist()
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
        """This epoch's steps: each a list of (group, global batch of local indices), one entry per group in it."""
        num_groups = len(self.group_sizes)
        if self.schedule == "super_batch":
            length = len(self)
            columns = []
            for group in range(num_groups):
                batches, cycle = [], 0
                while len(batches) < length:
                    batches += self._global_batches(group, cycle)
                    cycle += 1
                columns.append(batches[:length])
            return [[(group, columns[group][step]) for group in range(num_groups)] for step in range(length)]
        per_group = [self._global_batches(group) for group in range(num_groups)]
        if self.schedule == "fixed":
            sequence = [group for group in range(num_groups) for _ in per_group[group]]
        elif self.schedule == "round_robin":
            rounds = max(len(batches) for batches in per_group)
            sequence = [group for turn in range(rounds) for group in range(num_groups) if turn < len(per_group[group])]
        else:  # random: a random permutation of the multiset of groups' batches
            sequence = [group for group in range(num_groups) for _ in per_group[group]]
            permutation = torch.randperm(len(sequence), generator=self._generator(-1)).tolist()
            sequence = [sequence[i] for i in permutation]
        cursors = [0] * num_groups
        steps = []
        for group in sequence:
            steps.append([(group, per_group[group][cursors[group]])])
            cursors[group] += 1
        return steps

    def _process_slice(self, global_batch: list[int]) -> list[int]:
        share = len(global_batch) // self.num_processes
        return global_batch[self.process_index * share : (self.process_index + 1) * share]

    def __iter__(self):
        for step in self.steps():
            indices = []
            for group, global_batch in step:
                indices += [self.offsets[group] + i for i in self._process_slice(global_batch)]
            yield indices


def loader_options(args) -> dict:
    """The `DataLoader` options a Trainer's arguments ask for (workers, pinning, persistence, prefetching)."""
    pin_memory = args.dataloader_pin_memory and args.device.type != "cpu"  # pinning needs an accelerator
    options = {"num_workers": args.dataloader_num_workers, "pin_memory": pin_memory}
    if args.dataloader_num_workers > 0:
        options["persistent_workers"] = args.dataloader_persistent_workers
        if args.dataloader_prefetch_factor is not None:
            options["prefetch_factor"] = args.dataloader_prefetch_factor
    return options


def grouped_dataloader(trainer, sampler: GroupedBatchSampler) -> DataLoader:
    """A Trainer's training dataloader over its ``train_dataset`` with the batches ``sampler`` draws (rank-aware:
    each process's slice of every global batch), collated by its ``data_collator`` and prepared by its accelerator,
    whose own sharding is turned off for it."""
    from transformers.trainer_utils import seed_worker

    args = trainer.args
    dataloader = DataLoader(
        trainer.train_dataset,
        batch_sampler=sampler,
        collate_fn=trainer.data_collator,
        worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
        **loader_options(args),
    )
    prepared = trainer.accelerator.prepare(dataloader)
    # The sampler already gives each process its share: accelerate's BatchSamplerShard must pass batches through.
    shard = getattr(prepared, "batch_sampler", None)
    if shard is not sampler and getattr(shard, "batch_sampler", None) is sampler:
        shard.num_processes, shard.process_index = 1, 0
    return prepared
