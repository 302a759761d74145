"""GradCache on uneven per-process batches on 2 gloo processes under DDP and DeepSpeed ZeRO-1, 2 and 3: the losses
and gradients of the unchunked run."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.launching import weights
from helpers.zero_launches import UNEVEN_JOB, UNEVEN_LEARNING_RATE, UNEVEN_RUNS

# a job of the shared engine launch, which runs once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("zero")


def test_uneven_last_batch_trains_under_ddp_and_zero_1_2_3_as_without_grad_cache(zero_launches):
    """examples' Trainer setup (tests/scripts/train_engines.py) on 2 gloo processes, one job of the shared launch for
    all five runs (`UNEVEN_RUNS`: 17 sentences in batches of 5 per process, so step 2 is 5 + 2): GradCache under DDP
    and ZeRO-1, 2 and 3 finishes the epoch, on both processes through GradCache at both steps, and logs the losses and
    gradient norms and leaves the gradients of the unchunked DDP run. Without the fix it hung at the second step."""
    launch = zero_launches.run("ddp")
    assert launch.status(UNEVEN_JOB) == 0, launch.failure(UNEVEN_JOB)
    model_dir, out = launch.folder / UNEVEN_JOB / "initial", launch.output(UNEVEN_JOB)

    engines = {name: json.loads((out / name / "engine.json").read_text()) for name in UNEVEN_RUNS}
    assert engines["ddp_unchunked"]["grad_cache_steps"] == [0, 0]
    for name in UNEVEN_RUNS:
        if name != "ddp_unchunked":
            assert engines[name]["grad_cache_steps"] == [2, 2], name  # the 2-sentence batch too
    for stage in (1, 2, 3):
        assert engines[f"zero{stage}"]["zero_stage"] == stage

    def logged(name: str) -> list[tuple[float, float]]:
        history = json.loads((out / name / "log_history.json").read_text())
        return [(entry["loss"], entry["grad_norm"]) for entry in history if "grad_norm" in entry]

    reference = logged("ddp_unchunked")
    assert len(reference) == 2
    initial = weights(model_dir)
    expected = gradient_sums(weights(out / "ddp_unchunked"), initial)
    assert max(grad.abs().max() for grad in expected.values()) > 0.1
    for name in UNEVEN_RUNS:
        for step, (got, want) in enumerate(zip(logged(name), reference, strict=True)):
            assert got == pytest.approx(want, rel=1e-5), (name, step + 1)
        for parameter, grad in gradient_sums(weights(out / name), initial).items():
            torch.testing.assert_close(grad, expected[parameter], atol=1e-4, rtol=1e-4, msg=f"{name}, {parameter}")


def gradient_sums(trained: dict, initial: dict) -> dict[str, torch.Tensor]:
    """g1 + g2 of every weight, from plain SGD's w0 - lr * (g1 + g2)."""
    return {name: (initial[name] - trained[name]) / UNEVEN_LEARNING_RATE for name in initial}
