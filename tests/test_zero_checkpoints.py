"""A checkpoint saved under DeepSpeed ZeRO-2 or ZeRO-3 is whole in every file, and a save that is not refuses.

Under ZeRO-3 each process keeps a shard of every parameter, empty in the module itself; ``Trainer.save_model`` gathers
them into one state dict and passes it to ``save_pretrained``. Every file of the checkpoint (the encoder's
``model.safetensors``, ``contrastive_heads.safetensors``, the sentence-transformers ``N_Dense`` modules) must come from
that state dict, never from the live modules: a ``cls`` pooler's layer or a projection kept at inference was once
written as a ``[0]`` tensor.

The launched runs (examples/run_clear.py on a tiny BERT from scratch, 2 gloo processes, DeepSpeed on its CPU
accelerator, 3 steps, a checkpoint at the last step) cover every pooler and projection that reaches the embedding,
the MLM head and the pre-batch queue, under ZeRO-3 and ZeRO-2. The reference for what was trained is DeepSpeed's own
checkpoint of the last step, consolidated by its own tool (``zero_to_fp32``): the saved folder must load in
sentence-transformers and in contrastive_hf with that model's weights and embeddings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.checkpoint_files import PartialWeightsError

from conftest import DEMO_TOKENIZER, REPO_ROOT, free_port, tiny_bert_config
from test_deepspeed import CPU_ENV, DEEPSPEED_ON_CPU, DS_CONFIGS, MAX_STEPS, assert_same_weights, deepspeed_launch
from test_run_clear import run_clear

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
BATCH_SIZE = 8  # per process

# name: (accelerate config, DeepSpeed config, model flags, the Dense modules sentence-transformers gets)
RUNS = {
    # the encoder's pooler layer (2_Dense, tanh), a 2-layer MLP kept at inference (3_Dense, 4_Dense), the MLM head and
    # the pre-batch queue (InfoNCE)
    "zero3_cls_mlp_mlm_queue": (
        "accelerate_zero3.yaml",
        "zero3.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1"),
        3,
    ),
    # the [CLS] state as it is (no pooler layer in the encoder), no projection: Pooling only
    "zero3_cls_before_pooler_no_projection": (
        "accelerate_zero3.yaml",
        "zero3.json",
        ("--pooler_type", "cls_before_pooler", "--projection_type", "none"),
        0,
    ),
    "zero2_cls_mlp_mlm_queue": (
        "accelerate_zero2.yaml",
        "zero2.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1"),
        3,
    ),
}  # fmt: skip


def sentence_transformers_embeddings(folder) -> np.ndarray:
    return SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)


@pytest.mark.parametrize("name", list(RUNS))
def test_a_checkpoint_saved_under_zero_loads_whole_with_the_trained_weights(tmp_path, name):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    accelerate_yaml, deepspeed_json, model_flags, dense_modules = RUNS[name]
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
    reference.load_state_dict(trained, strict=True)
    expected = reference.contrastive.encode(SENTENCES, tokenizer=AutoTokenizer.from_pretrained(output_dir))

    for folder in (output_dir, checkpoint):  # the end of training (save_model) and a Trainer checkpoint
        for path in sorted(folder.glob("**/*.safetensors")):
            assert all(tensor.numel() > 0 for tensor in load_file(path).values()), path
        assert_same_weights(ContrastiveForPreTraining.from_pretrained(folder).state_dict(), trained, atol=0)
        np.testing.assert_allclose(sentence_transformers_embeddings(folder), expected, atol=1e-5, err_msg=str(folder))
        loaded = ContrastiveModel.from_pretrained(folder).encode(SENTENCES)
        np.testing.assert_allclose(loaded, expected, atol=1e-5, err_msg=str(folder))
    assert "SentenceTransformer reload of" in result.stdout  # the script's own check ran, and passed

    if "queue" in name:  # the last step's keys, gathered from both processes: an exact resume's queue
        queue = load_file(checkpoint / "prebatch_queue.safetensors")
        assert queue["batch_0"].shape == (2 * BATCH_SIZE, reference.config.embedding_size)
        assert queue["batch_0"].abs().sum(dim=1).min() > 0


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


# ---------------------------------------------------------------------------------------------------------------
# In one process: ZeRO-3's partitioned parameters as deepspeed.zero.Init leaves them
# ---------------------------------------------------------------------------------------------------------------


def tiny_model() -> ContrastiveForPreTraining:
    """With every kind of weight a checkpoint writes: encoder, pooler layer and MLP projection (Dense modules), MLM
    head (contrastive_heads.safetensors)."""
    config = tiny_bert_config(vocab_size=len(AutoTokenizer.from_pretrained(DEMO_TOKENIZER)))
    return ContrastiveForPreTraining.from_config(config, pooler_type="cls", projection_at_inference=True).eval()


def partition(model, names: list[str]) -> None:
    """Leave these parameters as ZeRO-3 does outside ``GatheredParameters``: an empty tensor, the full shape in
    ``ds_shape``."""
    for name in names:
        parameter = model.get_parameter(name)
        parameter.ds_shape = parameter.shape
        parameter.data = torch.empty(0, dtype=parameter.dtype)


PARTITIONED = ["contrastive.encoder.pooler.dense.weight", "contrastive.projection.layers.1.weight"]


def test_every_file_is_written_from_the_state_dict_given_not_from_partitioned_modules(tmp_path):
    """As Trainer.save_model saves under ZeRO-3: the modules hold empty shards, the consolidated state dict is given.
    sentence-transformers must then compute what the whole model computed."""
    model, tokenizer = tiny_model(), AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    expected = model.contrastive.encode(SENTENCES, tokenizer=tokenizer)
    whole = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    partition(model, PARTITIONED)
    model.save_pretrained(tmp_path, state_dict=whole)
    tokenizer.save_pretrained(tmp_path)

    np.testing.assert_allclose(sentence_transformers_embeddings(tmp_path), expected, atol=1e-5)
    np.testing.assert_allclose(ContrastiveModel.from_pretrained(tmp_path).encode(SENTENCES), expected, atol=1e-5)


def folder_contents(folder) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize(
    "case, named",
    [
        ("partitioned modules, no state dict", PARTITIONED),
        ("an empty tensor in the state dict", ["contrastive.projection.layers.0.weight"]),
        ("a weight missing from the state dict", ["mlm_head.dense.bias"]),
        ("an empty state dict", ["none of the model's"]),
    ],
)
def test_a_save_of_weights_that_are_not_whole_is_refused_before_writing_anything(tmp_path, case, named):
    model = tiny_model()
    model.save_pretrained(tmp_path)  # an earlier, good checkpoint in the folder
    before = folder_contents(tmp_path)
    state_dict = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    if case == "partitioned modules, no state dict":
        partition(model, PARTITIONED)
        state_dict = None
    elif case == "an empty tensor in the state dict":
        state_dict["contrastive.projection.layers.0.weight"] = torch.empty(0)
    elif case == "a weight missing from the state dict":
        del state_dict["mlm_head.dense.bias"]
    else:
        state_dict = {}  # what the Trainer saves under ZeRO-3 without stage3_gather_16bit_weights_on_model_save

    with pytest.raises(PartialWeightsError) as raised:
        model.save_pretrained(tmp_path, state_dict=state_dict)
    message = str(raised.value)
    assert all(name in message for name in named), message
    assert f"Not saving {tmp_path}" in message and '"stage3_gather_16bit_weights_on_model_save": true' in message
    assert folder_contents(tmp_path) == before  # nothing written, nothing removed

    with pytest.raises(PartialWeightsError):
        model.save_pretrained(tmp_path / "new", state_dict=state_dict)
    assert not (tmp_path / "new").exists()
