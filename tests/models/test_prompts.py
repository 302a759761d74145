"""Prompts at training time (E5, BGE): the collators prefix each column with its role's prompt, and with
``include_prompt=False`` give the prompt lengths, so that a model embeds a sentence in training exactly as ``encode``
embeds it at inference (ContrastiveForPreTraining and DualEncoderModel, GradCache included); run_dpr end to end."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.collators import PairCollator, RolePrompts
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.models.prompts import prompt_token_count
from contrastive_hf.recipes.dpr import QueryPassageCollator

from conftest import DEMO_DATA, assert_grad_cache_matches_one_pass, tiny_bert_config
from helpers.builders import run_dpr_in_process, write_snli_sample

PROMPTS = {"query": "query: ", "document": "passage: "}


def snli(count: int) -> list[dict[str, str]]:
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:count]
    return [{"anchor": r["sent0"], "positive": r["sent1"], "negative": r["hard_neg"]} for r in rows]


def pretraining_model(tokenizer, include_prompt: bool) -> ContrastiveForPreTraining:
    encoder = tiny_bert_config(
        vocab_size=len(tokenizer),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=128,
    )
    config = ContrastiveConfig(
        encoder=encoder,
        pooler_type="mean",
        projection_type="linear",
        projection_at_inference=True,  # the compared embedding is the returned one
        contrastive_loss="info_nce",
        mlm_weight=0.0,
        prompts=PROMPTS,
        include_prompt=include_prompt,
    )
    return ContrastiveForPreTraining(config).eval()


def test_each_column_gets_its_role_s_prompt_and_the_prompt_lengths(tokenizer):
    rows = snli(4)
    batch = PairCollator(tokenizer, max_length=64, prompts=PROMPTS)(rows)
    assert "prompt_lengths" not in batch  # pooled with the sentence: nothing to leave out
    for i, row in enumerate(rows):
        for v, (prompt, column) in enumerate(
            [("query: ", "anchor"), ("passage: ", "positive"), ("passage: ", "negative")]
        ):
            n = int(batch["attention_mask"][i, v].sum())
            assert batch["input_ids"][i, v, :n].tolist() == tokenizer(prompt + row[column])["input_ids"]
    left_out = PairCollator(tokenizer, max_length=64, prompts=PROMPTS, include_prompt=False)(rows)
    query, document = prompt_token_count(tokenizer, "query: "), prompt_token_count(tokenizer, "passage: ")
    assert (query, document) == (4, 4)  # [CLS] que ##ry : / [CLS] pass ##age : (the demo vocabulary)
    assert left_out["prompt_lengths"].tolist() == [[query, document, document]] * 4
    # a "passage" prompt serves documents too, as encode_document looks it up; no prompt: no lengths
    assert RolePrompts(tokenizer, {"passage": "p: "}).texts == {"query": None, "document": "p: "}
    assert "prompt_lengths" not in PairCollator(tokenizer, include_prompt=False)(rows)
    with pytest.raises(ValueError, match="give the collator the column's texts"):
        PairCollator(tokenizer, prompts=PROMPTS)([{"anchor": [2, 500, 3], "positive": "a text"}])


@pytest.mark.parametrize("include_prompt", [True, False])
def test_training_embeds_each_sentence_as_encode_does_at_inference(tokenizer, include_prompt):
    model = pretraining_model(tokenizer, include_prompt)
    rows = snli(5)
    collator = PairCollator(tokenizer, max_length=64, prompts=model.config.prompts, include_prompt=include_prompt)
    with torch.no_grad():
        trained = model(**collator(rows), return_loss=False).embeddings  # (5, 3, d)
    anchors = model.contrastive.encode([r["anchor"] for r in rows], tokenizer=tokenizer, prompt_name="query")
    positives = model.contrastive.encode([r["positive"] for r in rows], tokenizer=tokenizer, prompt_name="document")
    negatives = model.contrastive.encode([r["negative"] for r in rows], tokenizer=tokenizer, prompt_name="document")
    for view, expected in enumerate((anchors, positives, negatives)):
        np.testing.assert_allclose(trained[:, view].numpy(), expected, atol=1e-5)
    # leaving the prompt out of the pooling changes the embedding: the two settings are not the same thing
    other = model.contrastive.encode([r["anchor"] for r in rows], tokenizer=tokenizer, prompt="query: ")
    model.config.include_prompt = not include_prompt
    flipped = model.contrastive.encode([r["anchor"] for r in rows], tokenizer=tokenizer, prompt="query: ")
    np.testing.assert_allclose(other, anchors, atol=1e-6)
    assert np.abs(flipped - anchors).max() > 1e-3


@pytest.mark.parametrize("share_encoders", [True, False])
def test_a_dual_encoder_trains_on_what_encode_query_and_encode_document_return(tokenizer, share_encoders):
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = DualEncoderConfig(
        query_encoder=encoder,
        share_encoders=share_encoders,
        pooler_type="mean",
        prompts=PROMPTS,
        include_prompt=False,
    )
    model = DualEncoderModel(config).eval()
    rows = [{"query": r["anchor"], "positive": r["positive"], "hard_negative": r["negative"]} for r in snli(4)]
    batch = QueryPassageCollator(tokenizer, prompts=PROMPTS, include_prompt=False)(rows)
    assert batch["prompt_lengths"].tolist() == [[4, 4, 4]] * 4
    with torch.no_grad():
        trained = model(**batch, return_loss=False).embeddings  # (4, 3, d)
    queries = model.encode_query([r["query"] for r in rows], tokenizer=tokenizer)
    passages = model.encode_document([r["positive"] for r in rows], tokenizer=tokenizer)
    np.testing.assert_allclose(trained[:, 0].numpy(), queries, atol=1e-5)
    np.testing.assert_allclose(trained[:, 1].numpy(), passages, atol=1e-5)


def test_grad_cache_slices_the_prompt_lengths_with_the_views(tokenizer):
    model = pretraining_model(tokenizer, include_prompt=False).train()
    batch = PairCollator(tokenizer, max_length=64, prompts=PROMPTS, include_prompt=False)(snli(10))
    assert_grad_cache_matches_one_pass(model, batch, chunk_size=4)


def test_run_dpr_trains_with_prompts_and_saves_them_for_sentence_transformers(repo_root, tmp_path, tokenizer):
    from sentence_transformers import SentenceTransformer

    pairs = tmp_path / "snli.csv"
    write_snli_sample(pairs, rows=80)
    output_dir = run_dpr_in_process(
        repo_root,
        tmp_path,
        "--query_prompt", "query: ",
        "--document_prompt", "passage: ",
        "--include_prompt", "false",
        "--share_encoders",
        "--pooler_type", "mean",
        "--eval_size", "20",
        data=("--train_file", str(pairs)),
    )  # fmt: skip
    saved = json.loads((output_dir / "config_sentence_transformers.json").read_text())
    assert saved["prompts"] == PROMPTS
    model = DualEncoderModel.from_pretrained(output_dir).eval()
    assert model.config.include_prompt is False
    questions = ["a man is playing a guitar .", "two dogs run on the beach ."]
    ours = model.encode_query(questions, tokenizer=tokenizer)
    theirs = SentenceTransformer(str(output_dir), device="cpu").encode_query(questions)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
