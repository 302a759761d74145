"""Several hard negatives per anchor: the collators' k negative columns (named or a list column), the objective on
(B, 2 + k, d) views against a loop written from the formula, and training through ContrastiveTrainer."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.collators import PairCollator, negative_columns
from contrastive_hf.data.columns import resolve_query_passage_columns
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.recipes.dpr import QueryPassageCollator, tokenize_query_passage_pairs, tokenized_columns
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, tiny_bert_config
from helpers.batches import assert_same_batch

NEGATIVES = 3


def snli_rows(count: int, negatives: int = NEGATIVES) -> list[dict]:
    """Real SNLI rows with k negatives each: the contradiction, then the entailments of the next rows."""
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[: count + negatives]
    out = []
    for i in range(count):
        others = [rows[i + j]["sent1"] for j in range(1, negatives)]
        out.append(
            {"anchor": rows[i]["sent0"], "positive": rows[i]["sent1"], "negatives": [rows[i]["hard_neg"], *others]}
        )
    return out


def named(rows: list[dict]) -> list[dict]:
    """The same rows with sentence-transformers' columns negative_1..negative_k."""
    return [
        {"anchor": r["anchor"], "positive": r["positive"]}
        | {f"negative_{j + 1}": text for j, text in enumerate(r["negatives"])}
        for r in rows
    ]


def reference_loss(views, temperature, weight=0.0, ids=None, similarity="cosine"):
    """InfoNCE with k hard negatives, by loops: query i against every positive and every hard negative of the batch,
    ``weight`` added to the logits of its own k negatives, columns holding the query's or its positive's sentence
    (other than the positive itself) left out. Returns (mean loss, mean number of negatives), float64."""
    views = views.double()
    batch, num_views = views.shape[:2]

    def score(a, b):
        value = a @ b / (a.norm() * b.norm()) if similarity == "cosine" else a @ b
        return float(value) / temperature

    losses, counts = [], []
    for i in range(batch):
        own = set() if ids is None else {int(ids[i, 0]), int(ids[i, 1])}
        terms, count, positive = [], 0, None
        for j in range(batch):
            for v in range(1, num_views):
                logit = score(views[i, 0], views[j, v]) + (weight if (v >= 2 and j == i) else 0.0)
                if v == 1 and j == i:
                    positive = logit
                    terms.append(logit)
                    continue
                if ids is not None and int(ids[j, v]) in own:
                    continue
                terms.append(logit)
                count += 1
        losses.append(math.log(sum(math.exp(t) for t in terms)) - positive)
        counts.append(count)
    return sum(losses) / batch, sum(counts) / batch


# ----------------------------------------------------------------------------------------------------------------
# Columns
# ----------------------------------------------------------------------------------------------------------------


def test_negative_columns_are_found_by_name_or_number():
    assert negative_columns(["anchor", "positive", "negative_2", "negative_1", "negative_3"]) == (
        "negative_1",
        "negative_2",
        "negative_3",
    )
    assert negative_columns(["sent0", "sent1", "hard_neg"]) == ("hard_neg",)
    assert negative_columns(["anchor", "positive", "negatives"]) == ("negatives",)
    assert negative_columns(["anchor", "positive", "negative_2"]) == ()  # numbering starts at 1
    assert resolve_query_passage_columns(["q", "p", "n1", "n2"], "q", "p", "n1, n2") == ("q", "p", "n1", "n2")
    assert resolve_query_passage_columns(["query", "positive", "negative_1", "negative_2"]) == (
        "query",
        "positive",
        "negative_1",
        "negative_2",
    )
    with pytest.raises(ValueError, match="named both"):
        resolve_query_passage_columns(["q", "p"], "q", "p", "p")
    with pytest.raises(ValueError, match="not a column"):
        resolve_query_passage_columns(["q", "p"], "q", "p", "q2")
    assert tokenized_columns(0) == ("query", "positive")
    assert tokenized_columns(1) == ("query", "positive", "hard_negative")
    assert tokenized_columns(2) == ("query", "positive", "hard_negative_1", "hard_negative_2")


# ----------------------------------------------------------------------------------------------------------------
# PairCollator and ContrastiveForPreTraining
# ----------------------------------------------------------------------------------------------------------------


def test_pair_collator_takes_k_negative_columns_or_a_list_column(tokenizer):
    rows = snli_rows(6)
    listed = PairCollator(tokenizer, max_length=32)(rows)
    by_name = PairCollator(tokenizer, max_length=32)(named(rows))
    assert PairCollator(tokenizer).resolve_columns(named(rows)[0]) == (
        "anchor",
        "positive",
        "negative_1",
        "negative_2",
        "negative_3",
    )
    assert_same_batch(listed, by_name)
    assert listed["input_ids"].shape[:2] == (6, 2 + NEGATIVES)
    assert listed["sentence_ids"].shape == (6, 2 + NEGATIVES)
    for i, row in enumerate(rows):
        for v, text in enumerate([row["anchor"], row["positive"], *row["negatives"]]):
            expected = tokenizer(text, truncation=True, max_length=32)["input_ids"]
            n = int(listed["attention_mask"][i, v].sum())
            assert listed["input_ids"][i, v, :n].tolist() == expected
    # row i's negative 2 is row i + 1's positive: the same sentence, the same id
    assert listed["sentence_ids"][0, 3] == listed["sentence_ids"][1, 1]
    assert PairCollator(tokenizer).card_description()["hard_negatives"] == 0

    uneven = [dict(rows[0]), dict(rows[1])]
    uneven[1]["negatives"] = uneven[1]["negatives"][:2]
    with pytest.raises(ValueError, match="same number of negatives"):
        PairCollator(tokenizer)(uneven)


@pytest.mark.parametrize("weight", [0.0, 2.0])
def test_the_loss_with_k_hard_negatives_matches_the_formula(weight):
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(), contrastive_loss="info_nce", mlm_weight=0.0, hard_negative_weight=weight
        )
    )
    generator = torch.Generator().manual_seed(3)
    views = torch.randn(4, 2 + NEGATIVES, 8, generator=generator)
    ids = torch.arange(4 * (2 + NEGATIVES)).view(4, -1) + 100
    ids[2, 4] = ids[0, 1]  # query 2's last negative is query 0's positive: still a negative of query 2 only
    ids[1, 3] = ids[1, 0]  # query 1's second negative is its own anchor's sentence: left out
    loss, negatives = model.compute_contrastive_loss(views, sentence_ids=ids)
    expected, expected_negatives = reference_loss(views, model.config.temperature, weight, ids)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert negatives.item() == pytest.approx(expected_negatives)
    plain, plain_negatives = model.compute_contrastive_loss(views)
    assert plain.item() == pytest.approx(reference_loss(views, model.config.temperature, weight)[0], rel=1e-5)
    assert plain_negatives.item() == 4 * (1 + NEGATIVES) - 1


def test_k_hard_negatives_train_through_the_trainer(tokenizer, tmp_path):
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer)), contrastive_loss="info_nce", mlm_weight=0
        )
    )
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=2, learning_rate=1e-3, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(named(snli_rows(16))),
        data_collator=PairCollator(tokenizer, max_length=32),
        processing_class=tokenizer,
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "cl_loss" in entry]
    assert len(logged) == 2 and all(entry["cl_loss"] > 0 for entry in logged)
    # at most 8 positives and 8 x 3 hard negatives, less the positive; a row's negatives 2 and 3 are the next rows'
    # positives, which are masked as duplicates when those rows share the batch
    assert all(
        8 * (1 + NEGATIVES) - 1 - 2 * 8 < entry["negatives_per_query"] <= 8 * (1 + NEGATIVES) - 1 for entry in logged
    )


# ----------------------------------------------------------------------------------------------------------------
# DPR: QueryPassageCollator and DualEncoderModel
# ----------------------------------------------------------------------------------------------------------------


def test_dpr_collator_takes_k_negatives_as_texts_token_ids_or_a_list(tokenizer):
    rows = [{"query": r["anchor"], "positive": r["positive"], "negatives": r["negatives"]} for r in snli_rows(5)]
    columns = ("query", "positive", "negatives")
    from_texts = QueryPassageCollator(tokenizer, columns=columns)(rows)
    assert from_texts["passage_input_ids"].shape[:2] == (5, 1 + NEGATIVES)
    assert from_texts["sentence_ids"].shape == (5, 2 + NEGATIVES)
    for i, row in enumerate(rows):
        for v, text in enumerate([row["positive"], *row["negatives"]]):
            n = int(from_texts["passage_attention_mask"][i, v].sum())
            assert from_texts["passage_input_ids"][i, v, :n].tolist() == tokenizer(text)["input_ids"]

    # a list column, and the same negatives as k named columns, tokenized beforehand: the same batch
    listed = tokenize_query_passage_pairs(Dataset.from_list(rows), tokenizer, columns)
    assert listed.column_names == ["query", "positive", "hard_negative"]
    flat = [
        {"query": r["query"], "positive": r["positive"]} | {f"n{j}": t for j, t in enumerate(r["negatives"])}
        for r in rows
    ]
    names = ("query", "positive", *(f"n{j}" for j in range(NEGATIVES)))
    numbered = tokenize_query_passage_pairs(Dataset.from_list(flat), tokenizer, names)
    assert numbered.column_names == list(tokenized_columns(NEGATIVES))
    default = QueryPassageCollator(tokenizer)
    for batch in (default(list(listed)), default(list(numbered))):
        assert_same_batch(batch, from_texts)
    assert default.card_description()["hard_negatives"] == NEGATIVES


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_dpr_loss_with_k_hard_negatives_matches_the_formula(similarity):
    encoder = tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = DualEncoderModel(DualEncoderConfig(query_encoder=encoder, similarity=similarity))
    generator = torch.Generator().manual_seed(4)
    views = torch.randn(5, 2 + NEGATIVES, 8, generator=generator)
    ids = torch.arange(5 * (2 + NEGATIVES)).view(5, -1)
    ids[3, 2] = ids[3, 1]  # query 3's first negative is a copy of its positive passage: left out
    loss, negatives = model.compute_contrastive_loss(views, sentence_ids=ids)
    expected, expected_negatives = reference_loss(views, model.config.temperature, 0.0, ids, similarity)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert negatives.item() == pytest.approx(expected_negatives)
