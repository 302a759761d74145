"""Cross-device negatives: a differentiable all-gather, so that every rank's loss sees the global batch.

With the embeddings of all ranks gathered, each rank computes the "local loss" of its own queries against the keys
of every rank (open_clip's scheme). The gradient is exact when the backward pass of the gather sums, over ranks, the
gradients every rank's loss sends to each slice, and the optimiser then averages parameter gradients over ranks as
DistributedDataParallel (and DeepSpeed) do:

    d/dtheta [ (1/W) sum_r L_r ]  =  (1/W) sum_j [ dL_j/dq_j dq_j/dtheta + (sum_r dL_r/dk_j) dk_j/dtheta ]

The backward uses an all-reduce (supported by every backend, gloo included) rather than a reduce-scatter.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["world_size", "rank", "gather_with_grad", "gather_no_grad"]


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        ctx.batch_size = tensor.shape[0]
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=0)  # (W * B, ...)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        grad = grad_output.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)  # every rank's loss -> every slice
        start = dist.get_rank() * ctx.batch_size
        return grad[start : start + ctx.batch_size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (``(B, ...)``, the same B on every rank) from all ranks, in rank order, keeping the
    gradient path to every rank's slice. Returns ``tensor`` itself when not distributed."""
    if world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


@torch.no_grad()
def gather_no_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from all ranks without a gradient (e.g. for a queue of past keys)."""
    if world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)
