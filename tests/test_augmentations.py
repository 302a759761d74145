"""Token-level augmentations: CLEAR's word deletion, SimCSE's identity view, and the [DEL] token plumbing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertConfig

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.augmentations import (
    AUGMENTATION_NAMES,
    DEL_TOKEN,
    Identity,
    WordDeletion,
    add_del_token,
    build_augmentation,
)

DEL = 9999
CLS, SEP = 2, 3


def _deleted_positions(original: list[int], is_special: list[bool], output: list[int], del_id: int) -> list[int]:
    """Recover which positions of ``original`` (distinct ids) were deleted, checking the output's structure.

    The output must be the original with some non-special positions removed, each maximal run of removed positions
    replaced by exactly one ``del_id``. Returns the removed positions; fails the test otherwise.
    """
    assert len(set(original)) == len(original), "helper needs distinct ids"
    assert del_id not in original
    position = {token: index for index, token in enumerate(original)}
    kept = [position[token] for token in output if token != del_id]
    assert all(token in position for token in output if token != del_id), "output has ids not in the input"
    assert kept == sorted(kept), "kept tokens are not a subsequence of the input in order"
    deleted = sorted(set(range(len(original))) - set(kept))
    for index in deleted:
        assert not is_special[index], f"special token at position {index} was deleted"
    # rebuild the expected output from the deletion set, one [DEL] per run of consecutive deleted positions
    expected = []
    for index, token in enumerate(original):
        if index in deleted:
            if index == 0 or (index - 1) not in deleted:
                expected.append(del_id)
        else:
            expected.append(token)
    assert output == expected, f"output {output} is not the merged-deletion view {expected}"
    return deleted


def _sentence(n: int) -> tuple[list[int], np.ndarray]:
    ids = [CLS] + [100 + i for i in range(n)] + [SEP]
    return ids, np.array([True] + [False] * n + [True])


# ----------------------------------------------------------------------------------------------------
# WordDeletion
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 10, 17])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_word_deletion_structure_and_count(n, p):
    ids, special = _sentence(n)
    augmentation = WordDeletion(del_token_id=DEL, probability=p)
    rng = np.random.default_rng(0)
    for _ in range(20):
        out = augmentation.augment(ids, special, rng)
        assert isinstance(out, list)
        assert out[0] == CLS and out[-1] == SEP
        assert len(out) >= 3  # never empty between the specials
        deleted = _deleted_positions(ids, special.tolist(), out, DEL)
        assert len(deleted) == int(round(p * n))
        assert all(not (a == DEL and b == DEL) for a, b in zip(out, out[1:], strict=False))


def test_word_deletion_does_not_mutate_input():
    ids, special = _sentence(8)
    before = list(ids)
    WordDeletion(DEL, 0.5).augment(ids, special, np.random.default_rng(0))
    assert ids == before


def test_word_deletion_p0_identity():
    ids, special = _sentence(9)
    assert WordDeletion(DEL, 0.0).augment(ids, special, np.random.default_rng(1)) == ids


@pytest.mark.parametrize("n", [1, 4, 12])
def test_word_deletion_p1_single_del(n):
    ids, special = _sentence(n)
    assert WordDeletion(DEL, 1.0).augment(ids, special, np.random.default_rng(2)) == [CLS, DEL, SEP]


def test_word_deletion_never_empty_without_specials():
    ids = [11, 12, 13]
    assert WordDeletion(DEL, 1.0).augment(ids, np.zeros(3, dtype=bool), np.random.default_rng(3)) == [DEL]


def test_word_deletion_specials_in_the_middle_stay_put():
    ids = [CLS, 10, 11, SEP, 12, 13, SEP]
    special = np.array([True, False, False, True, False, False, True])
    out = WordDeletion(DEL, 1.0).augment(ids, special, np.random.default_rng(4))
    assert out == [CLS, DEL, SEP, DEL, SEP]  # runs split by a special token are two runs


def test_word_deletion_all_special_is_identity():
    ids = [CLS, SEP]
    assert WordDeletion(DEL, 0.7).augment(ids, np.array([True, True]), np.random.default_rng(5)) == ids


def test_word_deletion_positions_are_random():
    """Every non-special position is sometimes deleted and sometimes kept, at roughly the rate p."""
    n, p, draws = 10, 0.5, 400
    ids, special = _sentence(n)
    augmentation = WordDeletion(DEL, p)
    rng = np.random.default_rng(6)
    counts = np.zeros(len(ids))
    for _ in range(draws):
        for index in _deleted_positions(ids, special.tolist(), augmentation.augment(ids, special, rng), DEL):
            counts[index] += 1
    assert counts[0] == counts[-1] == 0
    rates = counts[1:-1] / draws
    assert np.all(rates > 0.35) and np.all(rates < 0.65), rates


def test_word_deletion_same_seed_same_view():
    ids, special = _sentence(15)
    augmentation = WordDeletion(DEL, 0.5)
    a = [augmentation.augment(ids, special, rng) for rng in [np.random.default_rng(7)] * 5]
    b = [augmentation.augment(ids, special, rng) for rng in [np.random.default_rng(7)] * 5]
    assert a == b
    assert len({tuple(view) for view in a}) > 1


@pytest.mark.parametrize("p", [-0.1, 1.01, 2.0, float("nan")])
def test_word_deletion_invalid_probability(p):
    with pytest.raises(ValueError, match="probability"):
        WordDeletion(DEL, p)


@st.composite
def _sentences(draw):
    ids = draw(st.lists(st.integers(min_value=0, max_value=5000), unique=True, max_size=40))
    special = draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    return ids, special


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    sentence=_sentences(),
    p=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_word_deletion_property(sentence, p, seed):
    ids, special = sentence
    out = WordDeletion(DEL, p).augment(ids, np.array(special, dtype=bool), np.random.default_rng(seed))
    deleted = _deleted_positions(ids, special, out, DEL)
    n = sum(not flag for flag in special)
    assert len(deleted) == int(round(p * n))
    # specials keep their relative order and are all there
    assert [token for token in out if token != DEL and special[ids.index(token)]] == [
        token for token, flag in zip(ids, special, strict=True) if flag
    ]
    assert all(not (a == DEL and b == DEL) for a, b in zip(out, out[1:], strict=False))
    if ids:
        assert out, "a non-empty sentence gave an empty view"


# ----------------------------------------------------------------------------------------------------
# Identity
# ----------------------------------------------------------------------------------------------------


def test_identity_returns_same_ids():
    ids = (2, 50, 51, 3)
    rng = np.random.default_rng(0)
    out = Identity().augment(ids, np.array([True, False, False, True]), rng)
    assert out == list(ids)
    assert isinstance(out, list)
    listed = [2, 7, 3]
    again = Identity().augment(listed, np.array([True, False, True]), rng)
    assert again == listed and again is not listed
    assert Identity().name == "dropout"


# ----------------------------------------------------------------------------------------------------
# build_augmentation / add_del_token
# ----------------------------------------------------------------------------------------------------


def test_build_augmentation_dropout(tokenizer):
    assert isinstance(build_augmentation("dropout", tokenizer), Identity)


def test_build_augmentation_del_word(tokenizer):
    del_id = add_del_token(tokenizer)
    augmentation = build_augmentation("del_word", tokenizer, del_word_probability=0.3)
    assert isinstance(augmentation, WordDeletion)
    assert augmentation.del_token_id == del_id
    assert augmentation.probability == 0.3


def test_build_augmentation_unknown_name(tokenizer):
    with pytest.raises(ValueError) as error:
        build_augmentation("swap_words", tokenizer)
    message = str(error.value)
    assert "swap_words" in message
    for name in AUGMENTATION_NAMES:
        assert name in message


def test_build_augmentation_del_word_without_del_token(tokenizer):
    assert DEL_TOKEN not in tokenizer.get_vocab()
    with pytest.raises(ValueError, match="add_del_token"):
        build_augmentation("del_word", tokenizer)


def _tiny_model(vocab_size: int) -> ContrastiveForPreTraining:
    encoder = BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37
    )
    return ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder))


def test_add_del_token_once(tokenizer):
    size = len(tokenizer)
    del_id = add_del_token(tokenizer)
    assert len(tokenizer) == size + 1
    assert tokenizer.convert_ids_to_tokens(del_id) == DEL_TOKEN
    assert del_id in tokenizer.all_special_ids  # so collators never delete or mask it
    assert add_del_token(tokenizer) == del_id
    assert len(tokenizer) == size + 1
    # it is one token in text, never split into word pieces
    encoded = tokenizer("hello [DEL] world")["input_ids"]
    assert encoded.count(del_id) == 1


def test_add_del_token_keeps_existing_additional_special_tokens(tokenizer):
    """Adding [DEL] must not demote the tokenizer's other additional special tokens to ordinary tokens.

    If it did, the collator (which reads ``all_special_ids``) would delete and MLM-mask them.
    """
    tokenizer.add_special_tokens({"additional_special_tokens": ["[FOO]"]})
    foo_id = tokenizer.convert_tokens_to_ids("[FOO]")
    assert foo_id in tokenizer.all_special_ids
    add_del_token(tokenizer)
    assert foo_id in tokenizer.all_special_ids, (
        "SRC BUG (augmentations.add_del_token): tokenizer.add_special_tokens({'additional_special_tokens': "
        "['[DEL]']}) replaces the existing additional special tokens (replace_extra_special_tokens=True by "
        f"default), so '[FOO]' is no longer special: all_special_tokens={tokenizer.all_special_tokens}"
    )


def test_add_del_token_resizes_model(tokenizer):
    model = _tiny_model(len(tokenizer))
    old_embeddings = model.get_input_embeddings().weight.detach().clone()
    del_id = add_del_token(tokenizer, model)
    assert del_id == old_embeddings.shape[0]
    embeddings = model.get_input_embeddings().weight
    assert embeddings.shape == (len(tokenizer), 32)
    assert model.mlm_head.bias.shape == (len(tokenizer),)
    assert (embeddings[:del_id] == old_embeddings).all()
    # a second call changes nothing
    assert add_del_token(tokenizer, model) == del_id
    assert model.get_input_embeddings().weight.shape == (len(tokenizer), 32)


def test_add_del_token_never_shrinks_a_larger_model(tokenizer):
    model = _tiny_model(len(tokenizer) + 16)
    add_del_token(tokenizer, model)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer) + 15
