"""``--torch_compile`` with inductor, the backend a user gets (issue 32): CLEAR's packed step (MLM and two views)
trains as in eager mode. One path only: inductor generates and builds C++ for each graph, minutes of CPU; every
path runs under dynamo with AOTAutograd in tests/training/test_torch_compile.py."""

from __future__ import annotations

import pytest
import torch

from helpers.steps import trained


def test_inductor_trains_clears_packed_step_as_in_eager(tokenizer, tmp_path):
    eager_losses, eager_weights, _ = trained(tokenizer, tmp_path / "eager", "clear", "packed", False)
    losses, weights, _ = trained(tokenizer, tmp_path / "inductor", "clear", "packed", True, backend="inductor")
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    for name, weight in eager_weights.items():
        torch.testing.assert_close(weights[name], weight, atol=1e-5, rtol=1e-4, msg=name)
