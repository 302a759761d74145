"""GradCache when the processes hold different numbers of sentences (the last batch of an epoch with accelerate's
``even_batches`` off, uneven streamed shards): every process takes the same path and runs the same number of chunks,
so that the chunks' collectives (DDP's all-reduce, ZeRO-2's reductions, ZeRO-3's parameter gathers) line up, and the
loss and gradients are still those of the unchunked step.

The unit tests replace the exchange of batch sizes (one process stands for one rank of two); the integration test
trains on 2 gloo processes under DDP and ZeRO-1, 2 and 3, where a process whose batch fits in one chunk used to wait
forever for the others.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import contrastive_hf.training.grad_cache as grad_cache_module
import contrastive_hf.training.trainer as trainer_module
from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.training.grad_cache import ChunkBackward, chunk_count, grad_cache_step
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import tiny_bert_config
from helpers.builders import batch, build, gradients


class RecordingBackward(ChunkBackward):
    """One process's `ChunkBackward`, recording each chunk's backward: (last, inside `accumulating`)."""

    def __init__(self):
        self.calls = []
        self._accumulating = False

    @contextlib.contextmanager
    def accumulating(self):
        self._accumulating = True
        try:
            yield
        finally:
            self._accumulating = False

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.calls.append((last, self._accumulating))
        loss.backward()


def count_passes(model) -> dict[str, int]:
    """Count the model's passes from now on: ``embed`` the step-1 ones (``embed_views`` called outside ``forward``),
    ``replay`` the step-3 ones (``forward``)."""
    counts = {"embed": 0, "replay": 0}
    embed_views, forward = model.embed_views, model.forward

    def counted_embed_views(*args, **kwargs):
        counts["embed"] += 1
        return embed_views(*args, **kwargs)

    def counted_forward(*args, **kwargs):
        counts["replay"] += 1
        counts["embed"] -= 1  # the replay embeds its views too
        return forward(*args, **kwargs)

    model.embed_views, model.forward = counted_embed_views, counted_forward
    return counts


def exchanged_sizes(monkeypatch, module, other_size: int) -> None:
    """Replace ``module``'s exchange of batch sizes: this process is rank 0, and rank 1 holds ``other_size``."""
    monkeypatch.setattr(module, "gather_sizes", lambda size, device: [size, other_size])


def assert_same_gradients(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Equal within float32 rounding: 1e-5 of the largest gradient (up to ~100 here, where a bias sums many rows'
    gradients that cancel), or 1e-4 relative."""
    assert got.keys() == expected.keys()
    atol = 1e-5 * max(grad.abs().max().item() for grad in expected.values())
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, atol=atol, rtol=1e-4, msg=name)


# (this process's sentences, the other process's, chunk size): more sentences elsewhere; a batch smaller than one
# chunk; and the process with the larger batch, which pads nothing
CASES = [(3, 7, 2), (1, 5, 2), (7, 3, 2)]


@pytest.mark.parametrize(("local", "other", "chunk_size"), CASES)
def test_every_process_runs_the_chunks_of_the_largest_batch_and_padding_adds_nothing(
    monkeypatch, local, other, chunk_size
):
    """Dropout off, MLM, hard negatives and duplicates: the loss and gradients of one plain pass over this process's
    sentences, whatever the other process holds; as many passes in step 1 and replays in step 3 as the largest batch
    needs chunks, every one but the last accumulating."""
    inputs = {name: value[:local] for name, value in batch().items()}
    reference_model = build(dropout=0.0)
    reference = reference_model(**inputs)
    reference.loss.backward()

    exchanged_sizes(monkeypatch, grad_cache_module, other)
    model = build(dropout=0.0)
    counts = count_passes(model)
    backward = RecordingBackward()
    result = grad_cache_step(model, model, inputs, chunk_size, backward=backward)

    chunks = chunk_count([local, other], chunk_size)
    assert chunks == -(-max(local, other) // chunk_size)
    assert counts == {"embed": chunks, "replay": chunks}
    assert backward.calls == [(False, True)] * (chunks - 1) + [(True, False)]
    torch.testing.assert_close(result.loss, reference.loss.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.mlm_loss, reference.mlm_loss.detach(), atol=1e-5, rtol=1e-5)
    assert result.embeddings.shape[0] == local
    got = gradients(model)
    assert any(name.startswith("mlm_head") for name in got)
    assert_same_gradients(got, gradients(reference_model))


def test_with_dropout_the_padding_replays_leave_the_gradients_unchanged(monkeypatch):
    """Dropout on: the padding passes come after the chunks' recorded random states and add exact zeros, so the
    gradients are those of the same step without another process."""
    inputs = {name: value[:3] for name, value in batch().items()}
    alone = build(dropout=0.3)
    torch.manual_seed(7)
    alone_result = grad_cache_step(alone, alone, inputs, 2)

    exchanged_sizes(monkeypatch, grad_cache_module, 8)
    padded = build(dropout=0.3)
    counts = count_passes(padded)
    torch.manual_seed(7)
    padded_result = grad_cache_step(padded, padded, inputs, 2)
    assert counts == {"embed": 4, "replay": 4}  # 2 chunks of its own, 2 of padding
    assert torch.equal(padded_result.loss, alone_result.loss)
    expected = gradients(alone)
    for name, grad in gradients(padded).items():
        assert torch.equal(grad, expected[name]), name


def test_a_process_without_sentences_is_refused_on_every_process():
    """No data path gives a process an empty batch (accelerate's shards and ours hold at least one sentence each);
    were one to, every process would raise at once rather than the others wait for its chunks."""
    inputs = {name: value[:4] for name, value in batch().items()}
    model = build(dropout=0.0)
    with pytest.raises(ValueError, match=r"per-process batch sizes \[4, 0\].*every process needs at least one"):
        grad_cache_step(model, model, inputs, 2, batch_sizes=[4, 0])


def test_the_trainer_chunks_a_batch_of_one_chunk_when_another_process_holds_more(monkeypatch, tmp_path):
    """A process whose last batch fits in one chunk takes the GradCache step with the others (it took the plain step
    and waited forever for them), padding to their number of chunks: its gradients stay those of the plain step."""
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=60, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, contrastive_loss="info_nce", mlm_weight=0.0))
    inputs = {name: value[:2] for name, value in batch().items() if not name.startswith("mlm")}
    model(**inputs).loss.backward()
    expected = gradients(model)
    model.zero_grad()

    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), grad_cache_chunk_size=2, report_to="none", use_cpu=True, disable_tqdm=True
    )
    trainer = ContrastiveTrainer(model=model, args=args)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    exchanged_sizes(monkeypatch, trainer_module, 5)
    steps = []
    monkeypatch.setattr(
        trainer_module,
        "grad_cache_step",
        lambda *args, **kwargs: steps.append(kwargs["batch_sizes"]) or grad_cache_step(*args, **kwargs),
    )
    counts = count_passes(model)
    trainer.training_step(model, dict(inputs))
    assert steps == [[2, 5]] and counts == {"embed": 3, "replay": 3}
    assert_same_gradients(gradients(model), expected)


# 17 sentences in batches of 5 per process with even_batches off: steps of 5 + 5, then 5 + 2 sentences. In chunks of
# 3, process 0 runs 2 chunks at both steps, process 1 two chunks then one batch smaller than a chunk. Plain SGD without
# clipping, so that the weights after the epoch are w0 - lr * (g1 + g2): equal weights are equal gradients.
