"""Batches of every collator an example script trains with, built from the repository's real text: what the GPU
contracts are checked on (tests/data/test_pinnable_batches.py on CPU, tests/gpu/ through pinned memory)."""

from __future__ import annotations

import csv

import numpy as np
import torch
from datasets import Dataset

from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.data.mixture import DATASET_KEY, MixtureCollator
from contrastive_hf.models.modeling_multitask import TaskSpec
from contrastive_hf.recipes.declutr import SpanViewCollator, tokenize_documents
from contrastive_hf.recipes.dpr import QueryPassageCollator
from contrastive_hf.recipes.multitask.data import MultitaskCollator
from contrastive_hf.recipes.sg_bert.data import SelfGuidedCollator

from conftest import DEMO_DATA

__all__ = ["BUILDERS", "sentences", "nli_rows", "host_data_disagreements", "assert_same_batch"]


def sentences(count: int = 8) -> list[str]:
    with open(DEMO_DATA / "wiki1m_sample.txt", encoding="utf-8") as handle:
        return [line.strip() for line, _ in zip(handle, range(count), strict=False)]


def nli_rows(count: int = 8) -> list[dict[str, str]]:
    with open(DEMO_DATA / "nli_sample.csv", encoding="utf-8", newline="") as handle:
        return [row for row, _ in zip(csv.DictReader(handle), range(count), strict=False)]


def clear_batches(tokenizer):
    add_del_token(tokenizer)
    features = [{"input_ids": tokenizer(text, truncation=True, max_length=32)["input_ids"]} for text in sentences()]
    for options in (
        {"augmentation": "del_word", "mlm": True},
        {"augmentation": "dropout", "mlm": False},
        {"augmentation": "del_span,reorder", "num_views": 3, "mlm": True, "mlm_on_views": True},
        {"augmentation": "dropout", "mlm": True, "pad_to_multiple_of": 8},
    ):
        yield f"ContrastiveDataCollator({options})", ContrastiveDataCollator(tokenizer, seed=0, **options)(features)


def pair_batches(tokenizer):
    rows = nli_rows()
    yield "PairCollator(triplets, mlm)", PairCollator(tokenizer, mlm=True, seed=0)(rows)
    prompts = {"query": "query: ", "document": "passage: "}
    collator = PairCollator(tokenizer, prompts=prompts, include_prompt=False, seed=0)
    yield "PairCollator(prompts left out of the pooling)", collator(rows)
    listed = [{"anchor": row["sent0"], "positive": row["sent1"], "negative": [row["hard_neg"]] * 2} for row in rows]
    yield "PairCollator(a list of negatives)", PairCollator(tokenizer, seed=0)(listed)


def dpr_batches(tokenizer):
    rows = [{"query": row["sent0"], "positive": row["sent1"], "hard_negative": row["hard_neg"]} for row in nli_rows()]
    yield "QueryPassageCollator", QueryPassageCollator(tokenizer)(rows)
    prompts = {"query": "query: ", "document": "passage: "}
    collator = QueryPassageCollator(tokenizer, prompts=prompts, include_prompt=False)
    yield "QueryPassageCollator(prompts left out of the pooling)", collator(rows)


def span_batches(tokenizer):
    with open(DEMO_DATA / "enwiki_paragraphs_sample.txt", encoding="utf-8") as handle:
        paragraphs = [line.strip() for line, _ in zip(handle, range(40), strict=False)]
    documents = tokenize_documents(
        Dataset.from_dict({"text": paragraphs}), tokenizer, span_words=16, hard_negatives=True
    )
    features = [documents[index] for index in range(min(6, len(documents)))]
    assert len(features) >= 2
    for options in ({"view": "neighbouring_slice", "mlm": True}, {"view": "neighbour", "hard_negatives": True}):
        yield f"SpanViewCollator({options})", SpanViewCollator(tokenizer, span_words=16, seed=0, **options)(features)


def other_batches(tokenizer):
    texts = [{"text": text} for text in sentences()]
    yield "SelfGuidedCollator", SelfGuidedCollator(tokenizer, max_length=32)(texts)
    mixture = MixtureCollator({"wiki": ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, seed=0)})
    yield "MixtureCollator", mixture([{**text, DATASET_KEY: "wiki"} for text in texts])
    tasks = [TaskSpec("sst", "classification"), TaskSpec("stsb", "pair_regression", head="uv_absdiff")]
    examples = [{"task": "sst", "sentence": text["text"], "label": 1} for text in texts[:4]]
    examples += [
        {"task": "stsb", "sentence1": row["sent0"], "sentence2": row["sent1"], "label": 0.5} for row in nli_rows(4)
    ]
    yield "MultitaskCollator", MultitaskCollator(tokenizer, tasks)(examples)


# Each yields (name, batch) pairs for a tokenizer (the demo's; CLEAR's builder adds [DEL] to it).
BUILDERS = [clear_batches, pair_batches, dpr_batches, span_batches, other_batches]


def host_data_disagreements(batch: dict) -> list[str]:
    """Where a batch's host arrays (`contrastive_hf.models.host_data`) do not say what its tensors hold: the lengths
    are the attention masks' row sums, the MLM positions the flat positions of the labels other than -100."""
    problems = []
    for lengths, mask in (
        ("input_lengths", "attention_mask"),
        ("mlm_lengths", "mlm_attention_mask"),
        ("query_lengths", "query_attention_mask"),
        ("passage_lengths", "passage_attention_mask"),
    ):
        if lengths in batch and not np.array_equal(batch[lengths], batch[mask].sum(-1).numpy()):
            problems.append(f"{lengths} != {mask}.sum(-1)")
    if "mlm_positions" in batch:
        expected = np.flatnonzero(batch["mlm_labels"].numpy().reshape(-1) != -100)
        if not np.array_equal(batch["mlm_positions"], expected):
            problems.append("mlm_positions != the positions of mlm_labels other than -100")
    return problems


def assert_same_batch(a: dict, b: dict) -> None:
    """Two batches with the same entries, equal tensors and host arrays."""
    assert a.keys() == b.keys()
    for key in a:
        if torch.is_tensor(a[key]):
            assert torch.equal(a[key], b[key]), key
        else:
            assert np.array_equal(a[key], b[key]), key
