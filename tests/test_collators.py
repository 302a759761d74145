"""ContrastiveDataCollator and pad_sequences: view tensors, the MLM copy, seeding and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contrastive_hf.augmentations import Identity, add_del_token
from contrastive_hf.collators import ContrastiveDataCollator, pad_sequences

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


def _assert_same_batch(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


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
    assert set(batch) == {"input_ids", "attention_mask", "mlm_input_ids", "mlm_attention_mask", "mlm_labels"}
    b = len(features)
    length = batch["input_ids"].shape[-1]
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (b, num_views, length)
    longest = max(len(feature["input_ids"]) for feature in features)
    assert batch["mlm_input_ids"].shape == (b, longest)
    assert batch["mlm_attention_mask"].shape == batch["mlm_labels"].shape == (b, longest)
    for key in batch:
        assert batch[key].dtype == torch.long, key
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
    assert set(batch) == {"input_ids", "attention_mask"}


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
    collator = ContrastiveDataCollator(del_tokenizer, augmentation="del_word", del_word_probability=0.5, seed=3)
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
    _assert_same_batch(by_text, by_ids)


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
        _assert_same_batch(first(features), second(features))


def test_different_seeds_differ(del_tokenizer):
    features = _features(del_tokenizer)
    a = ContrastiveDataCollator(del_tokenizer, seed=1)(features)
    b = ContrastiveDataCollator(del_tokenizer, seed=2)(features)
    assert not torch.equal(a["input_ids"], b["input_ids"])  # False for different shapes too
    assert not torch.equal(a["mlm_labels"], b["mlm_labels"])


def test_successive_calls_differ(del_tokenizer):
    features = _features(del_tokenizer)
    collator = ContrastiveDataCollator(del_tokenizer, seed=7)
    a, b = collator(features), collator(features)
    assert not torch.equal(a["mlm_labels"], b["mlm_labels"])


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


def test_num_views_must_be_positive(tokenizer):
    with pytest.raises(ValueError, match="num_views"):
        ContrastiveDataCollator(tokenizer, augmentation="dropout", num_views=0)


def test_del_word_without_del_token_raises(tokenizer):
    with pytest.raises(ValueError, match="add_del_token"):
        ContrastiveDataCollator(tokenizer, augmentation="del_word")
