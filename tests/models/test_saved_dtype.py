"""A checkpoint reloads in one dtype (issue 30): saved in bf16 (a DeepSpeed bf16 run before the fix, or a user's
``model.to(torch.bfloat16).save_pretrained(...)``), it loaded with a bf16 encoder (transformers 5 loads the saved
dtype) under float32 heads, and `encode` failed with ``mat1 and mat2 must have the same dtype`` for every head kept at
inference (a projection, an MLP). Reloaded now: one dtype, the saved one by default or the one asked for, and the
same embeddings through sentence-transformers; a training script's load gives float32 master weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.commands.loading import load_pretraining_model
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel

from conftest import tiny_bert_config
from helpers.builders import make_dual_encoder

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]


def _save_in_bf16(model, tokenizer, folder) -> None:
    model.tokenizer = tokenizer
    model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _dtypes(model) -> set[torch.dtype]:
    return {parameter.dtype for parameter in model.parameters()}


@pytest.fixture
def bf16_checkpoint(tokenizer, tmp_path):
    """A CLEAR model whose MLP is kept at inference, saved in bf16, and its embeddings computed in bf16 before."""
    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=tiny_bert_config(), projection_at_inference=True, projection_type="mlp")
    model = ContrastiveForPreTraining(config).eval()
    _save_in_bf16(model, tokenizer, tmp_path)
    return tmp_path, model.contrastive.encode(SENTENCES, tokenizer=tokenizer, bf16=False)


@pytest.mark.parametrize("cls", [ContrastiveModel, ContrastiveForPreTraining])
def test_a_bf16_checkpoint_reloads_in_bf16_and_encodes(bf16_checkpoint, cls):
    folder, saved_embeddings = bf16_checkpoint
    model = cls.from_pretrained(folder)
    assert _dtypes(model) == {torch.bfloat16}
    encoder = model if cls is ContrastiveModel else model.contrastive
    np.testing.assert_array_equal(encoder.encode(SENTENCES, bf16=False), saved_embeddings)


def test_a_bf16_checkpoint_reloads_in_the_dtype_asked_for(bf16_checkpoint):
    folder, saved_embeddings = bf16_checkpoint
    model = ContrastiveModel.from_pretrained(folder, dtype=torch.float32)
    assert _dtypes(model) == {torch.float32}
    # the bf16 weights, computed in float32: as close as bf16's rounding of the activations allows
    np.testing.assert_allclose(model.encode(SENTENCES), saved_embeddings, atol=0.05, rtol=0.05)
    assert _dtypes(ContrastiveModel.from_pretrained(folder, dtype="auto")) == {torch.bfloat16}


def test_a_bf16_checkpoint_gives_the_same_embeddings_in_sentence_transformers(bf16_checkpoint):
    from sentence_transformers import SentenceTransformer

    folder, saved_embeddings = bf16_checkpoint
    embeddings = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(embeddings, saved_embeddings, atol=1e-6)


def test_a_training_script_continues_a_bf16_checkpoint_in_float32(bf16_checkpoint, tokenizer):
    folder, _ = bf16_checkpoint
    model = load_pretraining_model(str(folder), None, tokenizer)
    assert _dtypes(model) == {torch.float32}  # float32 master weights; bf16 is the autocast's business


def test_a_two_tower_dual_encoder_saved_in_bf16_reloads_in_one_dtype(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = make_dual_encoder(projection_type="linear", projection_at_inference=True).eval()
    _save_in_bf16(model, tokenizer, tmp_path)
    saved = model.encode_query(SENTENCES, tokenizer=tokenizer, bf16=False)
    reloaded = DualEncoderModel.from_pretrained(tmp_path)
    assert _dtypes(reloaded) == {torch.bfloat16}
    np.testing.assert_array_equal(reloaded.encode_query(SENTENCES, bf16=False), saved)
