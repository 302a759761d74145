"""Collators: CLEAR/SimCSE views with the MLM copy (ContrastiveDataCollator), supervised pairs and triplets
(PairCollator), keyed determinism, the epoch callback, and errors."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import CLEAR_AUGMENTATIONS, Identity, Mixture, add_del_token
from contrastive_hf.data.collators import (
    CollatorEpochCallback,
    ContrastiveDataCollator,
    PairCollator,
    content_room,
    mask_tokens,
    pad_sequences,
)
from contrastive_hf.data.reading import load_corpus
from contrastive_hf.data.seeding import example_keys
from contrastive_hf.data.token_batch import TokenBatch, special_token_table
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, tiny_bert_config
from helpers.batches import assert_same_batch, host_data_disagreements

SENTENCES = [
    "the quick brown fox jumps over the lazy dog near the river bank",
    "contrastive learning pulls positive pairs together and pushes negatives apart",
    "a short one",
    "sentence embeddings are evaluated on semantic textual similarity benchmarks every year",
    "word deletion replaces a fraction of the tokens with a single marker",
    "hello world",
]


@pytest.fixture
def del_tokenizer(tokenizer):
    add_del_token(tokenizer)
    return tokenizer


def _features(tokenizer, sentences=SENTENCES):
    return [{"input_ids": tokenizer(text)["input_ids"]} for text in sentences]


def _many_features(tokenizer, count=256, seed=0):
    """``count`` random sentences of ordinary (non-special) vocabulary ids, wrapped in [CLS] ... [SEP]."""
    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    ordinary = np.array([i for i in range(1000, 8000) if i not in special])
    features = []
    for _ in range(count):
        length = int(rng.integers(5, 40))
        body = rng.choice(ordinary, size=length).tolist()
        features.append({"input_ids": [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]})
    return features


# ----------------------------------------------------------------------------------------------------
# pad_sequences
# ----------------------------------------------------------------------------------------------------


def test_pad_sequences_plain():
    ids, mask = pad_sequences([[5, 6, 7], [8], [9, 10, 11, 12, 13]], pad_token_id=0)
    assert ids.dtype == torch.long and mask.dtype == torch.long
    assert ids.tolist() == [[5, 6, 7, 0, 0], [8, 0, 0, 0, 0], [9, 10, 11, 12, 13]]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]


@pytest.mark.parametrize(
    ("longest", "multiple", "expected"), [(5, 4, 8), (8, 8, 8), (9, 8, 16), (1, 8, 8), (5, None, 5)]
)
def test_pad_sequences_pad_to_multiple_of(longest, multiple, expected):
    sequences = [list(range(1, longest + 1)), [42, 43]]
    ids, mask = pad_sequences(sequences, pad_token_id=-7, pad_to_multiple_of=multiple)
    assert ids.shape == mask.shape == (2, expected)
    for row, sequence in enumerate(sequences):
        padded = sequence + [-7] * (expected - len(sequence))
        assert ids[row].tolist() == padded
        assert mask[row].tolist() == [1] * len(sequence) + [0] * (expected - len(sequence))


# ----------------------------------------------------------------------------------------------------
# Views
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_views", [1, 2, 3])
def test_output_keys_and_shapes(del_tokenizer, num_views):
    features = _features(del_tokenizer)
    collator = ContrastiveDataCollator(del_tokenizer, augmentation="del_word", num_views=num_views, seed=0)
    batch = collator(features)
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "sentence_ids",
        "mlm_input_ids",
        "mlm_attention_mask",
        "mlm_labels",
        "input_lengths",  # on the host (models.host_data): what the tensors hold, without reading them back
        "mlm_lengths",
        "mlm_positions",
    }
    assert host_data_disagreements(batch) == []
    b = len(features)
    length = batch["input_ids"].shape[-1]
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (b, num_views, length)
    longest = max(len(feature["input_ids"]) for feature in features)
    assert batch["mlm_input_ids"].shape == (b, longest)
    assert batch["mlm_attention_mask"].shape == batch["mlm_labels"].shape == (b, longest)
    for key in batch:
        assert batch[key].dtype == (torch.long if torch.is_tensor(batch[key]) else np.int64), key
    assert batch["sentence_ids"].shape == (b, num_views)
    # attention covers exactly the ids before the padding, and some view is as long as the tensor
    pad = del_tokenizer.pad_token_id
    lengths = batch["attention_mask"].sum(-1)
    assert lengths.max() == length
    for i in range(b):
        for v in range(num_views):
            n = int(lengths[i, v])
            assert batch["attention_mask"][i, v].tolist() == [1] * n + [0] * (length - n)
            assert (batch["input_ids"][i, v, n:] == pad).all()
            assert (batch["input_ids"][i, v, :n] != pad).all()


def test_mlm_off_has_no_mlm_keys(del_tokenizer):
    batch = ContrastiveDataCollator(del_tokenizer, mlm=False, seed=0)(_features(del_tokenizer))
    assert set(batch) == {"input_ids", "attention_mask", "sentence_ids", "input_lengths"}


@pytest.mark.parametrize("augmentation", ["dropout", Identity()])
def test_dropout_views_equal_original(tokenizer, augmentation):
    features = _features(tokenizer)
    batch = ContrastiveDataCollator(tokenizer, augmentation=augmentation, seed=0)(features)
    assert batch["input_ids"].shape[-1] == max(len(feature["input_ids"]) for feature in features)
    for i, feature in enumerate(features):
        ids = feature["input_ids"]
        for v in range(2):
            assert batch["input_ids"][i, v, : len(ids)].tolist() == ids
            assert (batch["input_ids"][i, v, len(ids) :] == tokenizer.pad_token_id).all()
            assert batch["attention_mask"][i, v].sum() == len(ids)


def test_del_word_views_differ_and_keep_specials(del_tokenizer):
    features = _features(del_tokenizer)
    collator = ContrastiveDataCollator(
        del_tokenizer, augmentation="del_word", view_settings={"del_word_probability": 0.5}, seed=3
    )
    batch = collator(features)
    del_id = del_tokenizer.convert_tokens_to_ids("[DEL]")
    cls, sep = del_tokenizer.cls_token_id, del_tokenizer.sep_token_id
    differing = 0
    for i, feature in enumerate(features):
        original = feature["input_ids"]
        n = len(original) - 2
        views = []
        for v in range(2):
            length = int(batch["attention_mask"][i, v].sum())
            view = batch["input_ids"][i, v, :length].tolist()
            assert view[0] == cls and view[-1] == sep
            assert view.count(cls) == 1 and view.count(sep) == 1
            kept = [token for token in view[1:-1] if token != del_id]
            assert len(kept) == n - int(round(0.5 * n))
            if n >= 2:
                assert del_id in view
            views.append(view)
        differing += views[0] != views[1]
    assert differing >= 3  # the long sentences get two different random deletions


# ----------------------------------------------------------------------------------------------------
# MLM copy
# ----------------------------------------------------------------------------------------------------


def test_mlm_labels_and_inputs(del_tokenizer):
    features = _many_features(del_tokenizer, count=64, seed=1)
    # put a few special tokens in the middle of sentences: they must never be masked either
    unk, mask_id = del_tokenizer.unk_token_id, del_tokenizer.mask_token_id
    for feature in features[::4]:
        feature["input_ids"].insert(3, unk)
    batch = ContrastiveDataCollator(del_tokenizer, seed=5)(features)
    special = set(del_tokenizer.all_special_ids)
    labels, inputs, attention = batch["mlm_labels"], batch["mlm_input_ids"], batch["mlm_attention_mask"]
    masked_count = 0
    for i, feature in enumerate(features):
        ids = feature["input_ids"]
        assert attention[i].tolist() == [1] * len(ids) + [0] * (labels.shape[1] - len(ids))
        for j in range(labels.shape[1]):
            label, given = int(labels[i, j]), int(inputs[i, j])
            if j >= len(ids):  # padding
                assert label == -100 and given == del_tokenizer.pad_token_id
                continue
            if ids[j] in special:
                assert label == -100, f"special token {ids[j]} masked at ({i}, {j})"
                assert given == ids[j]
            if label == -100:
                assert given == ids[j], "an unmasked position was changed"
            else:
                masked_count += 1
                assert label == ids[j], "the label of a masked position is not the original id"
    assert masked_count > 0
    assert (inputs == mask_id).sum() > 0


def test_mlm_rate_is_about_15_percent(del_tokenizer):
    features = _many_features(del_tokenizer, count=256, seed=2)
    batch = ContrastiveDataCollator(del_tokenizer, mlm_probability=0.15, seed=11)(features)
    ordinary = sum(len(feature["input_ids"]) - 2 for feature in features)
    masked = batch["mlm_labels"] != -100
    rate = masked.sum().item() / ordinary
    assert 0.12 < rate < 0.18, rate
    # of the masked tokens, ~80% become [MASK]
    as_mask = (batch["mlm_input_ids"][masked] == del_tokenizer.mask_token_id).float().mean().item()
    assert 0.7 < as_mask < 0.9, as_mask


def test_mlm_on_views_masks_a_copy_of_each_view(del_tokenizer):
    """CLEAR's "Double MLM" control: the MLM copy is of each augmented view, not of the sentence; the views are the
    ones the collator gives without the option, each view's mask is its own draw, and [DEL] is never masked."""
    features = _many_features(del_tokenizer, count=64, seed=4)
    options = {"augmentation": "del_word", "seed": 6}
    batch = ContrastiveDataCollator(del_tokenizer, mlm_on_views=True, **options)(features)
    plain = ContrastiveDataCollator(del_tokenizer, **options)(features)
    views, labels, inputs = batch["input_ids"], batch["mlm_labels"], batch["mlm_input_ids"]
    assert torch.equal(views, plain["input_ids"])
    assert labels.shape == inputs.shape == batch["mlm_attention_mask"].shape == views.shape
    assert torch.equal(batch["mlm_attention_mask"], batch["attention_mask"])
    masked = labels != -100
    torch.testing.assert_close(labels[masked], views[masked])  # each label is the view's own token
    assert torch.equal(inputs[~masked], views[~masked])  # nothing else is changed
    special = torch.tensor(sorted(del_tokenizer.all_special_ids))  # [DEL] included
    assert not torch.isin(views[masked], special).any()
    assert torch.isin(views, del_tokenizer.convert_tokens_to_ids("[DEL]")).any()
    rate = masked.sum().item() / (~torch.isin(views, special)).sum().item()
    assert 0.11 < rate < 0.19, rate
    assert not torch.equal(masked[:, 0], masked[:, 1])  # two draws, not one mask applied twice


def test_mlm_on_views_needs_mlm(del_tokenizer):
    with pytest.raises(ValueError, match="mlm_on_views.*mlm is off"):
        ContrastiveDataCollator(del_tokenizer, mlm=False, mlm_on_views=True)


def test_mlm_probability_is_used(del_tokenizer):
    features = _many_features(del_tokenizer, count=128, seed=3)
    batch = ContrastiveDataCollator(del_tokenizer, mlm_probability=0.5, seed=12)(features)
    ordinary = sum(len(feature["input_ids"]) - 2 for feature in features)
    rate = (batch["mlm_labels"] != -100).sum().item() / ordinary
    assert 0.45 < rate < 0.55, rate


# ----------------------------------------------------------------------------------------------------
# Text features, padding, seeding
# ----------------------------------------------------------------------------------------------------


def test_text_features_are_tokenized_and_truncated(tokenizer):
    features = [{"text": text} for text in SENTENCES]
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", max_length=8, seed=0)
    batch = collator(features)
    expected = [tokenizer(text, truncation=True, max_length=8)["input_ids"] for text in SENTENCES]
    assert max(len(ids) for ids in expected) == 8
    assert batch["input_ids"].shape == (len(SENTENCES), 2, 8)
    assert batch["mlm_input_ids"].shape == (len(SENTENCES), 8)
    for i, ids in enumerate(expected):
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert batch["input_ids"][i, 0, : len(ids)].tolist() == ids
        assert batch["input_ids"][i, 1, : len(ids)].tolist() == ids
        assert batch["mlm_attention_mask"][i].sum() == len(ids)


def test_text_features_match_input_id_features(tokenizer):
    by_text = ContrastiveDataCollator(tokenizer, augmentation="dropout", seed=4)([{"text": t} for t in SENTENCES])
    by_ids = ContrastiveDataCollator(tokenizer, augmentation="dropout", seed=4)(_features(tokenizer))
    assert_same_batch(by_text, by_ids)


def test_pad_to_multiple_of_in_collator(del_tokenizer):
    batch = ContrastiveDataCollator(del_tokenizer, pad_to_multiple_of=8, seed=0)(_features(del_tokenizer))
    assert batch["input_ids"].shape[-1] % 8 == 0
    assert batch["mlm_input_ids"].shape[-1] % 8 == 0
    longest = max(len(feature["input_ids"]) for feature in _features(del_tokenizer))
    assert batch["mlm_input_ids"].shape[-1] == -(-longest // 8) * 8


def test_same_seed_same_batches(del_tokenizer):
    features = _features(del_tokenizer)
    first = ContrastiveDataCollator(del_tokenizer, seed=123)
    second = ContrastiveDataCollator(del_tokenizer, seed=123)
    for _ in range(3):  # the generators advance identically from call to call
        assert_same_batch(first(features), second(features))


def test_different_seeds_differ(del_tokenizer):
    features = _features(del_tokenizer)
    a = ContrastiveDataCollator(del_tokenizer, seed=1)(features)
    b = ContrastiveDataCollator(del_tokenizer, seed=2)(features)
    assert not torch.equal(a["input_ids"], b["input_ids"])  # False for different shapes too
    assert not torch.equal(a["mlm_labels"], b["mlm_labels"])


def test_same_epoch_same_views_and_a_new_epoch_new_views(del_tokenizer):
    features = _features(del_tokenizer)
    collator = ContrastiveDataCollator(del_tokenizer, seed=7)
    first, again = collator(features), collator(features)
    assert_same_batch(first, again)  # every draw is a function of (seed, epoch, example, view)
    collator.set_epoch(1)
    second = collator(features)
    assert not torch.equal(first["mlm_labels"], second["mlm_labels"])
    changed = sum(
        not torch.equal(first["input_ids"][i, v], second["input_ids"][i, v])
        for i in range(len(features))
        for v in (0, 1)
    )
    assert changed >= 2 * len(features) - 2
    collator.set_epoch(0)
    assert_same_batch(first, collator(features))


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


def test_missing_mask_token_with_mlm_raises(del_tokenizer):
    del_tokenizer.mask_token = None
    assert del_tokenizer.mask_token is None
    with pytest.raises(ValueError, match="mask token"):
        ContrastiveDataCollator(del_tokenizer, mlm=True)
    # without MLM the same tokenizer is fine
    batch = ContrastiveDataCollator(del_tokenizer, mlm=False, seed=0)(_features(del_tokenizer))
    assert "mlm_labels" not in batch


def test_missing_pad_token_raises(tokenizer):
    tokenizer.pad_token = None
    with pytest.raises(ValueError, match="pad token"):
        ContrastiveDataCollator(tokenizer, augmentation="dropout")


def test_features_without_ids_or_text_raise(tokenizer):
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", seed=0)
    with pytest.raises(ValueError, match="input_ids"):
        collator([{"sentence": "hello"}, {"sentence": "world"}])


def grouped_windows(tokenizer, sentences, length: int) -> list[dict]:
    """run_mlm.py's default (``group_texts``): every text tokenized, concatenated and cut into windows."""
    stream = [token for sentence in sentences for token in tokenizer(sentence)["input_ids"]]
    return [{"input_ids": stream[start : start + length]} for start in range(0, len(stream) - length + 1, length)]


def test_windows_cut_from_concatenated_texts_are_refused_with_the_fix(del_tokenizer):
    collator = ContrastiveDataCollator(del_tokenizer, seed=0)
    windows = grouped_windows(del_tokenizer, SENTENCES, 12)
    with pytest.raises(ValueError, match="do not start with \\[CLS\\]") as error:
        collator(windows)
    assert "--line_by_line true" in str(error.value) and "tokenize_corpus" in str(error.value)
    assert f"{len(windows) - 1} of the {len(windows)} examples" in str(error.value)  # the first window is a sentence's


def test_sentences_and_framed_blocks_are_taken(del_tokenizer):
    from contrastive_hf.data.tokenizing import tokenize_corpus

    collator = ContrastiveDataCollator(del_tokenizer, seed=0)
    blocks = tokenize_corpus(Dataset.from_dict({"text": SENTENCES}), del_tokenizer, 12, line_by_line=False)
    assert len(blocks) > 2 and collator(list(blocks))["input_ids"].shape[0] == len(blocks)  # each block framed
    assert collator(_features(del_tokenizer))["input_ids"].shape[0] == len(SENTENCES)
    assert collator([{"text": text} for text in SENTENCES])["input_ids"].shape[0] == len(SENTENCES)


def test_num_views_must_be_positive(tokenizer):
    with pytest.raises(ValueError, match="num_views"):
        ContrastiveDataCollator(tokenizer, augmentation="dropout", num_views=0)


def test_del_word_without_del_token_raises(tokenizer):
    with pytest.raises(ValueError, match="add_del_token"):
        ContrastiveDataCollator(tokenizer, augmentation="del_word")


@pytest.mark.parametrize("max_length", [0, 1, 2])
def test_a_max_length_that_keeps_no_word_is_refused(tokenizer, max_length):
    # [CLS] and [SEP] take 2 tokens: every example would be "[CLS] [SEP]" (issue 13: train_loss 0, exit 0)
    message = rf"max_length={max_length} \(--max_seq_length\) leaves no room for words: .* 2 special tokens "
    message += r"\(\[CLS\] \[SEP\]\).* Set it to at least 3"
    with pytest.raises(ValueError, match=message):
        ContrastiveDataCollator(tokenizer, augmentation="dropout", max_length=max_length)
    with pytest.raises(ValueError, match=message):
        PairCollator(tokenizer, max_length=max_length)
    assert content_room(tokenizer, 3) == 1  # one word is little, but it can be learned from
    ContrastiveDataCollator(tokenizer, augmentation="dropout", max_length=3)


@pytest.mark.parametrize(
    "augmentation,probability,max_length",
    [
        ("del_word", 1.0, None),
        ("del_word", 1.0, 32),
        ("subs+del_word", 1.0, 32),
        ("del_word,reorder", 1.0, 32),  # half the views would be [DEL] alone
        ("del_word", 0.99, 32),  # round(0.99 * n) = n for every n <= 30 content tokens
    ],
)
def test_word_deletion_that_deletes_every_token_is_refused(del_tokenizer, augmentation, probability, max_length):
    message = rf"del_word_probability={probability} deletes every token of every sentence.* \[DEL\].* CLEAR's 0.7"
    with pytest.raises(ValueError, match=message):
        ContrastiveDataCollator(
            del_tokenizer,
            augmentation=augmentation,
            view_settings={"del_word_probability": probability},
            max_length=max_length,
            synonyms={"fox": ["wolf"]},
        )


@pytest.mark.parametrize(("probability", "max_length", "content"), [(0.99, 128, 60), (0.9, 32, 30)])
def test_high_deletion_ratios_that_keep_a_word_of_long_sentences_are_allowed(del_tokenizer, probability, max_length,
                                                                             content):  # fmt: skip
    # 0.99 keeps a token of sentences over 50 tokens: refused only when max_length rules those out
    collator = ContrastiveDataCollator(
        del_tokenizer,
        augmentation="del_word",
        view_settings={"del_word_probability": probability},
        max_length=max_length,
        seed=0,
    )
    words = np.random.default_rng(3).integers(1000, 8000, size=(8, content)).tolist()  # ordinary vocabulary ids
    batch = collator([{"input_ids": [del_tokenizer.cls_token_id, *row, del_tokenizer.sep_token_id]} for row in words])
    special = torch.tensor(del_tokenizer.all_special_ids)  # [DEL] included
    kept = (~torch.isin(batch["input_ids"], special) & batch["attention_mask"].bool()).sum(-1)  # (B, views)
    assert (kept >= 1).all(), kept  # every view of every sentence keeps a word
    assert (kept <= content - round(probability * content) + 1).all(), kept  # and the ratio was applied


# ----------------------------------------------------------------------------------------------------
# Example identities: a sentence's views do not depend on its batch
# ----------------------------------------------------------------------------------------------------


def test_example_index_decides_the_views_wherever_the_example_is(del_tokenizer):
    features = [dict(feature, example_index=100 + i) for i, feature in enumerate(_features(del_tokenizer))]
    collator = ContrastiveDataCollator(del_tokenizer, augmentation="del_span+reorder", seed=5)
    batch = collator(features)
    order = [3, 0, 5, 1]
    shuffled = collator([features[i] for i in order])
    for row, source in enumerate(order):
        n = int(shuffled["attention_mask"][row, 0].sum())
        assert torch.equal(shuffled["input_ids"][row, :, :n], batch["input_ids"][source, :, :n])
        m = int(shuffled["mlm_attention_mask"][row].sum())
        assert torch.equal(shuffled["mlm_labels"][row, :m], batch["mlm_labels"][source, :m])
    # the same sentence under another index gets other views
    other = collator([dict(features[0], example_index=7)])
    assert not torch.equal(other["mlm_labels"][0], batch["mlm_labels"][0, : other["mlm_labels"].shape[1]])


def test_without_an_index_the_token_ids_identify_the_example(del_tokenizer):
    features = _many_features(del_tokenizer, count=8, seed=4)
    collator = ContrastiveDataCollator(del_tokenizer, seed=1)
    batch = collator(features)
    alone = collator([features[5]])
    n = int(alone["attention_mask"][0, 0].sum())
    assert torch.equal(alone["input_ids"][0, :, :n], batch["input_ids"][5, :, :n])
    twice = collator([features[2], features[2]])  # a duplicate gets the same draws
    assert torch.equal(twice["input_ids"][0], twice["input_ids"][1])


# ----------------------------------------------------------------------------------------------------
# Every augmentation of CLEAR's tables through the public API, into the model
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clear_setup():
    from transformers import AutoTokenizer

    from conftest import DEMO_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    add_del_token(tokenizer)
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    return tokenizer, model


@pytest.mark.parametrize("name", [*CLEAR_AUGMENTATIONS, "dropout", "del_word,subs+del_span"])
def test_each_augmentation_builds_batches_the_model_trains_on(clear_setup, name):
    tokenizer, model = clear_setup
    # subs uses the built-in source: nearest neighbours in the model's own input embeddings
    collator = ContrastiveDataCollator(tokenizer, augmentation=name, synonyms=model, max_length=24, seed=0)
    features = [{"text": text} for text in SENTENCES]
    batch = collator(features)
    assert batch["input_ids"].shape[:2] == (len(SENTENCES), 2)
    assert batch["input_ids"].shape[-1] <= 24
    originals = [tokenizer(text, truncation=True, max_length=24)["input_ids"] for text in SENTENCES]
    del_id = tokenizer.convert_tokens_to_ids("[DEL]")
    for i, original in enumerate(originals):
        for v in range(2):
            view = batch["input_ids"][i, v, : int(batch["attention_mask"][i, v].sum())].tolist()
            assert view[0] == tokenizer.cls_token_id and view[-1] == tokenizer.sep_token_id
            if name == "dropout":
                assert view == original
            if "del" not in name:
                assert del_id not in view
            if name == "reorder":
                assert sorted(view) == sorted(original)
    output = model(**batch)
    assert torch.isfinite(output.loss) and output.cl_loss is not None and output.mlm_loss is not None
    output.loss.backward()
    model.zero_grad()


def test_a_list_of_augmentations_is_a_mixture(del_tokenizer):
    collator = ContrastiveDataCollator(del_tokenizer, augmentation=["del_word", "reorder"], seed=0)
    assert isinstance(collator.augmentation, Mixture) and collator.augmentation.name == "del_word,reorder"
    batch = collator(_many_features(del_tokenizer, count=64, seed=9))
    del_id = del_tokenizer.convert_tokens_to_ids("[DEL]")
    with_del = (batch["input_ids"] == del_id).any(-1)  # (B, V)
    assert 0.3 < with_del.float().mean().item() < 0.7  # each view draws its augmentation
    assert (with_del[:, 0] != with_del[:, 1]).any()  # two views of one sentence may differ in kind


def test_views_lengthened_by_substitution_are_cut_to_max_length(tokenizer):
    table = {"fox": ["unbelievably quick animal"], "dog": ["extraordinarily lazy animal"]}
    text = "the quick brown fox jumps over the lazy dog"
    length = len(tokenizer(text)["input_ids"])
    collator = ContrastiveDataCollator(
        tokenizer, augmentation="subs", synonyms=table, mlm=False, max_length=length, seed=0
    )
    collator.augmentation.probability = 1.0
    batch = collator([{"text": text}])
    assert batch["input_ids"].shape[-1] == length
    view = batch["input_ids"][0, 0].tolist()
    assert view[-1] == tokenizer.sep_token_id and view[0] == tokenizer.cls_token_id
    assert "animal" in tokenizer.decode(view)
    longer = ContrastiveDataCollator(tokenizer, augmentation="subs", synonyms=table, mlm=False, seed=0)
    longer.augmentation.probability = 1.0
    assert longer([{"text": text}])["input_ids"].shape[-1] > length


# ----------------------------------------------------------------------------------------------------
# mask_tokens
# ----------------------------------------------------------------------------------------------------


def test_mask_tokens_draws_per_row_and_keeps_specials(tokenizer):
    features = _many_features(tokenizer, count=64, seed=6)
    table = special_token_table(tokenizer)
    batch = TokenBatch.from_sequences([f["input_ids"] for f in features], table, tokenizer.pad_token_id)
    keys = example_keys(0, 0, np.arange(64, dtype=np.uint64), 2**32)
    ids, labels = mask_tokens(batch, keys, 0.3, tokenizer.mask_token_id, len(tokenizer))
    assert ((labels == -100) | ~batch.is_special).all()
    assert (ids[batch.is_special] == batch.ids[batch.is_special]).all()
    assert (labels[labels != -100] == batch.ids[labels != -100]).all()
    assert ids.min() >= 0 and ids.max() < len(tokenizer)
    rate = (labels != -100).sum() / (~batch.is_special).sum()
    assert 0.26 < rate < 0.34
    alone_ids, alone_labels = mask_tokens(batch.take(np.array([9])), keys[[9]], 0.3, tokenizer.mask_token_id, 100)
    n = int(batch.lengths[9])
    assert (alone_labels[0, :n] == labels[9, :n]).all()


# ----------------------------------------------------------------------------------------------------
# Supervised pairs and triplets
# ----------------------------------------------------------------------------------------------------

SNLI = DEMO_DATA / "nli_sample.csv"


def test_nli_triplets_from_the_real_snli_sample(tokenizer):
    rows = load_corpus(str(SNLI)).select(range(16))
    assert rows.column_names == ["sent0", "sent1", "hard_neg"]
    collator = PairCollator(tokenizer, max_length=32)
    features = list(rows)
    batch = collator(features)
    assert batch["input_ids"].shape[:2] == (16, 3)
    for i, row in enumerate(features):
        for v, column in enumerate(("sent0", "sent1", "hard_neg")):
            expected = tokenizer(row[column], truncation=True, max_length=32)["input_ids"]
            n = int(batch["attention_mask"][i, v].sum())
            assert batch["input_ids"][i, v, :n].tolist() == expected
            assert (batch["input_ids"][i, v, n:] == tokenizer.pad_token_id).all()
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer)), contrastive_loss="info_nce", mlm_weight=0.0
        )  # fmt: skip
    )
    output = model(**batch)
    assert torch.isfinite(output.cl_loss) and output.embeddings.shape[:2] == (16, 3)


def test_pairs_named_anchor_positive_and_pre_tokenized(tokenizer):
    features = [
        {"anchor": "a man plays a guitar", "positive": "someone is playing music"},
        {"anchor": [2, 500, 501, 3], "positive": "two dogs run"},
    ]
    collator = PairCollator(tokenizer, mlm=True, seed=0)
    batch = collator(features)
    assert batch["input_ids"].shape[:2] == (2, 2)
    assert batch["input_ids"][1, 0, :4].tolist() == [2, 500, 501, 3]
    assert batch["mlm_input_ids"].shape[0] == 2  # the anchors' MLM copy
    assert collator.resolve_columns({"sent0": "a", "sent1": "b", "hard_neg": ""}) == ("sent0", "sent1")
    assert PairCollator(tokenizer, columns=["premise", "hypothesis"]).resolve_columns(
        {"premise": "a", "hypothesis": "b"}
    ) == ("premise", "hypothesis")


def test_pair_collator_errors(tokenizer):
    collator = PairCollator(tokenizer)
    with pytest.raises(ValueError, match="anchor,positive,hard_negative or sent0,sent1,hard_neg"):
        collator([{"text": "no pair here"}])
    with pytest.raises(ValueError, match="Example 1 of the batch has no 'hard_neg'"):
        collator([{"sent0": "a", "sent1": "b", "hard_neg": "c"}, {"sent0": "a", "sent1": "b", "hard_neg": None}])
    with pytest.raises(ValueError, match="columns"):
        PairCollator(tokenizer, columns=["only"])
    with pytest.raises(ValueError, match="not in the features"):
        PairCollator(tokenizer, columns=["a", "b"])([{"a": "x"}])


def test_supervised_triplets_train_with_contrastive_trainer(tokenizer, tmp_path):
    rows = load_corpus(str(SNLI)).select(range(32))
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer)),
            contrastive_loss="info_nce",
            mlm_weight=0.0,
            hard_negative_weight=0.0,
        )  # fmt: skip
    )
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, max_steps=2, learning_rate=1e-3, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=rows, data_collator=PairCollator(tokenizer), processing_class=tokenizer
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "cl_loss" in entry]
    assert len(logged) == 2 and all(entry["cl_loss"] > 0 for entry in logged)


# ----------------------------------------------------------------------------------------------------
# The epoch callback
# ----------------------------------------------------------------------------------------------------


def test_epoch_callback_counts_epochs_from_the_trainer_state(del_tokenizer, caplog):
    collator = ContrastiveDataCollator(del_tokenizer, seed=0)
    callback = CollatorEpochCallback(collator)
    args = SimpleNamespace(dataloader_persistent_workers=False, dataloader_num_workers=0)
    callback.on_train_begin(args, SimpleNamespace(epoch=0.0), None)
    seen = []
    for epoch_progress in (0.0, 1.0, 2.0):
        callback.on_epoch_begin(args, SimpleNamespace(epoch=epoch_progress), None)
        seen.append(collator.epoch)
    assert seen == [0, 1, 2]
    # resumed mid-epoch 3 (state loaded from the checkpoint), then the next epoch
    callback.on_train_begin(args, SimpleNamespace(epoch=3.25), None)
    callback.on_epoch_begin(args, SimpleNamespace(epoch=3.25), None)
    assert collator.epoch == 3
    callback.on_epoch_begin(args, SimpleNamespace(epoch=3.01), None)  # an iterable dataset's epoch drifts
    assert collator.epoch == 4
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.data.collators"):
        callback.on_train_begin(
            SimpleNamespace(dataloader_persistent_workers=True, dataloader_num_workers=2),
            SimpleNamespace(epoch=0),
            None,
        )
    assert "persistent" in caplog.text


def test_contrastive_trainer_tells_the_collator_the_epoch(del_tokenizer, tmp_path):
    class Recording(ContrastiveDataCollator):
        def __call__(self, features):
            self.epochs_seen = [*getattr(self, "epochs_seen", []), self.epoch]
            return super().__call__(features)

    collator = Recording(del_tokenizer, augmentation="del_word", max_length=16, seed=0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(del_tokenizer))))
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_train_epochs=3, report_to="none",
        save_strategy="no", disable_tqdm=True, use_cpu=True, logging_steps=100,
    )  # fmt: skip
    dataset = Dataset.from_dict({"text": SENTENCES[:4]})
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=del_tokenizer
    )
    assert any(isinstance(callback, CollatorEpochCallback) for callback in trainer.callback_handler.callbacks)
    trainer.train()
    assert collator.epochs_seen == [0, 1, 2]


def test_a_model_given_as_synonym_source_is_compiled_not_kept(clear_setup):
    from contrastive_hf.data.synonyms import TokenSynonyms

    tokenizer, model = clear_setup
    with_subs = ContrastiveDataCollator(tokenizer, augmentation=["del_word", "subs+reorder"], synonyms=model, seed=0)
    assert isinstance(with_subs.synonyms, TokenSynonyms)  # picklable arrays for dataloader workers, no model
    assert with_subs.synonyms.source == "input embeddings"
    without = ContrastiveDataCollator(tokenizer, augmentation="del_word", synonyms=model, seed=0)
    assert without.synonyms is None
