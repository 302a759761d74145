"""PCGrad: gradient surgery for multi-task learning (Yu et al., 2020, "Gradient Surgery for Multi-Task Learning").

When two tasks' gradients conflict (negative inner product), PCGrad removes from each the component along the
other: with ``g_i`` the gradient of task i's loss, Algorithm 1 of the paper is

    g_i^PC = g_i                                       for every task i
    for every task i, for every other task j in random order:
        if g_i^PC . g_j < 0:  g_i^PC = g_i^PC - (g_i^PC . g_j / ||g_j||^2) g_j
    update = sum_i g_i^PC

Each ``g_i^PC`` is projected against the *original* ``g_j``, so it stays a linear combination of the original
gradients: ``g^PC = A g`` for a T x T matrix A (T tasks). We track A instead of vectors: every inner product the
algorithm needs is a combination of the Gram matrix ``G = g g^T`` (``g_i^PC . g_j = A[i] . G[:, j]``), so the whole
surgery costs one Gram matrix (T^2 inner products) and one weighted sum of the gradients, whatever the number of
parameters. `project_conflicting_reference` is the algorithm written out on vectors, for the parity tests.

Shared and task-specific parameters: the surgery concerns the parameters several tasks move (a shared encoder).
A parameter only one task reaches (that task's head) keeps that task's gradient unchanged; inner products and
projections use the shared parameters only. (Projecting the full vector, heads included, as the authors'
TensorFlow code does on its variable list, would leak a rescaled copy of task j's head gradient into task j's head
through ``g_i^PC``.) With one task, or with no conflicting pair, the update is the plain sum of the gradients.

Distributed training: every process must project the same gradients, those of the global batch. `pcgrad_backward`
(``average_across_processes=True``) and `MultitaskTrainer` average each task's gradients over processes first, then
all processes draw the same random orders from a shared seed and compute the same update. This needs every process
to hold whole gradients: one device, DDP or DeepSpeed ZeRO-1. ZeRO-2/3 and FSDP shard gradients and are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ...models.host_data import to_device

__all__ = [
    "PCGradStats",
    "random_orders",
    "pcgrad_coefficients",
    "project_conflicting",
    "project_conflicting_reference",
    "pcgrad",
    "combine_task_gradients",
    "task_gradients",
    "average_over_processes",
    "pcgrad_backward",
]


@dataclass
class PCGradStats:
    """What one surgery did: ``conflicting_pairs`` of the ``task_pairs`` pairs of tasks had gradients with a negative
    inner product (before projection); ``cosines`` is the T x T matrix of their cosine similarities. The counts and
    cosines stay on the device (a 0-d tensor and a matrix): reading them back at every step would make the host wait
    for the GPU; a log reads them."""

    conflicting_pairs: torch.Tensor
    task_pairs: int
    cosines: torch.Tensor

    @property
    def conflict_fraction(self) -> torch.Tensor:
        """The share of task pairs that conflicted, a 0-d tensor on the device (0 without pairs)."""
        return self.conflicting_pairs / max(self.task_pairs, 1)


def random_orders(num_tasks: int, generator: torch.Generator | None = None) -> list[list[int]]:
    """For every task i, the other tasks in a random order (the paper's "T_j ~ B \\ T_i in random order")."""
    orders = []
    for task in range(num_tasks):
        permutation = torch.randperm(num_tasks, generator=generator).tolist()
        orders.append([other for other in permutation if other != task])
    return orders


def _check_orders(orders: Sequence[Sequence[int]], num_tasks: int) -> None:
    if len(orders) != num_tasks:
        raise ValueError(f"PCGrad needs one order per task: got {len(orders)} orders for {num_tasks} tasks.")
    for task, order in enumerate(orders):
        if sorted(order) != [other for other in range(num_tasks) if other != task]:
            raise ValueError(
                f"The order of task {task} must list every other task exactly once, got {list(order)}; use "
                "random_orders(num_tasks, generator)."
            )


def pcgrad_coefficients(gram: torch.Tensor, orders: Sequence[Sequence[int]]) -> torch.Tensor:
    """The T x T matrix A with ``g^PC = A g``, from the Gram matrix ``gram[i, j] = g_i . g_j`` (float64 advised).

    Row i starts as e_i; projecting ``g_i^PC`` off ``g_j`` subtracts ``(A[i] . gram[:, j]) / gram[j, j]`` from
    ``A[i, j]``. A task with a zero gradient conflicts with nothing and is never projected against.
    """
    num_tasks = gram.shape[0]
    _check_orders(orders, num_tasks)
    coefficients = torch.eye(num_tasks, dtype=gram.dtype, device=gram.device)
    for task in range(num_tasks):
        for other in orders[task]:
            squared_norm = gram[other, other]
            inner = coefficients[task] @ gram[:, other]  # g_task^PC . g_other
            # the projection where the gradients conflict, decided on the device (an `if` would read both back)
            conflicts = (squared_norm > 0) & (inner < 0)
            step = torch.where(conflicts, inner / torch.where(conflicts, squared_norm, 1.0), 0.0)
            coefficients[task, other] -= step
    return coefficients


def _flat_stack(gradients: Sequence[torch.Tensor]) -> torch.Tensor:
    shapes = {tuple(gradient.shape) for gradient in gradients}
    if len(shapes) != 1:
        raise ValueError(f"PCGrad's task gradients must all have the same shape, got {sorted(shapes)}.")
    return torch.stack([gradient.reshape(-1) for gradient in gradients])  # (T, P)


def _orders_or_random(orders, num_tasks: int, generator: torch.Generator | None) -> Sequence[Sequence[int]]:
    return random_orders(num_tasks, generator) if orders is None else orders


def project_conflicting(
    gradients: Sequence[torch.Tensor],
    orders: Sequence[Sequence[int]] | None = None,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """The projected gradients ``g_i^PC`` of every task (Algorithm 1 before the sum), each shaped like its input.

    Args:
        gradients: one gradient per task, all of the same shape (flat vectors, or any shape).
        orders: for each task, the other tasks in the order they are projected against; drawn at random
            (`random_orders`) from ``generator`` when not given.
        generator: the source of the random orders.
    """
    stacked = _flat_stack(gradients)  # (T, P)
    orders = _orders_or_random(orders, len(gradients), generator)
    gram = (stacked @ stacked.T).double()  # (T, T)
    coefficients = pcgrad_coefficients(gram, orders).to(stacked.dtype)
    projected = coefficients @ stacked  # (T, P)
    return [row.reshape(gradients[0].shape) for row in projected]


def project_conflicting_reference(
    gradients: Sequence[torch.Tensor], orders: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """Algorithm 1 on vectors, as the paper writes it (slow; the reference `project_conflicting` is tested against)."""
    _check_orders(orders, len(gradients))
    originals = [gradient.reshape(-1).double() for gradient in gradients]
    projected = []
    for task, order in enumerate(orders):
        current = originals[task].clone()
        for other in order:
            inner = torch.dot(current, originals[other])
            squared_norm = torch.dot(originals[other], originals[other])
            if squared_norm > 0 and inner < 0:
                current = current - inner / squared_norm * originals[other]
        projected.append(current.to(gradients[task].dtype).reshape(gradients[task].shape))
    return projected


def pcgrad(
    gradients: Sequence[torch.Tensor],
    orders: Sequence[Sequence[int]] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The PCGrad update ``sum_i g_i^PC`` of task gradients of one shape (see `project_conflicting`)."""
    stacked = _flat_stack(gradients)  # (T, P)
    orders = _orders_or_random(orders, len(gradients), generator)
    gram = (stacked @ stacked.T).double()
    weights = pcgrad_coefficients(gram, orders).sum(dim=0).to(stacked.dtype)  # (T,): update = weights @ g
    return (weights @ stacked).reshape(gradients[0].shape)


def _stats(gram: torch.Tensor) -> PCGradStats:
    num_tasks = gram.shape[0]
    norms = gram.diagonal().clamp(min=0).sqrt()
    cosines = gram / (norms[:, None] * norms[None, :]).clamp(min=1e-30)
    upper = torch.triu(torch.ones_like(gram, dtype=torch.bool), diagonal=1)  # each pair once
    conflicting = ((gram < 0) & upper).sum()
    return PCGradStats(conflicting, num_tasks * (num_tasks - 1) // 2, cosines.float())


def combine_task_gradients(
    task_gradients: Sequence[Sequence[torch.Tensor | None]],
    orders: Sequence[Sequence[int]] | None = None,
    generator: torch.Generator | None = None,
) -> tuple[list[torch.Tensor | None], PCGradStats]:
    """PCGrad on a model's parameters: ``task_gradients[t][p]`` is task t's gradient of parameter p (None where task
    t does not reach p). Returns the update of every parameter (None where no task reaches it) and the stats.

    Parameters reached by two tasks or more are shared: their gradients are projected (inner products over the
    shared parameters only, a missing gradient counting as zero). A parameter only one task reaches keeps that
    task's gradient.
    """
    num_tasks = len(task_gradients)
    if num_tasks == 0:
        raise ValueError("PCGrad needs the gradients of at least one task.")
    num_parameters = len(task_gradients[0])
    if any(len(gradients) != num_parameters for gradients in task_gradients):
        raise ValueError("Every task must give one gradient (or None) per parameter, in the same parameter order.")
    orders = _orders_or_random(orders, num_tasks, generator)

    present = [[t for t in range(num_tasks) if task_gradients[t][p] is not None] for p in range(num_parameters)]
    shared = [p for p in range(num_parameters) if len(present[p]) > 1]
    device = next((g.device for gradients in task_gradients for g in gradients if g is not None), None)
    gram = torch.zeros(num_tasks, num_tasks, dtype=torch.float64, device=device)
    indexes = {}  # the few distinct sets of tasks, each copied to the device once, without blocking
    for p in shared:
        tasks = present[p]
        rows = torch.stack([task_gradients[t][p].reshape(-1) for t in tasks]).float()  # (k, n_p)
        if tuple(tasks) not in indexes:
            indexes[tuple(tasks)] = to_device(tasks, rows.device)
        index = indexes[tuple(tasks)]
        gram[index[:, None], index[None, :]] += (rows @ rows.T).double()
    weights = pcgrad_coefficients(gram, orders).sum(dim=0)  # (T,)

    update: list[torch.Tensor | None] = []
    for p in range(num_parameters):
        tasks = present[p]
        if not tasks:
            update.append(None)
        elif len(tasks) == 1:
            update.append(task_gradients[tasks[0]][p])
        else:
            total = sum(weights[t].to(task_gradients[t][p].dtype) * task_gradients[t][p] for t in tasks)
            update.append(total)
    return update, _stats(gram)


def task_gradients(
    losses: Sequence[torch.Tensor], parameters: Sequence[torch.nn.Parameter]
) -> list[list[torch.Tensor | None]]:
    """The gradient of every loss with respect to ``parameters`` (None where a loss does not reach a parameter), by
    one `torch.autograd.grad` per loss; ``.grad`` is left untouched."""
    gradients = []
    for index, loss in enumerate(losses):
        keep_graph = index < len(losses) - 1  # the losses may share parts of one graph
        gradients.append(list(torch.autograd.grad(loss, parameters, retain_graph=keep_graph, allow_unused=True)))
    return gradients


def average_over_processes(task_grads: Sequence[Sequence[torch.Tensor | None]]) -> list[list[torch.Tensor | None]]:
    """Average each task's gradients over the processes of the default process group, one all-reduce per task
    (what DDP does to the summed gradient, done per task). Every process must reach the same parameters per task.
    Returns the input unchanged when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [list(gradients) for gradients in task_grads]
    world_size = dist.get_world_size()
    averaged = []
    for gradients in task_grads:
        present = [g for g in gradients if g is not None]
        if not present:
            averaged.append(list(gradients))
            continue
        flat = torch.cat([g.reshape(-1).float() for g in present])  # one message per task
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= world_size
        pieces = iter(flat.split([g.numel() for g in present]))
        averaged.append(
            [None if g is None else next(pieces).view_as(g).to(g.dtype) for g in gradients]  # noqa: B023
        )
    return averaged


def pcgrad_backward(
    losses: Sequence[torch.Tensor],
    parameters: Iterable[torch.nn.Parameter],
    orders: Sequence[Sequence[int]] | None = None,
    generator: torch.Generator | None = None,
    average_across_processes: bool = False,
) -> PCGradStats:
    """PCGrad in place of ``sum(losses).backward()``: adds the surgery's update to every parameter's ``.grad``.

    For a plain PyTorch loop (``MultitaskTrainer`` does the same through the Trainer). Under DDP, run the forward
    passes inside ``model.no_sync()`` and pass ``average_across_processes=True``: each task's gradients are averaged
    over processes before the projection, and every process then adds the same update (give every process the
    same ``generator`` seed, or the same ``orders``).

    Example:

    ```python
    >>> losses = [model(task=name, **batch).loss for name, batch in batches.items()]
    >>> stats = pcgrad_backward(losses, model.parameters(), generator=torch.Generator().manual_seed(step))
    >>> optimizer.step(); optimizer.zero_grad()
    ```
    """
    parameters = [p for p in parameters if p.requires_grad]
    gradients = task_gradients(losses, parameters)
    if average_across_processes:
        gradients = average_over_processes(gradients)
    update, stats = combine_task_gradients(gradients, orders=orders, generator=generator)
    with torch.no_grad():
        for parameter, gradient in zip(parameters, update, strict=True):
            if gradient is None:
                continue
            if parameter.grad is None:
                parameter.grad = gradient.detach().clone()
            else:
                parameter.grad += gradient
    return stats
