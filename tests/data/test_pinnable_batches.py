"""Every batch of every collator can be pinned: each tensor contiguous, no two elements sharing memory.

On a GPU the Trainer's DataLoader pins each batch (``dataloader_pin_memory``, on by default), and a tensor with a
stride of 0 made every training step of every path crash there (issue 30: ``sentence_ids`` expanded over the views).
CPU runs never pin, so the invariant is checked here (`helpers.gpu_contracts`), on batches of real text; the data
ledger checks it again on every batch of every example script (tests/scripts/ledger.py).
"""

from __future__ import annotations

import pytest
import torch

from helpers.batches import BUILDERS, host_data_disagreements
from helpers.gpu_contracts import unpinnable_tensors


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda builder: builder.__name__.strip("_"))
def test_every_tensor_of_every_batch_can_be_pinned(tokenizer, builder):
    checked = 0
    for name, batch in builder(tokenizer):
        assert unpinnable_tensors(batch, name) == []
        checked += sum(torch.is_tensor(value) for value in batch.values())
    assert checked > 0


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda builder: builder.__name__)
def test_every_batch_says_on_the_host_what_its_tensors_hold(tokenizer, builder):
    """The host arrays (`models.host_data`: real lengths, MLM positions) a step reads instead of the device."""
    for name, batch in builder(tokenizer):
        for part in batch.values() if all(isinstance(value, dict) for value in batch.values()) else [batch]:
            assert host_data_disagreements(part) == [], name


def test_the_check_sees_a_stride_0_tensor():
    ids = torch.arange(4).reshape(4, 1)
    assert unpinnable_tensors({"sentence_ids": ids.expand(4, 2)}) == [
        "batch['sentence_ids']: elements share memory (strides (1, 0)), not contiguous (shape (4, 2), strides (1, 0))"
    ]
    columns = torch.arange(6).reshape(2, 3).T  # a transpose: no shared memory, but not contiguous
    assert unpinnable_tensors({"task": {"ids": columns}}) == [
        "batch['task']['ids']: not contiguous (shape (3, 2), strides (1, 3))"
    ]
    assert unpinnable_tensors({"ids": ids.repeat(1, 2), "name": "wiki"}) == []
