"""Checkpoints saved under DeepSpeed ZeRO-1, 2 and 3 on 2 gloo processes are whole, for every head kept at inference,
and in float32 from the optimiser's master weights under ``--bf16`` too (DeepSpeed keeps the model itself in bf16
there: a bf16 checkpoint reloaded in mixed dtypes and failed the run's reload check on a GPU, issue 30)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel

from helpers.launching import MAX_STEPS, assert_same_weights
from helpers.zero_launches import CHECKPOINT_BATCH, CHECKPOINT_RUNS, NOT_GATHERED

# the ZeRO launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("zero")

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]


@pytest.mark.parametrize("name", list(CHECKPOINT_RUNS))
def test_a_checkpoint_saved_under_zero_loads_whole_with_the_trained_weights(zero_launches, name):
    """Each run of `CHECKPOINT_RUNS`, a job of its stage's launch (`helpers/zero_launches.py`): DeepSpeed's own
    checkpoint of the last step (the reference), and the model saved at the end."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    stage, _, _, dense_modules = CHECKPOINT_RUNS[name]
    launch = zero_launches.run(stage)
    assert launch.status(name) == 0, launch.failure(name)
    output_dir, log = launch.output(name), launch.log(name)
    checkpoint = output_dir / f"checkpoint-{MAX_STEPS}"
    modules = json.loads((output_dir / "modules.json").read_text())
    assert [module["path"] for module in modules if module["type"].endswith("Dense")] == [
        f"{index}_Dense" for index in range(2, 2 + dense_modules)
    ]

    # what was trained, without contrastive_hf's writer: DeepSpeed's shards, consolidated by DeepSpeed's tool, in a
    # model of the saved configuration
    trained = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
    reference = ContrastiveForPreTraining.from_pretrained(output_dir)
    frozen = {name for name, parameter in reference.named_parameters() if not parameter.requires_grad}
    missing, unexpected = reference.load_state_dict(trained, strict=False)
    # ZeRO-1 keeps no copy of a frozen parameter (the unused pooler layer) in its checkpoint; stages 2 and 3 do
    assert not unexpected and set(missing) <= frozen, (missing, unexpected)
    expected = reference.contrastive.encode(SENTENCES, tokenizer=AutoTokenizer.from_pretrained(output_dir))

    for folder in (output_dir, checkpoint):  # the end of training (save_model) and a Trainer checkpoint
        for path in sorted(folder.glob("**/*.safetensors")):
            tensors = load_file(path).values()
            assert all(tensor.numel() > 0 for tensor in tensors), path
            if path.name != "prebatch_queue.safetensors":  # weights (the queue holds embeddings, not weights)
                assert {tensor.dtype for tensor in tensors if tensor.is_floating_point()} == {torch.float32}, path
        assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"  # what loaders take
        saved = ContrastiveForPreTraining.from_pretrained(folder).state_dict()
        assert_same_weights({name: saved[name] for name in trained}, trained, atol=0)  # DeepSpeed's float32 masters
        assert saved.keys() - trained.keys() <= frozen
        np.testing.assert_allclose(
            SentenceTransformer(str(folder), device="cpu").encode(SENTENCES), expected, atol=1e-5, err_msg=str(folder)
        )
        loaded = ContrastiveModel.from_pretrained(folder).encode(SENTENCES)
        np.testing.assert_allclose(loaded, expected, atol=1e-5, err_msg=str(folder))
    assert "SentenceTransformer reload of" in log  # the script's own check ran, and passed

    if "queue" in name:  # the last step's keys, gathered from both processes: an exact resume's queue
        queue = load_file(checkpoint / "prebatch_queue.safetensors")
        assert queue["batch_0"].shape == (2 * CHECKPOINT_BATCH, reference.config.embedding_size)
        assert queue["batch_0"].abs().sum(dim=1).min() > 0


def test_zero3_that_cannot_gather_its_weights_is_refused_before_training(zero_launches):
    """Without stage3_gather_16bit_weights_on_model_save the Trainer has nothing whole to save: the run would train,
    then fail at its first save with the trained weights lost. It stops before the first step instead, on each
    process, as a usage error: one line and exit status 2 (which the job of the ZeRO-3 launch expects)."""
    launch = zero_launches.run("zero3")
    assert launch.status(NOT_GATHERED) == 2, launch.failure(NOT_GATHERED)
    message = 'run_clear.py: error: DeepSpeed ZeRO-3 without "stage3_gather_16bit_weights_on_model_save": true cannot'
    for rank in (0, 1):
        log = launch.log(NOT_GATHERED, rank=rank)
        assert message in log and "Traceback" not in log, log[-3000:]
    assert not (launch.output(NOT_GATHERED) / "trainer_state.json").exists()
