"""What a GPU asks of the data and of a training step, checkable on a CPU.

A DataLoader with ``pin_memory=True`` (the Trainer's default, ``dataloader_pin_memory``) copies every tensor of a
batch into page-locked memory with ``torch.empty_like(tensor).copy_(tensor)``: ``empty_like`` keeps the strides, so
a tensor whose elements share memory (a stride-0 ``expand``) cannot be written, and every training step fails on a
GPU (issue 30). A CPU run never pins, so only this check sees it there.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import contrastive_hf

PACKAGE = Path(contrastive_hf.__file__).resolve().parent  # the package's frames, wherever the clone lies

__all__ = ["unpinnable_tensors", "HostSyncCounter"]


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


class HostSyncCounter(TorchDispatchMode):
    """Counts, while it is active, the operations that make the host wait for a GPU: on a device they block until
    every queued kernel has run, so the host stops queueing the next ones (issue 32). Run on CPU tensors, they are
    seen by their operator:

    - ``item``: a tensor's value read on the host (``.item()``, ``int(t)``, ``bool(t)``, ``if t:``: the operator
      ``_local_scalar_dense``), and ``tolist``/``numpy`` (counted by patching them: a CPU tensor's are no operators);
    - ``data-dependent shape``: an output whose size depends on values (``nonzero``, ``masked_select``, ``unique``,
      ``repeat_interleave`` without ``output_size``) or a comparison returning a host bool (``equal``);
    - ``boolean mask``: indexing with a boolean mask (``t[mask]``, ``t[mask] = v``), which computes its ``nonzero``;
    - ``host tensor``: a tensor built from host values inside the step (``torch.tensor([...], device=...)``: a
      copy from pageable host memory, which waits for the device), seen as ``lift_fresh``; except those of
      `models.host_data.to_device`, which copies from pinned memory without blocking.

    Not seen on a CPU: a tensor made on the host by an operator and then moved (``torch.arange(n).to(device)``, a
    copy from pageable memory on a GPU); the package builds such tensors on their device.

    ``counts`` maps each kind to how many; ``where`` lists the first stack frame of the package behind each.
    """

    SHAPE_OPERATORS = ("nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "equal")

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}
        self.where: list[str] = []
        self._patched = []

    def _count(self, kind: str) -> None:
        stack = reversed(traceback.extract_stack())
        frames = [item for item in stack if Path(item.filename).resolve().is_relative_to(PACKAGE)]
        if kind == "host tensor" and frames and frames[0].name == "to_device":
            return  # `models.host_data.to_device`: from pinned memory without blocking, on a GPU
        self.counts[kind] = self.counts.get(kind, 0) + 1
        frame = f"{Path(frames[0].filename).name}:{frames[0].lineno} {frames[0].name}" if frames else "outside"
        self.where.append(f"{kind}: {frame}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @staticmethod
    def _repeats_read(args, kwargs) -> bool:
        """``repeat_interleave`` with a tensor of repeats and no ``output_size`` sums them on the host."""
        repeats = args[1] if len(args) > 1 else args[0]
        return torch.is_tensor(repeats) and kwargs.get("output_size") is None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name == "_local_scalar_dense":
            self._count("item")
        elif name in self.SHAPE_OPERATORS or (name == "repeat_interleave" and self._repeats_read(args, kwargs)):
            self._count("data-dependent shape")
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
            torch.is_tensor(index) and index.dtype in (torch.bool, torch.uint8)
            for index in (args[1] if len(args) > 1 else [])
            if index is not None
        ):
            self._count("boolean mask")
        elif name in ("lift_fresh", "lift_fresh_copy"):
            self._count("host tensor")
        return func(*args, **kwargs)

    def __enter__(self):
        for method in ("tolist", "numpy"):
            original = getattr(torch.Tensor, method)

            def counting(tensor, *args, _original=original, **kwargs):
                self._count("item")
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, method, counting)
            self._patched.append((method, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for method, original in self._patched:
            setattr(torch.Tensor, method, original)
        self._patched = []
        return super().__exit__(*exc)
