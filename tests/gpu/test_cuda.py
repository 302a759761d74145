"""On a CUDA device (marker ``gpu``, skipped without one; `make gpu-check` runs them on a GPU machine): what no CPU
test sees. Batches pinned by the Trainer's own DataLoader (every training step crashed there, issue 30), each packed
attention kernel against the padded pass in bf16, forward and backward, a bf16 step of every encoding path with MLM
and hard negatives, GradCache and the pre-batch queue, ``encode`` and the STS evaluation on the GPU against the CPU.

``CONTRASTIVE_HF_TEST_DEVICE=cpu`` runs them on the CPU instead (the CUDA-only parts, pinning and the varlen kernel,
are skipped): `make gpu-check`'s dry run in the suite checks the tests themselves that way.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from datasets import Dataset
from torch.utils.data._utils.pin_memory import pin_memory
from transformers import Qwen2Config

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark
from contrastive_hf.models import packing
from contrastive_hf.training.grad_cache import grad_cache_step
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, tiny_bert_config
from helpers.batches import BUILDERS, sentences
from helpers.builders import batch, build, gradients, queue_holding

DEVICE = torch.device(os.environ.get("CONTRASTIVE_HF_TEST_DEVICE", "cuda"))
ON_CUDA = DEVICE.type == "cuda"
needs_cuda = pytest.mark.skipif(not ON_CUDA, reason="CUDA only (this run is on the CPU)")


@pytest.fixture(autouse=True)
def _exact_float32():
    """float32 products in float32 (no TF32), so that float32 comparisons with the CPU mean what they say."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float().flatten(0, -2), b.float().flatten(0, -2), dim=-1)


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


@needs_cuda
@pytest.mark.parametrize("builder", BUILDERS, ids=lambda builder: builder.__name__)
def test_every_collators_batches_pin(tokenizer, builder):
    """What the DataLoader's pin-memory thread does with each batch (`pin_memory`), for every collator."""
    for name, collated in builder(tokenizer):
        pinned = pin_memory(collated)
        tensors = [value for value in _tensors(pinned)]
        assert tensors and all(tensor.is_pinned() for tensor in tensors), name


def _tensors(value):
    if torch.is_tensor(value):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _trainer(tokenizer, tmp_path, bf16: bool, **arguments) -> ContrastiveTrainer:
    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    model = ContrastiveForPreTraining(config)
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-4,
        report_to="none",
        save_strategy="no",
        bf16=bf16,
        use_cpu=not ON_CUDA,
        dataloader_num_workers=1,  # the pin-memory thread and a worker, as GPU runs have them
        **arguments,
    )
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=True, max_length=32, seed=0)
    dataset = Dataset.from_dict({"text": sentences(48)})
    return ContrastiveTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)


@pytest.mark.parametrize("bf16", [False, True])
def test_a_training_run_pins_its_batches_and_trains(tokenizer, tmp_path, bf16):
    """Every training run crashed at its first step on a GPU (a stride-0 tensor met pinned memory, issue 30)."""
    trainer = _trainer(tokenizer, tmp_path, bf16)
    assert trainer.args.dataloader_pin_memory is ON_CUDA
    if ON_CUDA:
        # accelerate's loader moves each batch to the GPU; the pin-memory thread works in the DataLoader it wraps
        loader = trainer.get_train_dataloader()
        pinned = next(iter(loader.base_dataloader))
        assert all(tensor.is_pinned() for tensor in _tensors(pinned))
        assert all(tensor.device.type == "cuda" for tensor in _tensors(next(iter(loader))))
    result = trainer.train()
    assert np.isfinite(result.training_loss)
    assert next(trainer.model.parameters()).device.type == DEVICE.type


KERNELS = ["grouped", "reference", pytest.param("varlen", marks=needs_cuda)]


def _views(vocab_size: int, size: int = 16, views: int = 2, width: int = 40):
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, width + 1, (size, views), generator=generator)
    lengths[0, 0] = width
    mask = (torch.arange(width) < lengths[..., None]).long()
    input_ids = torch.randint(5, vocab_size, (size, views, width), generator=generator) * mask
    return input_ids.to(DEVICE), mask.to(DEVICE)


def _embeddings_and_gradients(model, input_ids, mask, sub_batch_size, kernel=None, bf16=True):
    model.packed_attention_kernel = kernel
    model.zero_grad(set_to_none=True)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
        model.config.sub_batch_size = sub_batch_size  # the model's encoding policy follows its config
        embeddings = model.sentence_embeddings(input_ids, mask)
    weights = torch.linspace(-1, 1, embeddings.numel(), device=DEVICE).view_as(embeddings)
    (embeddings.float() * weights).sum().backward()
    return embeddings.detach().float(), {
        name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
    }


# An encoder, and a decoder (causal, grouped-query heads) pooled at its last token
PACKED_ENCODERS = {
    "bert": lambda: (tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), "mean"),
    "qwen2": lambda: (
        Qwen2Config(
            vocab_size=8192,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        ),
        "last_token",
    ),  # fmt: skip
}


@pytest.mark.parametrize("family", PACKED_ENCODERS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_each_packed_kernel_gives_the_padded_pass_in_bf16(kernel, family):
    """Packed attention (FlashAttention's varlen on CUDA, grouped SDPA, the block-diagonal reference) against the
    padded pass, both under bf16 autocast, no dropout, each against the float32 padded pass: embeddings within cosine
    0.999, and the packed gradients no further from float32's than the padded bf16 pass's own rounding leaves its
    gradients (twice that, at most); for an encoder and for a causal decoder."""
    torch.manual_seed(0)
    encoder, pooler_type = PACKED_ENCODERS[family]()
    config = ContrastiveConfig(encoder=encoder, pooler_type=pooler_type, projection_type="none")
    model = ContrastiveModel(config).to(DEVICE).train()
    input_ids, mask = _views(encoder.vocab_size)
    reference, reference_gradients = _embeddings_and_gradients(model, input_ids, mask, 0, bf16=False)
    flat = lambda gradients: torch.cat([gradients[key].flatten() for key in sorted(gradients)])  # noqa: E731
    errors = {}
    for sub_batch_size, name in ((0, None), ("packed", kernel)):
        embeddings, grads = _embeddings_and_gradients(model, input_ids, mask, sub_batch_size, name)
        assert _cosines(embeddings, reference).min() > 0.999, (sub_batch_size, name)
        assert grads.keys() == reference_gradients.keys()
        errors[sub_batch_size] = _relative_error(flat(grads), flat(reference_gradients))
    assert errors["packed"] <= 2 * errors[0], errors


@pytest.mark.parametrize("sub_batch_size", [0, "sorted", "packed"])
def test_a_bf16_step_of_every_path_with_mlm_and_hard_negatives(sub_batch_size):
    """ContrastiveForPreTraining's whole objective (MLM copy, InfoNCE with a hard-negative view, duplicates masked)
    under bf16 autocast: finite, float32 losses within 2% of the float32 step, finite gradients."""
    losses = {}
    for bf16 in (False, True):
        model = build(dropout=0.0).to(DEVICE)
        model.config.sub_batch_size = sub_batch_size
        inputs = {name: tensor.to(DEVICE) for name, tensor in batch().items()}
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
            output = model(**inputs)
        output.loss.backward()
        assert output.loss.dtype == torch.float32 and torch.isfinite(output.loss)
        assert all(torch.isfinite(gradient).all() for gradient in gradients(model).values())
        losses[bf16] = (output.cl_loss.item(), output.mlm_loss.item())
    np.testing.assert_allclose(losses[True], losses[False], rtol=0.02)


def test_grad_cache_and_the_queue_give_one_pass_gradients():
    """GradCache's chunked step (three chunks) with the pre-batch queue's keys: the loss and gradients of one pass
    over the whole batch, in float32 on the device."""
    generator = torch.Generator().manual_seed(2)
    keys = torch.randn(6, 32, generator=generator).to(DEVICE)
    ids = torch.tensor([100, 101, 3, 102, 103, 104], device=DEVICE)
    inputs = {name: tensor.to(DEVICE) for name, tensor in batch().items()}
    reference_model = build(dropout=0.0).to(DEVICE)
    queue_holding(reference_model, keys, ids)
    reference = reference_model(**inputs)
    reference.loss.backward()
    model = build(dropout=0.0).to(DEVICE)
    queue_holding(model, keys, ids)
    result = grad_cache_step(model, model, inputs, 4)
    torch.testing.assert_close(result.loss, reference.loss.detach(), atol=1e-4, rtol=1e-4)
    expected = gradients(reference_model)
    for name, gradient in gradients(model).items():
        torch.testing.assert_close(gradient, expected[name], atol=1e-4, rtol=1e-3, msg=name)


@pytest.fixture(scope="module")
def encoder_and_tokenizer():
    from transformers import AutoTokenizer

    from conftest import DEMO_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    torch.manual_seed(0)
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(hidden_size=64), pooler_type="mean")).eval()
    return model, tokenizer


def test_encode_on_the_device_gives_the_cpu_embeddings(encoder_and_tokenizer):
    model, tokenizer = encoder_and_tokenizer
    texts = sentences(64)
    on_cpu = model.to("cpu").encode(texts, tokenizer=tokenizer, bf16=False)
    on_device = model.encode(texts, tokenizer=tokenizer, bf16=False, device=DEVICE)
    np.testing.assert_allclose(on_device, on_cpu, atol=1e-4, rtol=1e-4)
    in_bf16 = model.encode(texts, tokenizer=tokenizer, bf16=True, device=DEVICE)
    assert _cosines(torch.from_numpy(in_bf16), torch.from_numpy(on_cpu)).min() > 0.999
    model.to("cpu")


def test_sts_evaluation_on_the_device_gives_the_cpu_figures(encoder_and_tokenizer):
    model, tokenizer = encoder_and_tokenizer
    stsb = read_stsbenchmark(str(DEMO_DATA / "sts-dev.csv"))
    on_cpu = evaluate_sts(model.to("cpu"), stsb, tokenizer=tokenizer)
    on_device = evaluate_sts(model.to(DEVICE), stsb, tokenizer=tokenizer)
    assert abs(on_device["spearman"] - on_cpu["spearman"]) < 0.05  # Spearman x 100, of float32 embeddings
    model.to("cpu")


@needs_cuda
def test_bf16_is_the_default_where_the_gpu_computes_it_natively(tmp_path):
    from contrastive_hf.models.precision import gpu_bf16_native

    arguments = ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert arguments.bf16 is gpu_bf16_native(DEVICE)
    assert "compute capability" in arguments.precision_reason
    assert packing.choose_attention_kernel(DEVICE, torch.bfloat16, 0.0) in packing.ATTENTION_KERNELS
