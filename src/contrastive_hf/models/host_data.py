"""What a batch tells the model on the host (CPU), so that a training step never waits for the GPU.

On a GPU the host queues kernels ahead of the device; reading a value back (``.item()``, ``.tolist()``, a ``nonzero``
or a boolean mask whose size depends on values, ``if tensor:``) or copying a tensor from pageable host memory makes
the host wait until every queued kernel has run (issue 32). Packing a batch needs its sentence lengths on the host
(to size its kernels), the MLM head needs the positions of the masked tokens, a prompt left out of the pooling needs
its length: the collators know all of them when they build the batch, and give them as numpy arrays beside the
tensors, as transformers' `DataCollatorWithFlattening` gives ``max_length`` beside ``cu_seq_lens``. The Trainer moves
only tensors to the device, so these stay on the host (`HostArray`: their ``.to(device)`` is a no-op, for loops that
move every entry of a batch); the model copies what it needs as tensors from pinned memory without blocking
(`to_device`).

The entries (every one optional: a batch without them takes the same paths, reading the values back):

- ``input_lengths`` ``(B, S)`` (or ``(B,)``): the real tokens of each row of ``input_ids``; ``mlm_lengths`` for
  ``mlm_input_ids``; ``query_lengths`` ``(B,)`` and ``passage_lengths`` ``(B, P)`` for a dual encoder's;
- ``mlm_positions`` ``(M,)``: the masked tokens, as flat indices into ``mlm_labels`` (the positions where it is not
  -100, row-major);
- ``prompt_lengths`` ``(B, S)``: leading prompt tokens of each view, left out of the pooling (a tensor works too).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["HOST_DATA_NAMES", "HostArray", "host", "to_device", "host_array", "row_lengths"]

# The batch entries that are host arrays (numpy), by the name of the tensor they describe.
HOST_DATA_NAMES = ("input_lengths", "mlm_lengths", "mlm_positions", "query_lengths", "passage_lengths")


class HostArray(np.ndarray):
    """A numpy array that stays on the host: ``.to(...)`` returns it unchanged. Code that moves every entry of a
    batch (``{name: value.to(device) for name, value in batch.items()}``, Accelerate's ``send_to_device``) then
    leaves it where the model reads it, as the Trainer does."""

    def to(self, *args, **kwargs) -> HostArray:
        return self


def host(values) -> HostArray:
    """``values`` as an int64 `HostArray` (what the collators give)."""
    return np.asarray(values, dtype=np.int64).view(HostArray)


def to_device(values, device: torch.device | str, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values (a numpy array, a list) as a tensor on ``device``: on a GPU copied from pinned memory without
    blocking the host (a copy from pageable memory waits for the device); a tensor already there is returned."""
    device = torch.device(device)
    if torch.is_tensor(values):
        return values.to(device=device, dtype=dtype, non_blocking=True)
    array = np.ascontiguousarray(values)
    if not array.flags.writeable:  # a broadcast view: torch takes writable memory only
        array = array.copy()
    tensor = torch.from_numpy(array).to(dtype)
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def host_array(values) -> np.ndarray | None:
    """``values`` on the host as a numpy int64 array: as they are when the collator gave host data; read back from a
    tensor otherwise (which waits for the device: the path of batches built without host data). None stays None."""
    if values is None:
        return None
    if torch.is_tensor(values):
        return values.detach().cpu().numpy().astype(np.int64, copy=False)
    return np.asarray(values, dtype=np.int64)


def row_lengths(attention_mask: torch.Tensor, lengths=None) -> np.ndarray:
    """The real tokens of each row of a right-padded ``(..., L)`` mask, flattened to ``(N,)``, on the host:
    ``lengths`` when the collator gave them, else counted from the mask (read back from the device)."""
    if lengths is not None:
        return host_array(lengths).reshape(-1)
    return host_array(attention_mask.reshape(-1, attention_mask.shape[-1]).sum(dim=1))
