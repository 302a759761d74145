"""GradCache gives the loss and the gradients of the full-batch computation, dropout included."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.training import grad_cache as grad_cache_module
from contrastive_hf.training.grad_cache import grad_cache_step
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import tiny_bert_config
from helpers.builders import BATCH, batch, build, gradients, queue_holding


def queue(model) -> None:
    """Six queued keys, one of them sentence 1's positive again (id 3), in ``model``'s loss."""
    generator = torch.Generator().manual_seed(2)
    queue_holding(model, torch.randn(6, 32, generator=generator), torch.tensor([100, 101, 3, 102, 103, 104]))


def run_grad_cache(model, inputs, chunk_size=4, **kwargs):
    return grad_cache_step(model, model, inputs, chunk_size, **kwargs)


def test_without_dropout_it_equals_one_full_batch_pass_with_mlm_hard_negatives_and_queue():
    inputs = batch()
    reference_model = build(dropout=0.0)
    queue(reference_model)
    reference = reference_model(**inputs)
    reference.loss.backward()

    model = build(dropout=0.0)
    queue(model)
    result = run_grad_cache(model, inputs)
    torch.testing.assert_close(result.loss, reference.loss.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.cl_loss, reference.cl_loss.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.mlm_loss, reference.mlm_loss.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.negatives_per_query, reference.negatives_per_query)
    expected = gradients(reference_model)
    got = gradients(model)
    assert got.keys() == expected.keys() and any(name.startswith("mlm_head") for name in got)
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def full_batch_with_the_same_dropout(model, inputs, chunk_size):
    """The reference with dropout on: every chunk forwarded with its graph, in order, from one seed; one loss."""
    pieces = [
        model.embed_views(inputs["input_ids"][start:][:chunk_size], inputs["attention_mask"][start:][:chunk_size])
        for start in range(0, BATCH, chunk_size)
    ]
    queue(model)
    loss, _ = model.compute_contrastive_loss(torch.cat(pieces), inputs["sentence_ids"])
    loss.backward()
    return loss


@pytest.mark.parametrize("chunk_size", [3, 4])
def test_with_dropout_the_replayed_chunks_draw_the_same_masks(chunk_size):
    inputs = {key: value for key, value in batch().items() if not key.startswith("mlm")}
    reference_model = build(dropout=0.3, mlm_weight=0.0)
    torch.manual_seed(7)
    reference_loss = full_batch_with_the_same_dropout(reference_model, inputs, chunk_size)

    model = build(dropout=0.3, mlm_weight=0.0)
    torch.manual_seed(7)
    queue(model)
    result = run_grad_cache(model, inputs, chunk_size)
    torch.testing.assert_close(result.cl_loss, reference_loss.detach(), atol=1e-5, rtol=1e-5)
    expected = gradients(reference_model)
    for name, grad in gradients(model).items():
        torch.testing.assert_close(grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_without_the_replay_dropout_gradients_would_be_wrong(monkeypatch):
    """The control: the test above fails when the chunks are replayed with fresh dropout masks."""
    inputs = {key: value for key, value in batch().items() if not key.startswith("mlm")}
    reference_model = build(dropout=0.3, mlm_weight=0.0)
    torch.manual_seed(7)
    full_batch_with_the_same_dropout(reference_model, inputs, 4)

    monkeypatch.setattr(grad_cache_module.RandomState, "restore", lambda self: None)
    model = build(dropout=0.3, mlm_weight=0.0)
    torch.manual_seed(7)
    queue(model)
    run_grad_cache(model, inputs, 4)
    expected = gradients(reference_model)
    assert any(not torch.allclose(grad, expected[name], atol=1e-4) for name, grad in gradients(model).items())


SENTENCES = [
    "the cat sat on the mat",
    "a man is playing a guitar",
    "south australia has a unique position in history",
    "the river flows into the sea",
    "she wrote a book about the war",
    "many were attracted to the free state",
    "the team won the final match",
    "a woman is slicing an onion",
] * 3


def train(tokenizer, tmp_path, **extra_args) -> tuple[ContrastiveTrainer, list[dict]]:
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, contrastive_loss="info_nce"))
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-3,
        prebatch_size=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
        **extra_args,
    )
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", max_length=16, seed=0)
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict({"text": SENTENCES}), data_collator=collator
    )
    trainer.train()
    return trainer, [entry for entry in trainer.state.log_history if "loss" in entry]


def test_the_trainer_with_grad_cache_trains_the_weights_of_the_plain_trainer(tokenizer, tmp_path):
    plain, plain_logs = train(tokenizer, tmp_path / "plain")
    cached, cached_logs = train(tokenizer, tmp_path / "cached", grad_cache_chunk_size=3)
    pairs = zip(plain.model.named_parameters(), cached.model.named_parameters(), strict=True)
    for (name, expected), (_, got) in pairs:
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4, msg=name)
    assert len(plain_logs) == len(cached_logs) == 3
    for expected, got in zip(plain_logs, cached_logs, strict=True):
        for key in ("loss", "cl_loss", "mlm_loss", "negatives_per_query", "queue_fill"):
            assert got[key] == pytest.approx(expected[key], abs=2e-3), key
    queued, expected_queue = cached.loss_fn.prebatch.negatives(), plain.loss_fn.prebatch.negatives()
    torch.testing.assert_close(queued, expected_queue, atol=1e-5, rtol=0)


def test_the_cached_gradients_stay_in_float32_when_the_forward_computes_in_float16(monkeypatch):
    """Under --fp16 the chunks' embeddings come out in float16, and their gradients were cached in float16 too: each
    about 1 / (B * temperature) in size, under float16's smallest normal number (6.1e-5) for batches of a few
    thousand, and no loss scale reaches them (GradScaler scales the replay's loss). They are float32 now."""
    inputs = {key: value for key, value in batch().items() if not key.startswith("mlm")}
    model = build(dropout=0.0, mlm_weight=0.0)
    embed_views = model.embed_views
    monkeypatch.setattr(model, "embed_views", lambda *a, **views: embed_views(*a, **views).half())  # as fp16 gives
    cached = []
    forward = model.forward

    def spy(*args, cached_embedding_gradients=None, **kwargs):
        cached.append(cached_embedding_gradients)
        return forward(*args, cached_embedding_gradients=cached_embedding_gradients, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    run_grad_cache(model, inputs, chunk_size=4)

    with torch.no_grad():  # the reference: the float32 loss's gradient at the float16 embeddings, in float32
        embeddings = embed_views(inputs["input_ids"], inputs["attention_mask"]).half().float()
    embeddings.requires_grad_()
    loss, _ = model.compute_contrastive_loss(embeddings, inputs["sentence_ids"])
    (expected,) = torch.autograd.grad(loss, embeddings)
    assert [gradient.dtype for gradient in cached] == [torch.float32] * 3
    torch.testing.assert_close(torch.cat(cached), expected, atol=0, rtol=0)
