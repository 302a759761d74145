"""Cross-device negatives: a differentiable all-gather, so that every rank's loss sees the global batch.

With the embeddings of all ranks gathered, each rank computes the "local loss" of its own queries against the keys
of every rank (open_clip's scheme). The gradient is exact when the backward pass of the gather sums, over ranks, the
gradients every rank's loss sends to each slice, and the optimiser then averages parameter gradients over ranks as
DistributedDataParallel (and DeepSpeed) do:

    d/dtheta [ (1/W) sum_r L_r ]  =  (1/W) sum_j [ dL_j/dq_j dq_j/dtheta + (sum_r dL_r/dk_j) dk_j/dtheta ]

Ranks may hold batches of different sizes (the last batch of an epoch, uneven streamed shards): `gather_sizes`
exchanges them first, every rank pads its slice to the largest for the collective (gloo and NCCL gather equal
shapes only), and the padding is cut out of the result, so the gathered batch holds each rank's real rows only and
this rank's rows start at ``sum(sizes[:rank])``. The backward uses an all-reduce (supported by every backend, gloo
included) rather than a reduce-scatter.

With different sizes, the plain average over ranks of each rank's mean loss is no longer the global batch's mean (a
row of a 3-row rank would weigh more than a row of a 5-row rank): `share_of_global_mean` scales each rank's mean by
``world * B_r / sum(sizes)``, after which the average over ranks, which DDP's gradient averaging differentiates, is
the mean over every row of the global batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = [
    "world_size",
    "rank",
    "gather_sizes",
    "gather_with_grad",
    "gather_no_grad",
    "gather_global_batch",
    "share_of_global_mean",
]


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_sizes(size: int, device: torch.device | str) -> list[int]:
    """Every rank's ``size`` (e.g. its batch size), in rank order; ``[size]`` when not distributed."""
    if world_size() == 1:
        return [size]
    local = torch.tensor([size], dtype=torch.long, device=device)
    parts = [torch.empty_like(local) for _ in range(world_size())]
    dist.all_gather(parts, local)
    return [int(part.item()) for part in parts]


def _all_gather_rows(tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Concatenate every rank's rows (``sizes[r]`` of them on rank r), padding each slice to the largest for the
    collective and cutting the padding out again."""
    largest = max(sizes)
    padded = tensor.contiguous()
    if tensor.shape[0] < largest:
        padding = tensor.new_zeros((largest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([padded, padding])
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)], dim=0)


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
        ctx.start = sum(sizes[: dist.get_rank()])
        ctx.size = tensor.shape[0]
        return _all_gather_rows(tensor, list(sizes))  # (sum(sizes), ...)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad_output.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)  # every rank's loss -> every slice
        return grad[ctx.start : ctx.start + ctx.size], None


def gather_with_grad(tensor: torch.Tensor, sizes: list[int] | None = None) -> torch.Tensor:
    """Concatenate ``tensor`` (``(B_r, ...)`` on rank r) from all ranks, in rank order, keeping the gradient path to
    every rank's slice. ``sizes``: every rank's B_r when already known (`gather_sizes`), else exchanged here.
    Returns ``tensor`` itself when not distributed."""
    if world_size() == 1:
        return tensor
    sizes = gather_sizes(tensor.shape[0], tensor.device) if sizes is None else sizes
    return _GatherWithGrad.apply(tensor, tuple(sizes))


@torch.no_grad()
def gather_no_grad(tensor: torch.Tensor, sizes: list[int] | None = None) -> torch.Tensor:
    """Concatenate ``tensor`` from all ranks without a gradient (e.g. sentence ids, or a queue of past keys)."""
    if world_size() == 1:
        return tensor
    sizes = gather_sizes(tensor.shape[0], tensor.device) if sizes is None else sizes
    return _all_gather_rows(tensor, sizes)


def gather_global_batch(tensor: torch.Tensor) -> tuple[torch.Tensor, int, list[int] | None]:
    """The global batch of a per-process ``(B_r, ...)`` tensor: ``(every rank's rows in rank order, with gradient;
    where this rank's rows start in them; every rank's B_r)``, and ``(tensor, 0, None)`` when not distributed. The
    ranks may hold different numbers of rows."""
    if world_size() == 1:
        return tensor, 0, None
    sizes = gather_sizes(tensor.shape[0], tensor.device)
    return gather_with_grad(tensor, sizes), sum(sizes[: rank()]), sizes


def share_of_global_mean(local_mean: torch.Tensor, sizes: list[int] | None) -> torch.Tensor:
    """This rank's mean loss over its ``sizes[rank]`` rows, scaled so that the average over ranks of the returned
    values is the mean over all ``sum(sizes)`` rows; ``local_mean`` itself when all sizes are equal or ``sizes`` is
    None (nothing gathered)."""
    if sizes is None or len(set(sizes)) == 1:
        return local_mean
    return local_mean * (len(sizes) * sizes[rank()] / sum(sizes))
