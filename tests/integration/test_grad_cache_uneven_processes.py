"""GradCache on uneven per-process batches, launched on 2 gloo processes under DDP and DeepSpeed ZeRO-1, 2 and 3:
the losses and gradients of the unchunked run."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import REPO_ROOT
from helpers.launching import DS_CONFIGS, save_tiny_model, train_engines, weights

SENTENCES = 17  # in batches of 5 per process: step 2 is 5 + 2 sentences
LEARNING_RATE = 0.01
UNEVEN = {
    "per_device_train_batch_size": 5,
    "num_train_epochs": 1,
    "accelerator_config": {"even_batches": False},
    "optim": "sgd",
    "learning_rate": LEARNING_RATE,
    "lr_scheduler_type": "constant",
    "max_grad_norm": 0.0,
}
CHUNKED = {**UNEVEN, "grad_cache_chunk_size": 3}


def test_uneven_last_batch_trains_under_ddp_and_zero_1_2_3_as_without_grad_cache(tmp_path):
    """examples' Trainer setup (tests/scripts/train_engines.py) on 2 gloo processes, one launch for all five runs:
    GradCache under DDP and ZeRO-1, 2 and 3 finishes the epoch, on both processes through GradCache at both steps,
    and logs the losses and gradient norms and leaves the gradients of the unchunked DDP run."""
    model_dir = save_tiny_model(tmp_path / "initial", pooler_type="mean", contrastive_loss="info_nce")
    lines = (REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines[:SENTENCES]) + "\n")
    result = train_engines(tmp_path, model_dir, corpus, UNEVEN_RUNS, timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    out = tmp_path / "out"
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


UNEVEN_RUNS = {
    "ddp_unchunked": UNEVEN,
    "ddp": CHUNKED,
    "zero3": {**CHUNKED, "deepspeed": str(DS_CONFIGS / "zero3.json")},
    "zero2": {**CHUNKED, "deepspeed": str(DS_CONFIGS / "zero2.json")},
    "zero1": {**CHUNKED, "deepspeed": str(DS_CONFIGS / "zero2.json"), "zero_stage": 1},
}


TIMEOUT = 300  # the launch takes about a minute; without the fix it hangs at the second step


def gradient_sums(trained: dict, initial: dict) -> dict[str, torch.Tensor]:
    """g1 + g2 of every weight, from plain SGD's w0 - lr * (g1 + g2)."""
    return {name: (initial[name] - trained[name]) / LEARNING_RATE for name in initial}
