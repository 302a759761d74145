"""Matryoshka representation learning: the loss is the weighted sum of the plain losses on truncated embeddings
(computed here by hand, for InfoNCE with hard negatives, a queue and duplicates, NT-Xent and DPR), across processes
and through GradCache; configuration errors; STS per dimension; ``truncate_dim`` in the checkpoint; the card."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

import contrastive_hf.models.distributed as distributed
from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.evaluation import STSData, evaluate_sts_per_dimension
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.losses import duplicate_mask, info_nce, nt_xent
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.recipes.sg_bert import SelfGuidedModel

from conftest import assert_grad_cache_matches_one_pass, tiny_bert_config
from helpers.builders import queue_holding

DIMS, WEIGHTS = [32, 16, 8], [1.0, 0.5, 2.0]


def pretraining_model(loss="info_nce", **overrides) -> ContrastiveForPreTraining:
    encoder = tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = dict(contrastive_loss=loss, mlm_weight=0.0, projection_type="none", matryoshka_dims=DIMS)
    return ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, **{**config, **overrides}))


def by_hand(loss_of_slice, dims=DIMS, weights=WEIGHTS) -> float:
    return sum(weight * loss_of_slice(dim).item() for dim, weight in zip(dims, weights, strict=True))


def test_info_nce_is_the_weighted_sum_over_truncations_with_hard_negatives_queue_and_duplicates():
    model = pretraining_model(matryoshka_weights=WEIGHTS, hard_negative_weight=0.7)
    generator = torch.Generator().manual_seed(0)
    views = torch.randn(4, 4, 32, generator=generator)  # anchor, positive, two hard negatives
    queue = torch.randn(3, 32, generator=generator)
    ids = torch.arange(16).view(4, 4)
    ids[2, 1] = ids[0, 1]  # a duplicated positive
    queue_ids = torch.tensor([ids[3, 1].item(), 50, 51])
    queue_holding(model, queue, queue_ids)
    loss, _ = model.compute_contrastive_loss(views, ids)
    columns = torch.cat([ids[:, 1], ids[:, 2:].reshape(-1), queue_ids])
    mask = duplicate_mask(ids[:, :2], columns, torch.arange(4))

    def plain(dim):
        return info_nce(
            views[:, 0, :dim],
            views[:, 1, :dim],
            0.05,
            hard_negatives=views[:, 2:, :dim],
            hard_negative_weight=0.7,
            extra_negatives=queue[:, :dim],
            negatives_mask=mask,
        )

    assert loss.item() == pytest.approx(by_hand(plain), rel=1e-5)
    # the whole vectors alone, and with equal weights, are different objectives
    assert abs(loss.item() - plain(32).item()) > 1e-3


def test_nt_xent_and_dpr_are_weighted_sums_too():
    views = torch.randn(5, 2, 32, generator=torch.Generator().manual_seed(1))
    loss, _ = pretraining_model("nt_xent").compute_contrastive_loss(views)
    assert loss.item() == pytest.approx(
        by_hand(lambda d: nt_xent(views[:, 0, :d], views[:, 1, :d], 0.05), DIMS, [1] * 3)
    )

    encoder = tiny_bert_config()
    dual = DualEncoderModel(DualEncoderConfig(query_encoder=encoder, matryoshka_dims=DIMS, matryoshka_weights=WEIGHTS))
    passages = torch.randn(5, 3, 32, generator=torch.Generator().manual_seed(2))  # query, positive, hard negative
    loss, _ = dual.compute_contrastive_loss(passages)

    def dpr(dim):
        return info_nce(
            passages[:, 0, :dim], passages[:, 1, :dim], 1.0, hard_negatives=passages[:, 2, :dim], similarity="dot"
        )

    assert loss.item() == pytest.approx(by_hand(dpr), rel=1e-5)


def test_gathered_negatives_are_truncated_with_this_process_s_vectors(monkeypatch):
    """Rank 1 of 2, collectives replaced: every dimension's loss scores the local queries against both processes'
    (the sum scaled by this process's share of the global batch, 2 of 5 rows on 2 processes)."""
    model = pretraining_model(matryoshka_weights=WEIGHTS)
    generator = torch.Generator().manual_seed(3)
    other, mine = torch.randn(3, 2, 32, generator=generator), torch.randn(2, 2, 32, generator=generator)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    monkeypatch.setattr(distributed, "gather_sizes", lambda size, device: [3, size])
    monkeypatch.setattr(distributed, "gather_with_grad", lambda t, sizes: torch.cat([other, t]))
    model.loss_fn.gather_across_devices = True
    loss, _ = model.compute_contrastive_loss(mine)
    everyone = torch.cat([other, mine])
    expected = by_hand(lambda d: info_nce(mine[:, 0, :d], everyone[:, 1, :d], 0.05, positive_offset=3)) * 2 * 2 / 5
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_grad_cache_gives_the_full_batch_gradients_of_the_matryoshka_loss():
    torch.manual_seed(0)
    model = pretraining_model(matryoshka_weights=WEIGHTS).train()
    generator = torch.Generator().manual_seed(4)
    inputs = {
        "input_ids": torch.randint(5, 8000, (10, 3, 7), generator=generator),
        "attention_mask": torch.ones(10, 3, 7, dtype=torch.long),
    }
    assert_grad_cache_matches_one_pass(model, inputs, chunk_size=4)


def test_configuration_errors_name_the_fix():
    encoder = tiny_bert_config()
    with pytest.raises(ValueError, match="projection_at_inference=True"):
        ContrastiveConfig(encoder=encoder, projection_type="mlp", matryoshka_dims=[16])
    with pytest.raises(ValueError, match=r"distinct size in 1\.\.32"):
        ContrastiveConfig(encoder=encoder, projection_type="none", matryoshka_dims=[64, 16])
    with pytest.raises(ValueError, match=r"distinct size in 1\.\.8"):  # the projected size is what is compared
        ContrastiveConfig(encoder=encoder, projection_dim=8, projection_at_inference=True, matryoshka_dims=[16])
    with pytest.raises(ValueError, match="one weight per Matryoshka dimension"):
        ContrastiveConfig(encoder=encoder, projection_type="none", matryoshka_dims=[32, 16], matryoshka_weights=[1])
    with pytest.raises(ValueError, match="one weight per Matryoshka dimension"):
        DualEncoderConfig(query_encoder=encoder, matryoshka_weights=[1.0])
    kept = ContrastiveConfig(encoder=encoder, projection_dim=16, projection_at_inference=True, matryoshka_dims=[16, 8])
    assert kept.matryoshka_dims == [16, 8]
    sg_bert_t = ContrastiveModel(ContrastiveConfig(encoder=encoder, projection_type="none", matryoshka_dims=[16]))
    with pytest.raises(ValueError, match="SG-BERT cannot train"):
        SelfGuidedModel(sg_bert_t)


def test_sts_per_dimension_equals_truncated_encodings_scored_by_hand(tokenizer):
    model = ContrastiveModel(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    )
    data = STSData(
        ["a man plays a guitar", "a dog runs", "the sun is hot", "two kids eat", "rain falls"],
        ["someone plays music", "a cat sleeps", "it is warm today", "children have lunch", "it snows"],
        [4.2, 1.0, 3.1, 3.8, 1.5],
    )
    results = evaluate_sts_per_dimension(model, data, [32, 8], tokenizer=tokenizer)
    for dim in (32, 8):
        first = model.encode(data.sentences1, tokenizer=tokenizer, truncate_dim=dim)
        second = model.encode(data.sentences2, tokenizer=tokenizer, truncate_dim=dim)
        assert first.shape == (5, dim)
        cosines = (first * second).sum(1) / (np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1))
        assert results[dim]["spearman"] == pytest.approx(100 * spearmanr(cosines, data.scores).statistic, abs=1e-6)
    with pytest.raises(ValueError, match="to \\[64\\] dimensions"):
        evaluate_sts_per_dimension(model, data, [64], tokenizer=tokenizer)


def test_truncate_dim_is_saved_for_sentence_transformers_only_when_asked(tmp_path, tokenizer):
    from sentence_transformers import SentenceTransformer

    encoder = tiny_bert_config(vocab_size=len(tokenizer))
    plain = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="mean", projection_type="none"))
    plain.save_pretrained(tmp_path / "plain")
    assert "truncate_dim" not in json.loads((tmp_path / "plain" / "config_sentence_transformers.json").read_text())

    model = ContrastiveModel(
        ContrastiveConfig(
            encoder=encoder, pooler_type="mean", projection_type="none", matryoshka_dims=[32, 8], truncate_dim=8
        )
    )
    model.save_pretrained(tmp_path / "small")
    tokenizer.save_pretrained(tmp_path / "small")
    assert json.loads((tmp_path / "small" / "config_sentence_transformers.json").read_text())["truncate_dim"] == 8
    sentences = ["a man plays a guitar", "a dog runs in the park"]
    ours = model.encode(sentences, tokenizer=tokenizer)
    assert ours.shape == (2, 8)
    np.testing.assert_allclose(ours, model.encode(sentences, tokenizer=tokenizer, truncate_dim=32)[:, :8], atol=1e-6)
    theirs = SentenceTransformer(str(tmp_path / "small"), device="cpu").encode(sentences)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    reloaded = ContrastiveModel.from_pretrained(tmp_path / "small")
    assert (reloaded.config.matryoshka_dims, reloaded.config.truncate_dim) == ([32, 8], 8)


def test_the_card_says_which_dimensions_were_trained_and_scores_each():
    model = pretraining_model(matryoshka_weights=WEIGHTS)
    info = ModelCardInfo(
        method="Supervised SimCSE",
        model_name="mrl",
        base_model=None,
        augmentation="pairs",
        training_data="nli",
        hyperparameters={},
        eval_results={"stsb_dev": {"spearman": 80.0}, "stsb_dev_dim8": {"spearman": 70.0}},
    )
    card = str(render_model_card(model, info))
    assert "| Matryoshka dimensions | loss summed over the first 32 (weight 1), 16 (weight 0.5), 8 (weight 2)" in card
    assert "type: sts-dev-8" in card and "| stsb_dev_dim8 | spearman x 100 | 70.00 |" in card
