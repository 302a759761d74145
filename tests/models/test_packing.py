"""Packed (padding-free) encoding against the padded pass it replaces: models/packing.py.

Every check compares a packed computation with the same model's ordinary padded forward (transformers' sdpa and the
library's padded pooler), for each packable encoder type, pooler type and attention kernel. Embeddings are compared
in float32 (within 1e-5). Gradients are compared in float64: in float32 they differ by up to ~5e-5 in absolute
terms (their largest entries, sums over every token, are ~10-100), which is float32 rounding (the padded pass with
eager instead of sdpa attention differs from the padded sdpa pass by as much); in float64 the two computations agree
to ~1e-13, which shows they are the same function.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import (
    CamembertConfig,
    DistilBertConfig,
    ElectraConfig,
    ModernBertConfig,
    MPNetConfig,
    RobertaConfig,
    XLMRobertaConfig,
)

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models import packing
from contrastive_hf.models.configuration_contrastive import POOLER_TYPES
from contrastive_hf.models.packing import (
    PACKABLE_MODEL_TYPES,
    PACKED_ATTENTION,
    attention_groups,
    grouped_attention,
    length_sorted_groups,
    pack_sequences,
    reference_attention,
)

from conftest import tiny_bert_config
from helpers.builders import queue_holding

VOCAB = 100
WIDTH = 20
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
ROBERTA_STYLE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=WIDTH + 2,  # positions start after padding_idx = 1
    pad_token_id=1,
    **NO_DROPOUT,
)
# One tiny encoder config per packable model type: hidden 32, 2 layers (ModernBERT: 3, its third a global layer and
# the others local with a window of 8 < WIDTH, so that windows really cut sentences).
ENCODERS = {
    "bert": lambda: tiny_bert_config(vocab_size=VOCAB, type_vocab_size=2, **NO_DROPOUT),
    "roberta": lambda: RobertaConfig(**ROBERTA_STYLE),
    "xlm-roberta": lambda: XLMRobertaConfig(**ROBERTA_STYLE),
    "camembert": lambda: CamembertConfig(**ROBERTA_STYLE),
    "distilbert": lambda: DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=37, dropout=0.0, attention_dropout=0.0
    ),
    "electra": lambda: ElectraConfig(
        vocab_size=VOCAB,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
        **NO_DROPOUT,
    ),  # fmt: skip
    "modernbert": lambda: ModernBertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=3,
        num_attention_heads=2,
        local_attention=8,
        global_attn_every_n_layers=3,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
    ),  # fmt: skip
}
WITH_POOLER_LAYER = ("bert", "roberta", "xlm-roberta", "camembert")


def pooler_types(model_type: str) -> list[str]:
    return [name for name in POOLER_TYPES if name != "cls" or model_type in WITH_POOLER_LAYER]


CASES = [(model_type, pooler) for model_type in ENCODERS for pooler in pooler_types(model_type)]


def test_every_packable_model_type_is_tested():
    assert set(ENCODERS) == set(PACKABLE_MODEL_TYPES)


def mixed_views(encoder_config, size=6, views=2, seed=0):
    """``(size, views, WIDTH)`` right-padded views of lengths 1 to WIDTH (one of each extreme), padded with the
    model's pad id; with random token types where the model has two."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, WIDTH, (size, views), generator=generator)
    lengths[0, 0], lengths[1, 1] = WIDTH, 1
    mask = (torch.arange(WIDTH) < lengths[..., None]).long()
    pad = encoder_config.pad_token_id or 0
    input_ids = torch.randint(5, VOCAB, (size, views, WIDTH), generator=generator) * mask + pad * (1 - mask)
    token_type_ids = None
    if getattr(encoder_config, "type_vocab_size", 1) > 1:
        token_type_ids = torch.randint(0, 2, (size, views, WIDTH), generator=generator) * mask
    return input_ids, mask, token_type_ids


def make(model_type, pooler_type="mean", cls=ContrastiveModel, dtype=torch.float32, **overrides):
    torch.manual_seed(0)
    overrides = {"mlm_weight": 0.0, **overrides}
    config = ContrastiveConfig(encoder=ENCODERS[model_type](), pooler_type=pooler_type, **overrides)
    return cls(config).to(dtype)


def embeddings_of(model, *inputs, sub_batch_size):
    """``model.sentence_embeddings(*inputs)`` with the model's config set to encode by ``sub_batch_size`` (the
    model's encoding policy follows its config)."""
    model.config.sub_batch_size = sub_batch_size
    return model.sentence_embeddings(*inputs)


def embed_and_gradients(model, inputs, sub_batch_size, kernel=None):
    """View embeddings (projected) and every parameter's gradient of a fixed function of them."""
    model.packed_attention_kernel = kernel
    model.zero_grad(set_to_none=True)
    embeddings = embeddings_of(model, *inputs, sub_batch_size=sub_batch_size)
    weights = torch.linspace(-1, 1, embeddings.numel(), dtype=embeddings.dtype).view_as(embeddings)
    (embeddings * weights).sum().backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return embeddings.detach(), gradients


@pytest.mark.parametrize("kernel", ["reference", "grouped"])
@pytest.mark.parametrize(("model_type", "pooler_type"), CASES)
def test_packed_embeddings_and_gradients_equal_the_padded_pass(model_type, pooler_type, kernel):
    model = make(model_type, pooler_type)
    inputs = mixed_views(model.config.encoder)
    padded, _ = embed_and_gradients(model, inputs, 0)
    packed, _ = embed_and_gradients(model, inputs, "packed", kernel)
    assert packed.shape == padded.shape == (6, 2, 32)
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)

    model = model.double()
    padded, padded_gradients = embed_and_gradients(model, inputs, 0)
    packed, packed_gradients = embed_and_gradients(model, inputs, "packed", kernel)
    torch.testing.assert_close(packed, padded, atol=1e-12, rtol=0)
    assert packed_gradients.keys() == padded_gradients.keys()
    for name, gradient in padded_gradients.items():
        torch.testing.assert_close(packed_gradients[name], gradient, atol=1e-10, rtol=1e-10, msg=name)


def test_the_packed_encoder_runs_once_on_the_real_tokens(monkeypatch):
    model = make("bert")
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    calls = []
    forward = model.encoder.forward
    monkeypatch.setattr(model.encoder, "forward", lambda **kwargs: calls.append(kwargs) or forward(**kwargs))
    embeddings_of(model, input_ids, mask, token_type_ids, sub_batch_size="packed")
    (call,) = calls
    real = int(mask.sum())
    assert call["input_ids"].shape == call["position_ids"].shape == call["token_type_ids"].shape == (1, real)
    assert "attention_mask" not in call
    first = mask.reshape(-1, WIDTH)[0].sum()
    torch.testing.assert_close(call["position_ids"][0, :first], torch.arange(first))  # restart per sentence
    torch.testing.assert_close(call["position_ids"][0, first], torch.tensor(0))


def test_roberta_positions_keep_their_padding_offset():
    model = make("roberta")
    input_ids, mask, _ = mixed_views(model.config.encoder)
    input_ids, mask = input_ids.reshape(-1, WIDTH), mask.reshape(-1, WIDTH)
    packed = pack_sequences(input_ids, mask, position_ids=packing.padded_position_ids(model.encoder, input_ids))
    length = int(mask[0].sum())
    torch.testing.assert_close(packed.position_ids[0, :length], torch.arange(length) + 2)  # padding_idx + 1 + i


# ----------------------------------------------------------------------------------------------------
# The training objective: MLM copy, hard negatives, the pre-batch queue, duplicates
# ----------------------------------------------------------------------------------------------------


def loss_and_gradients(model, batch, sub_batch_size, kernel):
    model.config.sub_batch_size = sub_batch_size
    model.contrastive.packed_attention_kernel = kernel
    model.zero_grad(set_to_none=True)
    output = model(**batch)
    output.loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return output, gradients


def assert_same_objective(model, batch, kernel, queued=None):
    """The padded and the packed passes give the same losses and gradients (``queued``: ``(keys, ids)`` held by the
    loss's pre-batch queue before each pass)."""
    if queued is not None:
        queue_holding(model, *queued)
    padded, padded_gradients = loss_and_gradients(model, batch, 0, None)
    if queued is not None:
        queue_holding(model, *queued)
    packed, packed_gradients = loss_and_gradients(model, batch, "packed", kernel)
    for name in ("loss", "cl_loss", "mlm_loss", "negatives_per_query"):
        if getattr(padded, name) is not None:
            torch.testing.assert_close(getattr(packed, name), getattr(padded, name), atol=1e-12, rtol=0, msg=name)
    assert packed_gradients.keys() == padded_gradients.keys()
    for name, gradient in padded_gradients.items():
        torch.testing.assert_close(packed_gradients[name], gradient, atol=1e-10, rtol=1e-10, msg=name)


@pytest.mark.parametrize("kernel", ["reference", "grouped"])
def test_packed_mlm_copy_gives_the_padded_losses_and_gradients(kernel):
    model = make("bert", "cls", ContrastiveForPreTraining, torch.float64, mlm_weight=1.0)
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    mlm_ids, mlm_mask = input_ids[:, 0].clone(), mask[:, 0]
    labels = torch.full_like(mlm_ids, -100)
    chosen = (torch.rand(mlm_ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3) & mlm_mask.bool()
    chosen[0, 0] = True
    labels[chosen], mlm_ids[chosen] = mlm_ids[chosen], 4  # 4: the [MASK] id of this made-up vocabulary
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "token_type_ids": token_type_ids,
        "mlm_input_ids": mlm_ids,
        "mlm_attention_mask": mlm_mask,
        "mlm_labels": labels,
    }
    assert_same_objective(model, batch, kernel)


@pytest.mark.parametrize("kernel", ["reference", "grouped"])
def test_packed_hard_negatives_queue_and_duplicates_give_the_padded_loss(kernel):
    model = make(
        "roberta",
        "mean",
        ContrastiveForPreTraining,
        torch.float64,
        contrastive_loss="info_nce",
        hard_negative_weight=1,
    )
    input_ids, mask, _ = mixed_views(model.config.encoder, views=3)  # anchor, positive, hard negative
    sentence_ids = torch.arange(18).view(6, 3)
    sentence_ids[4, 1] = sentence_ids[2, 0]  # a sentence twice in the batch: never its own negative
    queue = torch.randn(5, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": input_ids, "attention_mask": mask, "sentence_ids": sentence_ids}
    queue_ids = torch.tensor([100, 101, int(sentence_ids[0, 0]), 103, 104])
    assert_same_objective(model, batch, kernel, queued=(queue, queue_ids))  # the pre-batch queue's keys


def test_packing_with_gradient_checkpointing_gives_the_padded_gradients():
    model = make("bert", "avg_first_last", ContrastiveForPreTraining, torch.float64)
    model.gradient_checkpointing_enable()
    model.train()
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    batch = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_type_ids}
    assert_same_objective(model, batch, "grouped")


def test_attention_dropout_is_applied_inside_packed_batches():
    encoder = tiny_bert_config(vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.5)
    model = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="mean")).train()
    input_ids, mask, _ = mixed_views(encoder)
    first = embeddings_of(model, input_ids, mask, sub_batch_size="packed")
    second = embeddings_of(model, input_ids, mask, sub_batch_size="packed")
    assert not torch.allclose(first, second)
    model.eval()
    torch.testing.assert_close(
        embeddings_of(model, input_ids, mask, sub_batch_size="packed"),
        embeddings_of(model, input_ids, mask, sub_batch_size=0),
        atol=1e-5,
        rtol=0,
    )


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------


def packed_qkv(lengths, heads=2, dim=8, dtype=torch.float64):
    width = max(lengths)
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    packed = pack_sequences(torch.ones_like(mask), mask)
    generator = torch.Generator().manual_seed(0)
    qkv = [torch.randn(1, heads, packed.num_tokens, dim, generator=generator, dtype=dtype) for _ in range(3)]
    return packed, qkv


def per_sentence_attention(packed, query, key, value, sliding_window=None):
    """The definition: softmax(q k^T / sqrt(d)) v over each sentence's own tokens, one sentence at a time."""
    outputs, start = [], 0
    for length in packed.lengths:
        q, k, v = (states[0, :, start : start + length] for states in (query, key, value))  # (H, l, D)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if sliding_window is not None:
            distance = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs()
            scores = scores.masked_fill(distance > sliding_window - 1, float("-inf"))
        outputs.append((scores.softmax(-1) @ v).transpose(0, 1))  # (l, H, D)
        start += length
    return torch.cat(outputs).unsqueeze(0)


@pytest.mark.parametrize("sliding_window", [None, 3])
@pytest.mark.parametrize("group_tokens", [1, 16, 10_000])
def test_kernels_attend_inside_each_sentence(sliding_window, group_tokens):
    packed, (query, key, value) = packed_qkv([5, 1, 9, 9, 3, 7, 2])
    expected = per_sentence_attention(packed, query, key, value, sliding_window)
    reference = reference_attention(query, key, value, packed, None, 0.0, sliding_window)
    groups = attention_groups(packed.lengths, group_tokens)
    grouped = grouped_attention(query, key, value, groups, None, 0.0, sliding_window)
    torch.testing.assert_close(reference, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(grouped, expected, atol=1e-12, rtol=0)


def test_groups_follow_the_token_budget():
    lengths = [9, 9, 7, 5, 3, 2, 1]
    assert length_sorted_groups(lengths, group_tokens=18) == [(0, 2), (2, 4), (4, 7)]
    assert length_sorted_groups(lengths, group_tokens=4) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 7)]
    assert length_sorted_groups(lengths, group_size=3) == [(0, 3), (3, 6), (6, 7)]
    packed, _ = packed_qkv([5, 1, 9, 9, 3, 7, 2])
    groups = attention_groups(packed.lengths, 18)
    assert [tuple(index.shape) for index in groups.gather] == [(2, 9), (2, 7), (3, 3)]
    assert sorted(groups.inverse.tolist()) == list(range(packed.num_tokens))


def fake_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
    """torch's varlen_attn contract (torch 2.11 signature), computed per sentence in float32 on any device."""
    assert query.dim() == 3 and query.is_contiguous() and query.dtype == torch.bfloat16
    assert cu_seq_q.dtype == torch.int32 and cu_seq_k is cu_seq_q and isinstance(max_q, int) and max_q == max_k
    lengths = (cu_seq_q[1:] - cu_seq_q[:-1]).tolist()
    assert max(lengths) == max_q
    packed = pack_sequences(torch.ones(len(lengths), max_q, dtype=torch.long), torch.tensor(
        [[1] * length + [0] * (max_q - length) for length in lengths]
    ))  # fmt: skip
    heads_first = [states.float().transpose(0, 1).unsqueeze(0) for states in (query, key, value)]  # (1, H, T, D)
    window = None if window_size == (-1, -1) else window_size[0] + 1
    return per_sentence_attention(packed, *heads_first, sliding_window=window)[0].to(query.dtype)


@pytest.mark.parametrize("sliding_window", [None, 3])
def test_varlen_kernel_passes_torch_what_it_takes(monkeypatch, sliding_window):
    """No GPU here: the call into torch's varlen_attn (layout, dtypes, boundaries, window), with a stand-in kernel
    that checks its inputs. benchmarks/bench_gpu.py checks the real kernel on a GPU against the padded pass."""
    import torch.nn.attention.varlen

    monkeypatch.setattr(torch.nn.attention.varlen, "varlen_attn", fake_varlen_attn)
    monkeypatch.setattr(packing, "_varlen_parameters", lambda: frozenset({"scale", "window_size", "return_aux"}))
    packed, qkv = packed_qkv([5, 1, 9, 9, 3], dtype=torch.bfloat16)
    got = packing.varlen_attention(*qkv, packed, None, sliding_window)
    expected = per_sentence_attention(packed, *(states.float() for states in qkv), sliding_window)
    torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=0)


def test_the_kernel_follows_device_dtype_and_dropout():
    cuda = torch.device("cuda")
    assert packing.choose_attention_kernel(torch.device("cpu"), torch.bfloat16, 0.0) == "grouped"
    assert packing.choose_attention_kernel(cuda, torch.float32, 0.0) == "grouped"
    assert packing.choose_attention_kernel(cuda, torch.bfloat16, 0.1) == "grouped"  # varlen_attn has no dropout
    assert packing.choose_attention_kernel(cuda, torch.bfloat16, 0.0) == "varlen"
    query = torch.zeros(1, 2, 4, 8)
    assert "CUDA only" in packing.varlen_problem(query, 0.0, None, None, 4)
    packed, qkv = packed_qkv([2, 2], dtype=torch.float32)
    packed.kernel = "varlen"  # forced where it cannot run: an error, not a silent fallback
    with pytest.raises(ValueError, match="varlen attention kernel cannot run here"):
        packed.attend(*qkv, None, 0.0)


# ----------------------------------------------------------------------------------------------------
# Which path runs, and why
# ----------------------------------------------------------------------------------------------------


def test_auto_packs_supported_encoders_and_logs_the_choice_once(caplog):
    model = make("bert")
    input_ids, mask, _ = mixed_views(model.config.encoder)
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.encoding_policy"):
        for _ in range(2):
            embeddings_of(model, input_ids, mask, sub_batch_size="auto")
    messages = [record.getMessage() for record in caplog.records if "encodes" in record.getMessage()]
    assert len(messages) == 1 and "packed batches" in messages[0] and "'auto'" in messages[0]
    assert model.encoder.config._attn_implementation == PACKED_ATTENTION


def test_unsupported_encoders_fall_back_and_say_why(caplog):
    encoder = MPNetConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37
    )
    model = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="mean"))
    input_ids, mask, _ = mixed_views(encoder)
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.encoding_policy"):
        model.config.sub_batch_size = "auto"
        assert model.encoding_path(torch.device("cpu")) == "sorted"
        assert model.encoding_path(torch.device("cuda")) == "padded"
    text = caplog.text
    assert "length-sorted groups" in text and "one padded pass" in text and "'mpnet'" in text
    with pytest.raises(ValueError, match="sub_batch_size='packed' cannot run: .*'mpnet'"):
        embeddings_of(model, input_ids, mask, sub_batch_size="packed")

    bert = make("bert")
    bert.encoder.set_attn_implementation("eager")  # the user's choice is kept: no packing
    bert.config.sub_batch_size = "auto"
    assert bert.encoding_path(torch.device("cpu")) == "sorted"
    assert bert.encoder.config._attn_implementation == "eager"


def test_padded_calls_through_the_packed_implementation_keep_their_mask():
    model = make("bert").eval()
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    flat = [tensor.reshape(-1, WIDTH) for tensor in (input_ids, mask, token_type_ids)]
    before = model.encoder(input_ids=flat[0], attention_mask=flat[1], token_type_ids=flat[2]).last_hidden_state
    embeddings_of(model, input_ids, mask, token_type_ids, sub_batch_size="packed")
    assert model.encoder.config._attn_implementation == PACKED_ATTENTION
    after = model.encoder(input_ids=flat[0], attention_mask=flat[1], token_type_ids=flat[2]).last_hidden_state
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    assert PACKED_ATTENTION not in json.dumps(model.config.to_dict())  # never saved into a checkpoint


def test_a_checkpoint_saved_after_packed_training_names_no_packed_attention(tmp_path):
    model = make("bert", "cls", ContrastiveForPreTraining)
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    model(input_ids=input_ids, attention_mask=mask, token_type_ids=token_type_ids, return_loss=False)
    assert model.contrastive.encoder.config._attn_implementation == PACKED_ATTENTION
    model.save_pretrained(tmp_path)
    saved = [path for path in tmp_path.rglob("*.json")]
    assert saved and not any(PACKED_ATTENTION in path.read_text() for path in saved)
    reloaded = ContrastiveModel.from_pretrained(tmp_path).eval()
    assert reloaded.encoder.config._attn_implementation == "sdpa"
    torch.testing.assert_close(
        reloaded.sentence_embeddings(input_ids, mask, token_type_ids),
        model.eval().contrastive.sentence_embeddings(input_ids, mask, token_type_ids),
    )


def test_inputs_that_cannot_be_packed_take_the_padded_pass():
    model = make("bert").eval()
    input_ids, mask, _ = mixed_views(model.config.encoder)
    left_ids, left_mask = input_ids.flip(-1), mask.flip(-1)
    torch.testing.assert_close(
        embeddings_of(model, left_ids, left_mask, sub_batch_size="packed"),
        embeddings_of(model, left_ids, left_mask, sub_batch_size=0),
    )
    with pytest.raises(ValueError, match="right-padded"):
        pack_sequences(left_ids.reshape(-1, WIDTH), left_mask.reshape(-1, WIDTH))
    empty = mask.reshape(-1, WIDTH).clone()
    empty[3] = 0
    with pytest.raises(ValueError, match="at least one token per row"):
        pack_sequences(input_ids.reshape(-1, WIDTH), empty)


def test_packed_pooling_reads_sentence_boundaries():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    packed = pack_sequences(torch.ones_like(mask), mask)
    states = torch.tensor([[1.0], [5.0], [3.0], [7.0], [2.0], [-4.0], [0.0], [9.0]])  # (T = 8, 1)
    torch.testing.assert_close(packed.first_tokens(states), torch.tensor([[1.0], [7.0], [2.0]]))
    torch.testing.assert_close(packed.segment_mean(states), torch.tensor([[3.0], [7.0], [7 / 4]]))
    torch.testing.assert_close(packed.segment_max(states), torch.tensor([[5.0], [7.0], [9.0]]))
    padded = torch.zeros(3, 4, 1).reshape(12, 1).index_copy(0, packed.flat_index, states).view(3, 4, 1)
    torch.testing.assert_close(packed.segment_max(states), padded.masked_fill(~mask.bool()[..., None], -99).amax(1))

    # a prompt left out of the pooling: sentence 0 pools from its third token, sentence 2 from its second
    without = packed.without_leading_tokens(torch.tensor([2, 0, 1]))
    torch.testing.assert_close(without.first_tokens(states), torch.tensor([[3.0], [7.0], [-4.0]]))
    torch.testing.assert_close(without.segment_mean(states), torch.tensor([[3.0], [7.0], [5 / 3]]))
    torch.testing.assert_close(without.segment_max(states), torch.tensor([[3.0], [7.0], [9.0]]))
    with pytest.raises(ValueError, match="2 leading-token counts for 3 packed sentences"):
        packed.without_leading_tokens(torch.tensor([1, 1]))


def test_packed_mean_pooling_of_bf16_states_sums_and_counts_in_float32():
    """bf16 token states (a bf16 step) pooled by their mean: the sums and the counts in float32, the result rounded
    to bf16 once. Summed in bf16 (as `index_add` does in its output's dtype), sentences of hundreds of tokens were
    off by about 2%, and a count above 256 is not a bf16 number (257 rounds to 256)."""
    lengths = [300, 257, 5, 1]
    mask = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()
    packed = pack_sequences(torch.ones_like(mask), mask)
    generator = torch.Generator().manual_seed(0)
    states = (1.0 + 0.1 * torch.randn(packed.num_tokens, 16, generator=generator, dtype=torch.float64)).bfloat16()
    expected = torch.stack([part.mean(0) for part in states.double().split(lengths)])  # float64, from the formula
    pooled = packed.segment_mean(states)
    assert pooled.dtype == torch.bfloat16
    # one rounding to bf16 (8 bits of mantissa): within 2^-8 of the exact mean, relatively
    torch.testing.assert_close(pooled.double(), expected, rtol=2**-8, atol=0)
    constant = torch.full((packed.num_tokens, 1), 3.0, dtype=torch.bfloat16)
    assert packed.segment_mean(constant).flatten().tolist() == [3.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("sliding_window", [2, 3])
def test_every_query_of_a_sliding_window_group_keeps_a_key(sliding_window):
    """A padding slot of a short sentence in a group of long ones lies more than the window past the sentence's
    last real token: under the band and the padding mask its query had no key at all, a row that some CUDA kernels
    fill with NaN (its backward then spreads NaN into the gradients, though the row's output is dropped)."""
    packed, (query, key, value) = packed_qkv([9, 2, 1, 8])
    groups = attention_groups(packed.lengths, 10_000)  # one group, 9 slots wide
    (valid,) = groups.valid
    mask = packing.group_attention_mask(valid, groups.gather[0].shape[1], sliding_window)  # (G, 1, w, w)
    assert mask.expand(len(packed.lengths), 1, 9, 9).any(dim=-1).all()  # every query row keeps a key
    real = valid[:, None, :, None] & valid[:, None, None, :]
    positions = torch.arange(9)
    band = (positions[:, None] - positions[None, :]).abs() <= sliding_window - 1
    assert torch.equal(mask & real, band & real)  # real tokens: exactly the band inside their sentence
    expected = per_sentence_attention(packed, query, key, value, sliding_window)
    torch.testing.assert_close(grouped_attention(query, key, value, groups, None, 0.0, sliding_window), expected)


def test_packed_training_step_under_bf16_autocast_keeps_the_loss_in_float32():
    model = make("bert", "mean", ContrastiveForPreTraining, contrastive_loss="info_nce").eval()
    input_ids, mask, token_type_ids = mixed_views(model.config.encoder)
    batch = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_type_ids}
    outputs = {}
    for sub_batch_size in (0, "packed"):
        model.config.sub_batch_size = sub_batch_size
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs[sub_batch_size] = model(**batch)
    assert outputs["packed"].loss.dtype == torch.float32
    torch.testing.assert_close(outputs["packed"].embeddings, outputs[0].embeddings, atol=5e-2, rtol=0)
    torch.testing.assert_close(outputs["packed"].loss, outputs[0].loss, atol=5e-2, rtol=0)
    outputs["packed"].loss.backward()


def test_named_paths_survive_saving_the_config():
    config = ContrastiveConfig(sub_batch_size="packed", sub_batch_tokens=256)
    restored = ContrastiveConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert (restored.sub_batch_size, restored.sub_batch_tokens) == ("packed", 256)
