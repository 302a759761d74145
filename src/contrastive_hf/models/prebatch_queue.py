"""Pre-batch negatives (DensePhrases, Lee et al., 2021): the keys of the previous C batches as extra negatives.

The queue holds the detached key embeddings of the last ``num_batches`` batches, gathered from every device before
they are enqueued, on the device, in a fixed-size buffer (bounded memory: ``num_batches * global_batch * dim``
floats). Its keys are a few optimisation steps old; ``warmup_steps`` keeps it out of the loss until the encoder has
settled, and `reset` (e.g. at each epoch) drops what it holds.

A loss that takes extra negatives owns its queue (`objectives.ContrastiveLoss.prebatch`): it reads the queue before
scoring a training batch and pushes the batch's keys after, and its `loss_state` is the queue's, which a checkpoint
saves for an exact resume; the loss tells it which optimisation step runs (``step``, from the trainer's
`ContrastiveLoss.on_step_begin`).
"""

from __future__ import annotations

import torch

from .distributed import gather_no_grad, gather_sizes

__all__ = ["PrebatchQueue"]


class PrebatchQueue:
    """A FIFO of the last ``num_batches`` batches' keys.

    Args:
        num_batches: C, how many previous batches are kept (DensePhrases found C = 2 best).
        warmup_steps: `negatives` returns nothing before this many optimisation steps.

    Attributes:
        step: the optimisation steps done so far (its loss sets it as each step begins).
        fill_used: `fill` when the last training batch read the queue (the ``queue_fill`` the trainer logs).
    """

    def __init__(self, num_batches: int, warmup_steps: int = 0):
        if num_batches < 1:
            raise ValueError(f"The pre-batch queue needs num_batches >= 1, got {num_batches}.")
        if warmup_steps < 0:
            raise ValueError(f"prebatch_warmup_steps must be >= 0, got {warmup_steps}.")
        self.num_batches = num_batches
        self.warmup_steps = warmup_steps
        self.step = 0
        self.fill_used = 0.0
        self._batches: list[torch.Tensor] = []  # oldest first, each (global_batch, d)
        self._ids: list[torch.Tensor | None] = []  # the keys' sentence ids, (global_batch,), when known

    def __len__(self) -> int:
        """Number of keys held."""
        return sum(batch.shape[0] for batch in self._batches)

    @property
    def fill(self) -> float:
        """The fraction of the queue's batches that are held (0 when empty, 1 when full)."""
        return len(self._batches) / self.num_batches

    def negatives(self) -> torch.Tensor | None:
        """The held keys, ``(len(self), d)``, or None while warming up (``step < warmup_steps``) or empty."""
        self.fill_used = self.fill
        if self.step < self.warmup_steps or not self._batches:
            return None
        return torch.cat(self._batches, dim=0)

    def negative_ids(self) -> torch.Tensor | None:
        """The sentence ids of `negatives` ``(len(self),)``, or None when unknown for any held batch."""
        if self.step < self.warmup_steps or not self._batches or any(ids is None for ids in self._ids):
            return None
        return torch.cat(self._ids, dim=0)

    @torch.no_grad()
    def push(self, keys: torch.Tensor, ids: torch.Tensor | None = None) -> None:
        """Enqueue this step's keys ``(B, d)`` and their sentence ids ``(B,)`` (gathered from every device, whose
        B may differ), dropping the oldest batch when full."""
        sizes = gather_sizes(keys.shape[0], keys.device)  # once for both gathers
        self._batches.append(gather_no_grad(keys.detach(), sizes).contiguous())
        self._ids.append(None if ids is None else gather_no_grad(ids.detach(), sizes).contiguous())
        if len(self._batches) > self.num_batches:
            self._batches.pop(0)
            self._ids.pop(0)

    def reset(self) -> None:
        self._batches, self._ids = [], []

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The held keys and ids, to save with a checkpoint (exact resume)."""
        state = {f"batch_{index}": batch.cpu().contiguous() for index, batch in enumerate(self._batches)}
        for index, ids in enumerate(self._ids):
            if ids is not None:
                state[f"ids_{index}"] = ids.cpu().contiguous()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> None:
        count = sum(1 for name in state if name.startswith("batch_"))
        batches = [state[f"batch_{index}"].to(device) for index in range(count)]
        ids = [state[f"ids_{index}"].to(device) if f"ids_{index}" in state else None for index in range(count)]
        self._batches, self._ids = batches[-self.num_batches :], ids[-self.num_batches :]
