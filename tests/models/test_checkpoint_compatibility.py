"""Checkpoints saved by contrastive_hf 0.1 (before the package moved into wings) load and embed as they did."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import contrastive_hf
from contrastive_hf import ContrastiveModel, DualEncoderModel

from conftest import CHECKPOINTS_0_1

OLD = CHECKPOINTS_0_1
EXPECTED = load_file(OLD / "expected_embeddings.safetensors")
INPUT_IDS = EXPECTED["input_ids"]
ATTENTION_MASK = (INPUT_IDS != 0).long()


@pytest.mark.parametrize("name", ["contrastive_cls", "contrastive_mean_projected"])
def test_a_0_1_contrastive_checkpoint_loads_with_automodel_and_embeds_the_same(name):
    model = AutoModel.from_pretrained(OLD / name).eval()
    assert isinstance(model, ContrastiveModel)
    with torch.no_grad():
        embeddings = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).pooler_output
    torch.testing.assert_close(embeddings, EXPECTED[name], rtol=0, atol=1e-6)


def test_a_0_1_dual_encoder_checkpoint_loads_and_embeds_the_same():
    model = AutoModel.from_pretrained(OLD / "dual_encoder").eval()
    assert isinstance(model, DualEncoderModel)
    with torch.no_grad():
        queries = model.embed_queries(INPUT_IDS, ATTENTION_MASK)
        passages = model.embed_passages(INPUT_IDS, ATTENTION_MASK)
    torch.testing.assert_close(queries, EXPECTED["dual_encoder_queries"], rtol=0, atol=1e-6)
    torch.testing.assert_close(passages, EXPECTED["dual_encoder_passages"], rtol=0, atol=1e-6)


def test_the_0_1_module_paths_still_import_with_a_warning_naming_the_new_one():
    with pytest.warns(FutureWarning, match="contrastive_hf.training_args moved to contrastive_hf.training"):
        from contrastive_hf.training_args import ContrastiveTrainingArguments
    assert ContrastiveTrainingArguments is contrastive_hf.ContrastiveTrainingArguments
    # a 0.1 training_args.bin pickles the class under its old path: unpickling finds the same class
    import pickle

    restored = pickle.loads(
        pickle.dumps(ContrastiveTrainingArguments, protocol=2).replace(
            b"contrastive_hf.training.training_args", b"contrastive_hf.training_args"
        )
    )
    assert restored is ContrastiveTrainingArguments
