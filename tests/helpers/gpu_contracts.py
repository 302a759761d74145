"""What a GPU asks of the data, checkable on a CPU.

A DataLoader with ``pin_memory=True`` (the Trainer's default, ``dataloader_pin_memory``) copies every tensor of a
batch into page-locked memory with ``torch.empty_like(tensor).copy_(tensor)``: ``empty_like`` keeps the strides, so
a tensor whose elements share memory (a stride-0 ``expand``) cannot be written, and every training step fails on a
GPU (issue 30). A CPU run never pins, so only this check sees it there.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["unpinnable_tensors"]


def unpinnable_tensors(batch, name: str = "batch") -> list[str]:
    """The tensors of ``batch`` (a tensor, or mappings and sequences of them, as collators return) that pinned
    memory cannot take: not contiguous, or with elements sharing memory; ``"name: why"`` each, [] when all can."""
    if torch.is_tensor(batch):
        problems = []
        if torch._debug_has_internal_overlap(batch) != 0:  # 1: overlap; 2: too complex to tell, as bad for pinning
            problems.append(f"elements share memory (strides {batch.stride()})")
        if not batch.is_contiguous():
            problems.append(f"not contiguous (shape {tuple(batch.shape)}, strides {batch.stride()})")
        return [f"{name}: {', '.join(problems)}"] if problems else []
    if isinstance(batch, Mapping):
        return [problem for key, value in batch.items() for problem in unpinnable_tensors(value, f"{name}[{key!r}]")]
    if isinstance(batch, (list, tuple)):
        return [
            problem for index, value in enumerate(batch) for problem in unpinnable_tensors(value, f"{name}[{index}]")
        ]
    return []
