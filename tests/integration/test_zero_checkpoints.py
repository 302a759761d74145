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

from conftest import REPO_ROOT, free_port
from helpers.launching import (
    CPU_ENV,
    DEEPSPEED_ON_CPU,
    DS_CONFIGS,
    MAX_STEPS,
    assert_same_weights,
    deepspeed_launch,
    run_clear,
)

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
BATCH_SIZE = 8  # per process

# name: (accelerate config, DeepSpeed config, model flags, the Dense modules sentence-transformers gets)
RUNS = {
    # the encoder's pooler layer (2_Dense, tanh), a 2-layer MLP kept at inference (3_Dense, 4_Dense), the MLM head and
    # the pre-batch queue (InfoNCE), in bf16
    "zero3_bf16_cls_mlp_mlm_queue": (
        "accelerate_zero3.yaml",
        "zero3.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1", "--bf16", "true"),
        3,
    ),
    "zero1_bf16_mean_linear": (
        "accelerate_zero2.yaml",
        "zero1",  # zero2.json at stage 1 (`_deepspeed_json`)
        ("--pooler_type", "mean", "--projection_type", "linear", "--projection_at_inference", "true",
         "--bf16", "true"),
        1,
    ),
    # the [CLS] state as it is (no pooler layer in the encoder), no projection: Pooling only
    "zero3_cls_before_pooler_no_projection": (
        "accelerate_zero3.yaml",
        "zero3.json",
        ("--pooler_type", "cls_before_pooler", "--projection_type", "none"),
        0,
    ),
    "zero2_bf16_cls_mlp_mlm_queue": (
        "accelerate_zero2.yaml",
        "zero2.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1", "--bf16", "true"),
        3,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(RUNS))
def test_a_checkpoint_saved_under_zero_loads_whole_with_the_trained_weights(tmp_path, name):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    accelerate_yaml, deepspeed_json, model_flags, dense_modules = RUNS[name]
    deepspeed_json = _deepspeed_json(deepspeed_json, tmp_path)
    launcher = deepspeed_launch(accelerate_yaml, deepspeed_json, "--main_process_port", free_port())
    result, output_dir = run_clear(
        REPO_ROOT,
        tmp_path,
        *model_flags,
        *DEEPSPEED_ON_CPU,
        "--per_device_train_batch_size", str(BATCH_SIZE),
        "--stsb_dev_file", "",
        "--save_strategy", "steps",
        "--save_steps", str(MAX_STEPS),  # DeepSpeed's own checkpoint of the last step: the reference
        launcher=launcher,
        env=CPU_ENV,
        timeout=300,
    )  # fmt: skip
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
    assert "SentenceTransformer reload of" in result.stdout  # the script's own check ran, and passed

    if "queue" in name:  # the last step's keys, gathered from both processes: an exact resume's queue
        queue = load_file(checkpoint / "prebatch_queue.safetensors")
        assert queue["batch_0"].shape == (2 * BATCH_SIZE, reference.config.embedding_size)
        assert queue["batch_0"].abs().sum(dim=1).min() > 0


def _deepspeed_json(name: str, tmp_path):
    """A shipped DeepSpeed config by file name, or ``"zero1"``: zero2.json at stage 1 (optimizer states sharded)."""
    if name != "zero1":
        return name
    config = json.loads((DS_CONFIGS / "zero2.json").read_text())
    config["zero_optimization"]["stage"] = 1
    path = tmp_path / "zero1.json"
    path.write_text(json.dumps(config))
    return path


def test_zero3_that_cannot_gather_its_weights_is_refused_before_training(tmp_path):
    """Without stage3_gather_16bit_weights_on_model_save the Trainer has nothing whole to save: the run would train,
    then fail at its first save with the trained weights lost. It stops before the first step instead."""
    config = json.loads((DS_CONFIGS / "zero3.json").read_text())
    config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = False
    deepspeed_json = tmp_path / "zero3_not_gathered.json"
    deepspeed_json.write_text(json.dumps(config))
    launcher = deepspeed_launch("accelerate_zero3.yaml", deepspeed_json, "--main_process_port", free_port())
    result, output_dir = run_clear(
        REPO_ROOT, tmp_path, *DEEPSPEED_ON_CPU, "--stsb_dev_file", "", check=False, launcher=launcher, env=CPU_ENV,
        timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'ZeRO-3 without "stage3_gather_16bit_weights_on_model_save": true cannot save the model' in result.stderr
    assert not (output_dir / "trainer_state.json").exists()
