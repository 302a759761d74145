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

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.checkpoint_diagnostics import PartialWeightsError

from conftest import DEMO_TOKENIZER, tiny_bert_config

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]


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

    np.testing.assert_allclose(SentenceTransformer(str(tmp_path), device="cpu").encode(SENTENCES), expected, atol=1e-5)
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
