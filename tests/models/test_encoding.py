"""One encoding policy for every model family (models/encoding_policy.py::EncodingPolicy), built once per model.

The dual encoder (shared encoder and two towers, with hard negatives, with prompts left out of the pooling) and
`ContrastiveForPreTraining`'s views with prompts are encoded packed, in length-sorted groups or in one padded pass
as the config's ``sub_batch_size`` says; every path is checked against one padded pass (``sub_batch_size=0``): the
embeddings, the loss and every parameter's gradient, in float64 (where the paths agree to ~1e-13;
tests/models/test_packing.py says why float32 is not the place for gradients), and each check also asserts that the
path really ran (the shapes the encoders were called with), so that a fallback to the padded pass cannot pass for
parity."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.models.configuration_contrastive import POOLER_TYPES
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.encoding_policy import EncodingPolicy
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.models.packing import PACKED_ATTENTION

from conftest import DEMO_TOKENIZER, tiny_bert_config

VOCAB = 100
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
PATHS = ["packed", "sorted", 3]  # sub_batch_size values against 0 ("sorted" with a budget that makes groups)


def right_padded(shape, width, low, generator):
    """``shape + (width,)`` token ids, attention mask and token types of random lengths in [low, width] (one row of
    each extreme length)."""
    lengths = torch.randint(low, width + 1, shape, generator=generator)
    lengths.view(-1)[0], lengths.view(-1)[-1] = width, low
    mask = (torch.arange(width) < lengths[..., None]).long()
    input_ids = torch.randint(5, VOCAB, (*shape, width), generator=generator) * mask
    token_type_ids = torch.randint(0, 2, (*shape, width), generator=generator) * mask
    return input_ids, mask, token_type_ids


def dpr_batch(size=5, passages=2, prompts=False, seed=0) -> dict:
    """Queries ``(B, 7)``, each with a positive and a hard negative ``(B, P, 11)``, right-padded to different
    lengths; with ``prompts``, each text's prompt length (1 to 3 tokens, fewer than the text has)."""
    generator = torch.Generator().manual_seed(seed)
    query_ids, query_mask, query_types = right_padded((size,), 7, 4, generator)
    passage_ids, passage_mask, passage_types = right_padded((size, passages), 11, 4, generator)
    batch = {
        "query_input_ids": query_ids,
        "query_attention_mask": query_mask,
        "query_token_type_ids": query_types,
        "passage_input_ids": passage_ids,
        "passage_attention_mask": passage_mask,
        "passage_token_type_ids": passage_types,
    }
    if prompts:
        batch["prompt_lengths"] = torch.randint(1, 4, (size, 1 + passages), generator=generator)
    return batch


def make_dual_encoder(share_encoders: bool, pooler_type: str = "mean", **overrides) -> DualEncoderModel:
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=VOCAB, type_vocab_size=2, **NO_DROPOUT)
    config = DualEncoderConfig(
        query_encoder=encoder, share_encoders=share_encoders, pooler_type=pooler_type, sub_batch_tokens=24, **overrides
    )
    return DualEncoderModel(config).double()


def record_encoder_calls(monkeypatch, *encoders) -> list[tuple[int, tuple]]:
    """Each call of ``encoders`` from now on: (which encoder, the shape of its input_ids)."""
    calls = []
    for index, encoder in enumerate(encoders):
        forward = encoder.forward

        def recorded(*args, index=index, forward=forward, **kwargs):
            calls.append((index, tuple(kwargs["input_ids"].shape)))
            return forward(*args, **kwargs)

        monkeypatch.setattr(encoder, "forward", recorded)
    return calls


def loss_embeddings_and_gradients(model, batch: dict, sub_batch_size) -> tuple:
    model.config.sub_batch_size = sub_batch_size
    model.zero_grad(set_to_none=True)
    output = model(**batch)
    output.loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return output.loss.detach(), output.embeddings.detach(), gradients


def assert_same_as_padded(model, batch: dict, sub_batch_size) -> None:
    padded_loss, padded, padded_gradients = loss_embeddings_and_gradients(model, batch, 0)
    loss, embeddings, gradients = loss_embeddings_and_gradients(model, batch, sub_batch_size)
    torch.testing.assert_close(embeddings, padded, atol=1e-12, rtol=0)
    torch.testing.assert_close(loss, padded_loss, atol=1e-12, rtol=0)
    assert gradients.keys() == padded_gradients.keys()
    for name, gradient in padded_gradients.items():
        torch.testing.assert_close(gradients[name], gradient, atol=1e-10, rtol=1e-10, msg=name)


def real_tokens(batch: dict, side: str) -> int:
    return int(batch[f"{side}_attention_mask"].sum())


# ----------------------------------------------------------------------------------------------------------------
# The dual encoder: every path against one padded pass
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompts", [False, True], ids=["no prompt", "prompts left out"])
@pytest.mark.parametrize("sub_batch_size", PATHS)
@pytest.mark.parametrize("pooler_type", POOLER_TYPES)
@pytest.mark.parametrize("share_encoders", [False, True], ids=["two towers", "shared"])
def test_dual_encoder_paths_give_the_padded_loss_embeddings_and_gradients(
    share_encoders, pooler_type, sub_batch_size, prompts
):
    model = make_dual_encoder(share_encoders, pooler_type, include_prompt=not prompts, projection_dim=16)
    batch = dpr_batch(prompts=prompts)
    assert_same_as_padded(model, batch, sub_batch_size)


@pytest.mark.parametrize("prompts", [False, True], ids=["no prompt", "prompts left out"])
@pytest.mark.parametrize("share_encoders", [False, True], ids=["two towers", "shared"])
def test_each_side_is_packed_into_one_pass_over_its_real_tokens(monkeypatch, share_encoders, prompts):
    model = make_dual_encoder(share_encoders, "cls", include_prompt=not prompts)
    assert model.config.sub_batch_size == "auto"  # the default packs this BERT encoder
    batch = dpr_batch(prompts=prompts)
    encoders = [model.query_encoder] + ([] if share_encoders else [model.passage_encoder])
    calls = record_encoder_calls(monkeypatch, *encoders)
    model(**batch).loss.backward()
    passage_encoder = 0 if share_encoders else 1
    assert calls == [(0, (1, real_tokens(batch, "query"))), (passage_encoder, (1, real_tokens(batch, "passage")))]
    assert all(encoder.config._attn_implementation == PACKED_ATTENTION for encoder in encoders)


def test_each_side_is_encoded_in_its_own_length_sorted_groups(monkeypatch):
    model = make_dual_encoder(False, sub_batch_size=4)
    batch = dpr_batch()
    calls = record_encoder_calls(monkeypatch, model.query_encoder, model.passage_encoder)
    model(**batch)
    query_lengths = sorted(batch["query_attention_mask"].sum(-1).tolist(), reverse=True)
    passage_lengths = sorted(batch["passage_attention_mask"].sum(-1).flatten().tolist(), reverse=True)
    assert calls == [
        (0, (4, query_lengths[0])),
        (0, (1, query_lengths[4])),
        (1, (4, passage_lengths[0])),
        (1, (4, passage_lengths[4])),
        (1, (2, passage_lengths[8])),
    ]


def test_a_text_that_is_all_prompt_takes_the_padded_pass(monkeypatch):
    """Packing pools real tokens only; the padded pass pools a text without any token after its prompt in its own
    way (a zero mean, the first position for cls), which the policy keeps by not packing such a batch."""
    model = make_dual_encoder(True, "mean", include_prompt=False)
    batch = dpr_batch(prompts=True)
    batch["prompt_lengths"][2, 0] = batch["query_attention_mask"][2].sum()  # query 2 is its prompt alone
    assert_same_as_padded(model, batch, "packed")
    calls = record_encoder_calls(monkeypatch, model.query_encoder)
    model(**batch)
    assert [shape for _, shape in calls] == [(5, 7), (1, real_tokens(batch, "passage"))]


def test_grad_cache_chunks_of_a_packed_dual_encoder_give_the_full_batch_gradients():
    """`embed_views` on chunks + the loss on their concatenation + the cached-gradient forward per chunk: GradCache's
    contract, through the packed path (dropout off)."""
    model = make_dual_encoder(False, "cls_before_pooler", include_prompt=False, sub_batch_size="packed")
    batch = dpr_batch(size=6, prompts=True)
    _, _, full_gradients = loss_embeddings_and_gradients(model, batch, "packed")
    model.zero_grad(set_to_none=True)
    chunks = [{name: value[start : start + 4] for name, value in batch.items()} for start in (0, 4)]
    with torch.no_grad():
        embeddings = torch.cat([model.embed_views(**chunk) for chunk in chunks]).requires_grad_()
    loss, _ = model.compute_contrastive_loss(embeddings)
    loss.backward()
    for chunk, cached in zip(chunks, embeddings.grad.split(4), strict=True):
        model(**chunk, cached_embedding_gradients=cached).loss.backward()
    for name, gradient in full_gradients.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, gradient, atol=1e-10, rtol=1e-10)


# ----------------------------------------------------------------------------------------------------------------
# ContrastiveForPreTraining: views with prompts go through the policy too
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub_batch_size", [*PATHS, "auto"])
@pytest.mark.parametrize("pooler_type", ["cls", "cls_before_pooler", "mean", "max"])
def test_views_with_prompts_take_every_path_with_the_padded_loss(monkeypatch, pooler_type, sub_batch_size):
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=VOCAB, type_vocab_size=2, **NO_DROPOUT)
    config = ContrastiveConfig(
        encoder=encoder,
        pooler_type=pooler_type,
        mlm_weight=0.0,
        contrastive_loss="info_nce",
        include_prompt=False,
        sub_batch_tokens=24,
    )
    model = ContrastiveForPreTraining(config).double()
    generator = torch.Generator().manual_seed(1)
    input_ids, mask, token_type_ids = right_padded((5, 3), 11, 4, generator)  # anchor, positive, hard negative
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "token_type_ids": token_type_ids,
        "prompt_lengths": torch.randint(1, 4, (5, 3), generator=generator),
    }
    assert_same_as_padded(model, batch, sub_batch_size)
    calls = record_encoder_calls(monkeypatch, model.contrastive.encoder)
    model(**batch)
    if sub_batch_size in ("packed", "auto"):
        assert calls == [(0, (1, int(mask.sum())))]
    else:
        assert len(calls) > 1 and all(rows < 15 for _, (rows, _) in calls)


# ----------------------------------------------------------------------------------------------------------------
# The policy and the configs that hold it
# ----------------------------------------------------------------------------------------------------------------


def test_the_policy_parses_the_config_fields_once_with_the_configs_messages():
    assert EncodingPolicy("8").sub_batch_size == 8
    config = DualEncoderConfig(query_encoder=tiny_bert_config(), sub_batch_size="sorted", sub_batch_tokens=256)
    assert EncodingPolicy.from_config(config, "reference") == EncodingPolicy("sorted", 256, "reference")
    for make in (EncodingPolicy, lambda value: DualEncoderConfig(sub_batch_size=value)):
        with pytest.raises(ValueError, match="sub_batch_size must be one of 'auto', 'packed', 'sorted' or an integer"):
            make("fast")
    with pytest.raises(ValueError, match="sub_batch_tokens must be a positive number of tokens, got 0"):
        DualEncoderConfig(sub_batch_tokens=0)
    model = make_dual_encoder(True)
    model.config.sub_batch_size = "fastest"  # set after the config was checked: refused where the policy is built
    with pytest.raises(ValueError, match="got 'fastest'"):
        model(**dpr_batch())


def test_a_model_builds_its_policy_once_and_again_only_when_its_config_changes(monkeypatch):
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(), sub_batch_size="auto"))
    built = []
    original = EncodingPolicy.__post_init__
    monkeypatch.setattr(EncodingPolicy, "__post_init__", lambda policy: built.append(policy) or original(policy))
    first = model.encoding_policy()
    assert model.encoding_policy() is first and model.contrastive.encoding_policy() is not None
    model.config.sub_batch_size = "4"  # edited after loading: parsed when the policy is rebuilt
    assert model.encoding_policy().sub_batch_size == 4 and model.encoding_policy() is model.encoding_policy()
    model.packed_attention_kernel = "reference"
    assert model.encoding_policy().packed_attention_kernel == "reference"
    assert len(built) == 4  # the three policies of the model, and the one of its ContrastiveModel


def test_the_config_says_how_sentence_embeddings_encode():
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(), sub_batch_size="auto")).eval()
    input_ids, mask, _ = right_padded((4,), 9, 3, torch.Generator().manual_seed(0))
    sentence_model = model.contrastive
    assert sentence_model.encoding_path(torch.device("cpu")) == "packed"  # the config's "auto"
    packed = sentence_model.sentence_embeddings(input_ids, mask)
    model.config.sub_batch_size = 0  # the way to ask for one padded pass
    assert sentence_model.encoding_path(torch.device("cpu")) == "padded"
    torch.testing.assert_close(sentence_model.sentence_embeddings(input_ids, mask), packed, atol=1e-5, rtol=0)


def test_the_dual_encoder_saves_its_encoding_and_old_checkpoints_get_the_default(tmp_path):
    model = make_dual_encoder(False, sub_batch_size="packed")
    model.config.sub_batch_tokens = 512
    model(**dpr_batch())  # both towers now run with the packed attention implementation
    model.tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)  # two towers: each carries it
    model.save_pretrained(tmp_path)
    assert not any(PACKED_ATTENTION in path.read_text() for path in tmp_path.rglob("*.json"))
    saved = json.loads((tmp_path / "dual_encoder_config.json").read_text())
    assert (saved["sub_batch_size"], saved["sub_batch_tokens"]) == ("packed", 512)
    reloaded = DualEncoderModel.from_pretrained(tmp_path)
    assert (reloaded.config.sub_batch_size, reloaded.config.sub_batch_tokens) == ("packed", 512)
    assert reloaded.query_encoder.config._attn_implementation == "sdpa"
    del saved["sub_batch_size"], saved["sub_batch_tokens"]  # a checkpoint written before the fields existed
    (tmp_path / "dual_encoder_config.json").write_text(json.dumps(saved))
    assert DualEncoderModel.from_pretrained(tmp_path).config.sub_batch_size == "auto"
