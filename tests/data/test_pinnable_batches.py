"""Every batch of every collator can be pinned: each tensor contiguous, no two elements sharing memory.

On a GPU the Trainer's DataLoader pins each batch (``dataloader_pin_memory``, on by default), and a tensor with a
stride of 0 made every training step of every path crash there (issue 30: ``sentence_ids`` expanded over the views).
CPU runs never pin, so the invariant is checked here (`helpers.gpu_contracts`), on batches of real text; the data
ledger checks it again on every batch of every example script (tests/scripts/ledger.py).
"""

from __future__ import annotations

import csv

import pytest
import torch

from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.data.mixture import DATASET_KEY, MixtureCollator
from contrastive_hf.recipes.declutr import SpanViewCollator, tokenize_documents
from contrastive_hf.recipes.dpr import QueryPassageCollator
from contrastive_hf.recipes.multitask import TaskSpec
from contrastive_hf.recipes.multitask.data import MultitaskCollator
from contrastive_hf.recipes.sg_bert.data import SelfGuidedCollator

from conftest import DEMO_DATA
from helpers.gpu_contracts import unpinnable_tensors


def _sentences(count: int = 8) -> list[str]:
    with open(DEMO_DATA / "wiki1m_sample.txt", encoding="utf-8") as handle:
        return [line.strip() for line, _ in zip(handle, range(count), strict=False)]


def _nli_rows(count: int = 8) -> list[dict[str, str]]:
    with open(DEMO_DATA / "nli_sample.csv", encoding="utf-8", newline="") as handle:
        return [row for row, _ in zip(csv.DictReader(handle), range(count), strict=False)]


def _clear_batches(tokenizer):
    add_del_token(tokenizer)
    features = [{"input_ids": tokenizer(text, truncation=True, max_length=32)["input_ids"]} for text in _sentences()]
    for options in (
        {"augmentation": "del_word", "mlm": True},
        {"augmentation": "dropout", "mlm": False},
        {"augmentation": "del_span,reorder", "num_views": 3, "mlm": True, "mlm_on_views": True},
        {"augmentation": "dropout", "mlm": True, "pad_to_multiple_of": 8},
    ):
        yield f"ContrastiveDataCollator({options})", ContrastiveDataCollator(tokenizer, seed=0, **options)(features)


def _pair_batches(tokenizer):
    rows = _nli_rows()
    yield "PairCollator(triplets, mlm)", PairCollator(tokenizer, mlm=True, seed=0)(rows)
    prompts = {"query": "query: ", "document": "passage: "}
    collator = PairCollator(tokenizer, prompts=prompts, include_prompt=False, seed=0)
    yield "PairCollator(prompts left out of the pooling)", collator(rows)
    listed = [{"anchor": row["sent0"], "positive": row["sent1"], "negative": [row["hard_neg"]] * 2} for row in rows]
    yield "PairCollator(a list of negatives)", PairCollator(tokenizer, seed=0)(listed)


def _dpr_batches(tokenizer):
    rows = [{"query": row["sent0"], "positive": row["sent1"], "hard_negative": row["hard_neg"]} for row in _nli_rows()]
    yield "QueryPassageCollator", QueryPassageCollator(tokenizer)(rows)
    prompts = {"query": "query: ", "document": "passage: "}
    collator = QueryPassageCollator(tokenizer, prompts=prompts, include_prompt=False)
    yield "QueryPassageCollator(prompts left out of the pooling)", collator(rows)


def _span_batches(tokenizer):
    with open(DEMO_DATA / "enwiki_paragraphs_sample.txt", encoding="utf-8") as handle:
        paragraphs = [line.strip() for line, _ in zip(handle, range(40), strict=False)]
    from datasets import Dataset

    documents = tokenize_documents(
        Dataset.from_dict({"text": paragraphs}), tokenizer, span_words=16, hard_negatives=True
    )
    features = [documents[index] for index in range(min(6, len(documents)))]
    assert len(features) >= 2
    for options in ({"view": "neighbouring_slice", "mlm": True}, {"view": "neighbour", "hard_negatives": True}):
        yield f"SpanViewCollator({options})", SpanViewCollator(tokenizer, span_words=16, seed=0, **options)(features)


def _other_batches(tokenizer):
    texts = [{"text": text} for text in _sentences()]
    yield "SelfGuidedCollator", SelfGuidedCollator(tokenizer, max_length=32)(texts)
    mixture = MixtureCollator({"wiki": ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, seed=0)})
    yield "MixtureCollator", mixture([{**text, DATASET_KEY: "wiki"} for text in texts])
    tasks = [TaskSpec("sst", "classification"), TaskSpec("stsb", "pair_regression", head="uv_absdiff")]
    examples = [{"task": "sst", "sentence": text["text"], "label": 1} for text in texts[:4]]
    examples += [
        {"task": "stsb", "sentence1": row["sent0"], "sentence2": row["sent1"], "label": 0.5} for row in _nli_rows(4)
    ]
    yield "MultitaskCollator", MultitaskCollator(tokenizer, tasks)(examples)


BUILDERS = [_clear_batches, _pair_batches, _dpr_batches, _span_batches, _other_batches]


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda builder: builder.__name__.strip("_"))
def test_every_tensor_of_every_batch_can_be_pinned(tokenizer, builder):
    checked = 0
    for name, batch in builder(tokenizer):
        assert unpinnable_tensors(batch, name) == []
        checked += sum(torch.is_tensor(value) for value in batch.values())
    assert checked > 0


def test_the_check_sees_a_stride_0_tensor():
    ids = torch.arange(4).reshape(4, 1)
    assert unpinnable_tensors({"sentence_ids": ids.expand(4, 2)}) == [
        "batch['sentence_ids']: elements share memory (strides (1, 0)), not contiguous (shape (4, 2), strides (1, 0))"
    ]
    columns = torch.arange(6).reshape(2, 3).T  # a transpose: no shared memory, but not contiguous
    assert unpinnable_tensors({"task": {"ids": columns}}) == [
        "batch['task']['ids']: not contiguous (shape (3, 2), strides (1, 3))"
    ]
    assert unpinnable_tensors({"ids": ids.repeat(1, 2), "name": "wiki"}) == []
