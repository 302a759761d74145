"""The host data of a batch (`models.host_data`: lengths and MLM positions the collators give as numpy arrays) changes
how a step finds its values, never what it computes: with and without them, every path gives the same losses and
gradients (float64, to 1e-12), and GradCache cuts the MLM positions into its chunks as the rows are cut."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import ModernBertConfig

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.models.encoding_policy import attention_mask_for
from contrastive_hf.models.host_data import HOST_DATA_NAMES, to_device
from contrastive_hf.recipes.dpr import QueryPassageCollator
from contrastive_hf.training.grad_cache import grad_cache_step

from conftest import tiny_bert_config
from helpers.batches import nli_rows, sentences
from helpers.builders import gradients, make_dual_encoder

PATHS = [0, 3, "sorted", "packed"]


def without_host_data(batch: dict) -> dict:
    """The batch as a user might build it: tensors only (prompt lengths as a tensor)."""
    stripped = {name: value for name, value in batch.items() if name not in HOST_DATA_NAMES}
    if "prompt_lengths" in stripped:
        stripped["prompt_lengths"] = torch.as_tensor(stripped["prompt_lengths"])
    return stripped


def loss_and_gradients(model, batch):
    model.zero_grad(set_to_none=True)
    output = model(**batch)
    output.loss.backward()
    return output.loss.detach(), gradients(model)


def assert_same_step(model, batch):
    assert any(name in batch for name in HOST_DATA_NAMES)
    with_host, with_host_gradients = loss_and_gradients(model, batch)
    without, without_gradients = loss_and_gradients(model, without_host_data(batch))
    torch.testing.assert_close(with_host, without, atol=1e-12, rtol=0)
    assert with_host_gradients.keys() == without_gradients.keys()
    for name, gradient in without_gradients.items():
        torch.testing.assert_close(with_host_gradients[name], gradient, atol=1e-12, rtol=1e-10, msg=name)


def clear_model(tokenizer, sub_batch_size, **config) -> ContrastiveForPreTraining:
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, sub_batch_size=sub_batch_size, **config))
    return model.double()


@pytest.mark.parametrize("sub_batch_size", PATHS)
@pytest.mark.parametrize("mlm_on_views", [False, True])
def test_clear_batches_give_the_same_step_with_and_without_host_data(tokenizer, sub_batch_size, mlm_on_views):
    add_del_token(tokenizer)
    collator = ContrastiveDataCollator(
        tokenizer, augmentation="del_word", mlm=True, mlm_on_views=mlm_on_views, max_length=32, seed=0
    )
    batch = collator([{"text": text} for text in sentences(12)])
    assert len(batch["mlm_positions"]) > 0
    model = clear_model(tokenizer, sub_batch_size, pooler_type="mean", contrastive_loss="nt_xent", mlm_weight=1.0)
    assert_same_step(model, batch)


@pytest.mark.parametrize("sub_batch_size", PATHS)
def test_pairs_with_prompts_left_out_give_the_same_step(tokenizer, sub_batch_size):
    prompts = {"query": "query: ", "document": "passage: "}
    collator = PairCollator(tokenizer, prompts=prompts, include_prompt=False, seed=0)
    batch = collator(nli_rows(10))
    assert isinstance(batch["prompt_lengths"], np.ndarray) and isinstance(batch["input_lengths"], np.ndarray)
    model = clear_model(tokenizer, sub_batch_size, pooler_type="cls_before_pooler", prompts=prompts,
                        include_prompt=False, contrastive_loss="info_nce")  # fmt: skip
    assert_same_step(model, batch)


@pytest.mark.parametrize("sub_batch_size", PATHS)
def test_dpr_batches_give_the_same_step(tokenizer, sub_batch_size):
    rows = [{"query": row["sent0"], "positive": row["sent1"], "hard_negative": row["hard_neg"]} for row in nli_rows()]
    batch = QueryPassageCollator(tokenizer, max_query_length=32, max_passage_length=32)(rows)
    torch.manual_seed(0)
    model = make_dual_encoder(vocab_size=len(tokenizer), sub_batch_size=sub_batch_size).double()
    assert_same_step(model, batch)


def test_grad_cache_cuts_the_mlm_positions_with_the_rows(tokenizer):
    """Chunks of 3 rows of a CLEAR batch: each chunk's MLM positions re-based to it, its share of the masked
    tokens counted on the host; the gradients of one pass over the whole batch."""
    add_del_token(tokenizer)
    collator = ContrastiveDataCollator(tokenizer, augmentation="del_word", mlm=True, max_length=32, seed=0)
    batch = collator([{"text": text} for text in sentences(10)])
    reference = clear_model(tokenizer, "packed", pooler_type="mean", contrastive_loss="nt_xent", mlm_weight=1.0)
    _, expected = loss_and_gradients(reference, batch)
    model = clear_model(tokenizer, "packed", pooler_type="mean", contrastive_loss="nt_xent", mlm_weight=1.0)
    model.zero_grad(set_to_none=True)
    grad_cache_step(model, model, batch, chunk_size=3)
    for name, gradient in gradients(model).items():
        torch.testing.assert_close(gradient, expected[name], atol=1e-10, rtol=1e-8, msg=name)


def test_the_encoder_gets_a_mask_transformers_need_not_read_back():
    """No padding: no mask. Padding, a BERT under sdpa: a ready (N, 1, 1, L) mask. ModernBERT (whose local layers
    build a second mask from the 2D one) and calls without lengths: the 2D mask."""
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    bert = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config())).encoder
    assert attention_mask_for(bert, mask[:1], np.array([3])) is None
    ready = attention_mask_for(bert, mask, np.array([3, 2]))
    assert ready.shape == (2, 1, 1, 3) and ready.dtype == torch.bool and torch.equal(ready[:, 0, 0], mask.bool())
    assert attention_mask_for(bert, mask, None) is mask
    modern = ModernBertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=37, pad_token_id=0)  # fmt: skip
    modern_encoder = ContrastiveModel(ContrastiveConfig(encoder=modern, pooler_type="mean")).encoder
    assert attention_mask_for(modern_encoder, mask, np.array([3, 2])) is mask


def test_to_device_copies_host_values_and_keeps_tensors():
    values = np.broadcast_to(np.arange(3), (2, 3))  # a read-only view
    tensor = to_device(values, "cpu")
    assert tensor.dtype == torch.long and tensor.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert to_device([True, False], "cpu", torch.bool).tolist() == [True, False]
    existing = torch.arange(4)
    assert torch.equal(to_device(existing, "cpu"), existing)


def test_a_loop_that_moves_every_entry_of_a_batch_leaves_the_host_data_on_the_host(tokenizer):
    """``{name: value.to(device) ...}``, the idiom of hand-written loops (and Accelerate's send_to_device): the host
    arrays answer ``.to`` by staying where the model reads them."""
    batch = PairCollator(tokenizer, seed=0)(nli_rows(4))
    moved = {name: value.to("cpu") for name, value in batch.items()}
    assert isinstance(moved["input_lengths"], np.ndarray) and moved["input_lengths"] is batch["input_lengths"]
    from accelerate.utils import send_to_device

    assert isinstance(send_to_device(batch, "cpu")["input_lengths"], np.ndarray)
