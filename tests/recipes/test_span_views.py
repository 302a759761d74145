"""DeCLUTR-style span views: slice, neighbour and neighbouring-slice positives, hard negatives, short documents."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.reading import load_corpus
from contrastive_hf.data.streams import text_stream
from contrastive_hf.recipes.declutr import SPAN_VIEWS, SpanViewCollator, tokenize_documents, words_needed
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, tiny_bert_config
from helpers.batches import assert_same_batch

WIKI = DEMO_DATA / "enwiki_paragraphs_sample.txt"  # the first 1,000 paragraphs


def _whole_words(tokenizer, count: int) -> list[int]:
    """``count`` distinct ids of one-piece words (no '##', not special)."""
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(range(200, 8000)))
    return [200 + i for i, t in enumerate(tokens) if t.isalpha() and (200 + i) not in special][:count]


def _content(batch, row, view, tokenizer) -> list[int]:
    """The span of a view, without its [CLS] ... [SEP] frame."""
    n = int(batch["attention_mask"][row, view].sum())
    ids = batch["input_ids"][row, view, :n].tolist()
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    return ids[1:-1]


def _start(document: list[int], span: list[int], mask_id: int) -> int:
    """Where ``span`` (possibly with masked tokens) sits in ``document``."""
    matches = [
        start
        for start in range(len(document) - len(span) + 1)
        if all(s == mask_id or s == d for s, d in zip(span, document[start : start + len(span)], strict=True))
    ]
    assert len(matches) == 1, matches
    return matches[0]


def test_words_needed():
    assert words_needed("slice") == 32
    assert words_needed("neighbour") == words_needed("neighbouring_slice") == 64
    assert words_needed("neighbour", span_words=10, hard_negatives=True) == 30
    assert words_needed("slice", span_words=10, hard_negatives=True) == 20
    with pytest.raises(ValueError, match="Unknown span view 'slices'"):
        words_needed("slices")
    with pytest.raises(ValueError, match="span_words"):
        words_needed("slice", span_words=0)


@pytest.mark.parametrize("view", SPAN_VIEWS)
@pytest.mark.parametrize("hard_negatives", [False, True])
def test_views_are_spans_of_the_document(tokenizer, view, hard_negatives):
    words = _whole_words(tokenizer, 70)
    span = 20
    collator = SpanViewCollator(tokenizer, view=view, span_words=span, hard_negatives=hard_negatives, seed=0)
    features = [{"input_ids": words, "example_index": index} for index in range(40)]
    batch = collator(features)
    assert batch["input_ids"].shape[:2] == (40, 3 if hard_negatives else 2)
    mask_id = tokenizer.mask_token_id
    masked = view != "neighbour"
    starts_seen, negative_sides = set(), set()
    for row in range(40):
        anchor, positive = _content(batch, row, 0, tokenizer), _content(batch, row, 1, tokenizer)
        assert len(anchor) == len(positive) == span
        a, p = _start(words, anchor, mask_id), _start(words, positive, mask_id)
        assert p == (a if view == "slice" else a + span)  # the same span, or the next one
        starts_seen.add(a)
        anchor_masks = {i for i, t in enumerate(anchor) if t == mask_id}
        positive_masks = {i for i, t in enumerate(positive) if t == mask_id}
        assert len(anchor_masks) == len(positive_masks) == (3 if masked else 0)  # round(0.15 * 20)
        if view == "slice":
            assert not anchor_masks & positive_masks  # two differently masked copies
        if hard_negatives:
            negative = _content(batch, row, 2, tokenizer)
            n = _start(words, negative, mask_id)
            covered = span if view == "slice" else 2 * span
            assert n + span <= a or n >= a + covered  # overlaps neither positive
            negative_sides.add(n < a)
            assert sum(t == mask_id for t in negative) == (3 if masked else 0)
    assert len(starts_seen) > 3  # random placements
    if hard_negatives:
        assert negative_sides == {True, False}


def test_spans_hold_whole_words_and_respect_max_length(tokenizer):
    # words of two pieces: "jump ##s"
    pieces = tokenizer("jumps", add_special_tokens=False)["input_ids"]
    assert len(pieces) == 2
    document = pieces * 40  # 40 words, 80 tokens
    collator = SpanViewCollator(tokenizer, view="neighbour", span_words=10, seed=1)
    batch = collator([{"input_ids": document}])
    assert len(_content(batch, 0, 0, tokenizer)) == 20
    assert _content(batch, 0, 0, tokenizer)[:2] == pieces  # starts at a word start
    short = SpanViewCollator(tokenizer, view="neighbour", span_words=10, max_length=9, seed=1)
    assert short([{"input_ids": document}])["input_ids"].shape[-1] == 9


def test_determinism_epochs_and_mlm_copy(tokenizer):
    words = _whole_words(tokenizer, 80)
    features = [{"input_ids": words, "example_index": i} for i in range(8)]
    collator = SpanViewCollator(tokenizer, view="neighbouring_slice", span_words=16, mlm=True, seed=3)
    first = collator(features)
    assert_same_batch(first, collator(features))
    part = collator(features[2:5])  # batch-independent (the MLM positions are flat indices: compared as labels)
    assert all(torch.equal(first[k][2:5], v) for k, v in part.items() if torch.is_tensor(v))
    assert np.array_equal(first["input_lengths"][2:5], part["input_lengths"])
    collator.set_epoch(1)
    second = collator(features)
    assert not torch.equal(first["input_ids"], second["input_ids"])
    # the MLM copy is the unmasked anchor span
    anchor = _content(first, 0, 0, tokenizer)
    mlm = first["mlm_input_ids"][0, 1 : 1 + len(anchor)].tolist()
    labels = first["mlm_labels"][0, 1 : 1 + len(anchor)].tolist()
    original = [label if label != -100 else token for token, label in zip(mlm, labels, strict=True)]
    start = _start(words, anchor, tokenizer.mask_token_id)
    assert original == words[start : start + len(anchor)]


def test_short_documents_in_a_batch_are_skipped_and_counted(tokenizer, caplog):
    words = _whole_words(tokenizer, 70)
    collator = SpanViewCollator(tokenizer, view="neighbour", span_words=20, seed=0)
    features = [{"input_ids": words}, {"input_ids": words[:39]}, {"input_ids": []}, {"input_ids": words[:40]}]
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.recipes.declutr"):
        batch = collator(features)
    assert batch["input_ids"].shape[0] == 2  # documents of 70 and 40 words
    assert "Skipped 2 document(s) of the batch shorter than 40 words" in caplog.text
    assert collator.skipped_documents == 2
    with pytest.raises(ValueError, match="No document of the batch has the 40 words"):
        collator([{"input_ids": words[:10]}])


def test_collator_errors(tokenizer):
    with pytest.raises(ValueError, match="Unknown span view"):
        SpanViewCollator(tokenizer, view="sentences")
    with pytest.raises(ValueError, match="mask_probability"):
        SpanViewCollator(tokenizer, mask_probability=0.6)
    tokenizer.mask_token = None
    with pytest.raises(ValueError, match="mask"):
        SpanViewCollator(tokenizer, view="slice")
    SpanViewCollator(tokenizer, view="neighbour")  # no masking needed


# ----------------------------------------------------------------------------------------------------
# Documents from a real corpus
# ----------------------------------------------------------------------------------------------------


def _word_count(tokenizer, text: str) -> int:
    return sum(not token.startswith("##") for token in tokenizer.tokenize(text))


def test_tokenize_documents_drops_and_counts_short_documents(tokenizer, caplog):
    corpus = load_corpus(str(WIKI)).select(range(200))
    needed = words_needed("neighbour", 32, hard_negatives=True)
    expected = [text for text in corpus["text"] if _word_count(tokenizer, text) >= needed]
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.recipes.declutr"):
        documents = tokenize_documents(corpus, tokenizer, view="neighbour", hard_negatives=True)
    assert f"Skipped {200 - len(expected)} document(s) of 200, shorter than the 96 words" in caplog.text
    assert 0 < len(expected) < 200
    assert documents.column_names == ["input_ids", "example_index"]
    assert documents["input_ids"] == [tokenizer(text, add_special_tokens=False)["input_ids"] for text in expected]
    with pytest.raises(ValueError, match="No document of the corpus has the 96 words"):
        tokenize_documents(Dataset.from_dict({"text": ["too short", "also short"]}), tokenizer, hard_negatives=True,
                           view="neighbour")  # fmt: skip


def test_streamed_documents_are_filtered_lazily(tmp_path, tokenizer, caplog):
    lines = ["one two three"] * 3 + [" ".join(["word"] * 40)] * 2
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.recipes.declutr"):
        documents = list(tokenize_documents(text_stream(str(path)), tokenizer, view="slice", span_words=32))
    assert len(documents) == 2 and all(len(doc["input_ids"]) == 40 for doc in documents)
    assert "Skipped 1 document(s) of 1 so far" in caplog.text
    assert documents[0]["example_index"] == len("one two three\n") * 3  # the line's byte offset


@pytest.mark.parametrize(
    ("view", "hard_negatives"), [("slice", False), ("neighbour", True), ("neighbouring_slice", True)]
)
def test_span_views_train_on_real_wikipedia(tokenizer, tmp_path, view, hard_negatives):
    corpus = load_corpus(str(WIKI)).select(range(120))
    documents = tokenize_documents(corpus, tokenizer, view=view, span_words=16, hard_negatives=hard_negatives)
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), contrastive_loss="info_nce")
    model = ContrastiveForPreTraining(config)
    collator = SpanViewCollator(tokenizer, view=view, span_words=16, hard_negatives=hard_negatives, mlm=True, seed=0)
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=2, learning_rate=1e-3, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=documents, data_collator=collator, processing_class=tokenizer
    )
    before = model.contrastive.encoder.embeddings.word_embeddings.weight.detach().clone()
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "cl_loss" in entry]
    assert len(logged) == 2 and all(np.isfinite(entry["cl_loss"]) and entry["mlm_loss"] > 0 for entry in logged)
    assert not torch.equal(before, model.contrastive.encoder.embeddings.word_embeddings.weight)
