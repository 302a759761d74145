"""Token-level augmentations: CLEAR's word deletion, span deletion, reordering and synonym substitution, their
compositions and mixtures, SimCSE's identity view, and the [DEL] token plumbing.

Each augmentation is checked three ways: exact semantics on hand-made sentences, ratios over many draws, and
parity of the vectorised batch code with the slow per-sentence references of `augmentation_references` (hypothesis
property tests over random batches).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertConfig

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import (
    AUGMENTATION_NAMES,
    CLEAR_AUGMENTATIONS,
    DEL_TOKEN,
    Composition,
    Identity,
    Mixture,
    Reordering,
    SpanDeletion,
    SynonymSubstitution,
    WordDeletion,
    add_del_token,
    build_augmentation,
    needs_del_token,
)
from contrastive_hf.data.seeding import combine
from contrastive_hf.data.synonyms import TokenSynonyms
from contrastive_hf.data.token_batch import TokenBatch

import helpers.augmentation_references as reference

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


# ----------------------------------------------------------------------------------------------------
# Helpers for the new augmentations
# ----------------------------------------------------------------------------------------------------


def _views(augmentation, ids, special, draws, seed=0):
    rng = np.random.default_rng(seed)
    return [augmentation.augment(ids, special, rng) for _ in range(draws)]


def _content_runs(original: list[int], output: list[int], del_id: int) -> list[int]:
    """Lengths of the runs of deleted content tokens (each run one [DEL] in ``output``)."""
    special = [token in (CLS, SEP) for token in original]
    deleted = set(_deleted_positions(original, special, output, del_id))
    runs, length = [], 0
    for index in range(len(original)):
        if index in deleted:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return runs + ([length] if length else [])


# ----------------------------------------------------------------------------------------------------
# SpanDeletion
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "span", "spans"),
    [
        (1, 1, 0),  # a one-token sentence is left alone
        (2, 1, 1),
        (3, 1, 1),
        (10, 1, 2),  # 5% of 10 rounds to a one-token span; 2 of them keep the deleted share near 25%
        (20, 1, 5),
        (40, 2, 5),
        (100, 5, 5),  # CLEAR's setting: 5 spans of 5%
        (128, 6, 5),
    ],
)
def test_span_deletion_span_sizes_and_counts(n, span, spans):
    ids, special = _sentence(n)
    augmentation = SpanDeletion(DEL)
    assert augmentation.spans(np.array([n])) == (np.array([span]), np.array([spans]))
    for view in _views(augmentation, ids, special, 30):
        assert view[0] == CLS and view[-1] == SEP
        runs = _content_runs(ids, view, DEL)
        assert runs == [span] * spans  # each span is one run (spans never touch), each run one [DEL]
        assert view.count(DEL) == spans
        assert len(view) - 2 - spans == n - span * spans >= 1  # at least one token kept


def test_span_deletion_positions_are_spread_over_the_sentence():
    """Uniform placement of non-touching spans: every position can go, the middle more than the ends (fewer
    placements cover an end), symmetrically."""
    n, draws = 100, 3000
    ids, special = _sentence(n)
    batch = TokenBatch.from_rows([ids] * draws, [special.tolist()] * draws)
    views = SpanDeletion(DEL).apply(batch, np.arange(draws, dtype=np.uint64) * np.uint64(7919)).rows()
    counts = np.zeros(n)
    for view in views:
        counts += [token not in set(view) for token in ids[1:-1]]
    rates = counts / draws
    assert abs(rates.mean() - 0.25) < 1e-9  # exactly 25 of 100 tokens every time
    assert 0.03 < rates[0] < 0.11 and 0.03 < rates[-1] < 0.11
    assert rates[10:-10].min() > 0.2 and rates[10:-10].max() < 0.32
    assert np.abs(rates - rates[::-1]).max() < 0.05


def test_span_deletion_invalid_arguments():
    with pytest.raises(ValueError, match="num_spans"):
        SpanDeletion(DEL, num_spans=0)
    with pytest.raises(ValueError, match="span_ratio"):
        SpanDeletion(DEL, span_ratio=0.0)


# ----------------------------------------------------------------------------------------------------
# Reordering
# ----------------------------------------------------------------------------------------------------


def _source_ranks(original: list[int], view: list[int]) -> list[int]:
    """For distinct ids: the position in ``original`` each position of ``view`` took its token from."""
    position = {token: index for index, token in enumerate(original)}
    return [position[token] for token in view]


@pytest.mark.parametrize(
    ("n", "span", "pairs"), [(1, 1, 0), (2, 1, 1), (3, 1, 1), (20, 1, 5), (40, 2, 5), (100, 5, 5)]
)
def test_reordering_swaps_pairs_of_equal_spans(n, span, pairs):
    ids, special = _sentence(n)
    augmentation = Reordering()
    assert augmentation.spans(np.array([n])) == (np.array([span]), np.array([pairs]))
    for view in _views(augmentation, ids, special, 30):
        assert len(view) == len(ids) and view[0] == CLS and view[-1] == SEP
        source = _source_ranks(ids, view)
        assert sorted(source) == list(range(len(ids)))  # a permutation
        assert all(source[source[i]] == i for i in range(len(ids)))  # of pairwise swaps
        moved = [i for i in range(len(ids)) if source[i] != i]
        assert len(moved) == 2 * span * pairs  # distinct ids: every swapped token moves
        # moved positions come in runs of whole spans, each taking a run of s consecutive tokens
        for start in range(0, len(moved), span):
            block = moved[start : start + span] if span > 1 else [moved[start]]
            assert [source[i] - source[block[0]] for i in block] == list(range(len(block)))


def test_reordering_moves_every_position_sometimes():
    n, draws = 40, 400
    ids, special = _sentence(n)
    counts = np.zeros(n)
    for view in _views(Reordering(), ids, special, draws, seed=2):
        counts += [source != index for index, source in enumerate(_source_ranks(ids, view))][1:-1]
    rates = counts / draws
    assert abs(rates.mean() - 0.5) < 1e-9  # 10 spans of 2 tokens of 40, every time
    assert rates.min() > 0.25 and rates.max() < 0.75, (rates.min(), rates.max())


def test_reordering_keeps_special_tokens_in_place():
    ids = [CLS, 10, 11, 12, 13, SEP, 20, 21, 22, 23, SEP]
    special = [token in (CLS, SEP) for token in ids]
    for view in _views(Reordering(num_pairs=2, span_ratio=0.25), ids, special, 50):
        assert [view[i] for i in (0, 5, 10)] == [CLS, SEP, SEP]
        assert sorted(view) == sorted(ids)


# ----------------------------------------------------------------------------------------------------
# SynonymSubstitution (hand-made table on the demo WordPiece tokenizer)
# ----------------------------------------------------------------------------------------------------

TABLE = {
    "quick": ["fast", "speedy"],
    "unbelievably": ["incredibly"],
    "dog": ["hound"],
    "river": ["stream"],
    "lazy": ["idle"],
}
SENTENCE = "the unbelievably quick brown fox jumps over the lazy dog near the river bank"


def _word_texts(tokenizer, ids: list[int]) -> list[str]:
    """The words of an id sequence ('un ##be ##li ...' joined back into 'unbelievably')."""
    tokens = tokenizer.convert_ids_to_tokens(ids)
    words = []
    for token in tokens:
        if token.startswith("##") and words:
            words[-1] += token[2:]
        else:
            words.append(token)
    return words


def test_substitution_replaces_whole_words_by_their_synonyms(tokenizer):
    synonyms = TokenSynonyms.from_table(TABLE, tokenizer)
    ids = tokenizer(SENTENCE)["input_ids"]
    special = [token in tokenizer.all_special_ids for token in ids]
    original = _word_texts(tokenizer, ids)
    assert len(tokenizer.tokenize("unbelievably")) > 2  # a multi-piece word
    picked, chosen = Counter(), Counter()
    draws = 400
    for view in _views(SynonymSubstitution(synonyms), ids, special, draws, seed=3):
        words = _word_texts(tokenizer, view)
        assert len(words) == len(original)  # whole words in, whole words out (all synonyms are one word)
        changed = [(a, b) for a, b in zip(original, words, strict=True) if a != b]
        assert len(changed) == round(0.3 * 5)  # 5 words have synonyms: 2 substituted in every view
        for before, after in changed:
            assert after in TABLE[before]
            picked[before] += 1
            chosen[after] += 1
    assert set(picked) == set(TABLE)
    for word in TABLE:  # each of the 5 candidates is picked 2/5 of the time
        assert abs(picked[word] / draws - 0.4) < 0.08, picked
    assert abs(chosen["fast"] / (chosen["fast"] + chosen["speedy"]) - 0.5) < 0.12, chosen


def test_substitution_leaves_words_without_synonyms_and_special_tokens(tokenizer):
    synonyms = TokenSynonyms.from_table(TABLE, tokenizer)
    ids = tokenizer("brown fox jumps", "over the quick fox")["input_ids"]  # [CLS] a [SEP] b [SEP]
    special = [token in tokenizer.all_special_ids for token in ids]
    augmentation = SynonymSubstitution(synonyms, probability=1.0)
    original = _word_texts(tokenizer, ids)
    quick = original.index("quick")
    for view in _views(augmentation, ids, special, 20):
        words = _word_texts(tokenizer, view)
        assert words[quick] in ("fast", "speedy")  # the only word with a synonym, always picked
        assert words[:quick] + words[quick + 1 :] == original[:quick] + original[quick + 1 :]
        special_positions = [i for i, token in enumerate(view) if token in tokenizer.all_special_ids]
        assert special_positions == [0, ids.index(tokenizer.sep_token_id), len(view) - 1]
    assert SynonymSubstitution(synonyms, 0.0).augment(ids, special, np.random.default_rng(0)) == ids


def test_substitution_probability_is_checked(tokenizer):
    synonyms = TokenSynonyms.from_table(TABLE, tokenizer)
    with pytest.raises(ValueError, match="probability"):
        SynonymSubstitution(synonyms, probability=1.5)


# ----------------------------------------------------------------------------------------------------
# Parity of the vectorised batch code with the per-sentence references, over random batches
# ----------------------------------------------------------------------------------------------------

VOCAB = 70
DEL_ID = 65
# synthetic tokenizer: ids divisible by 3 are continuation pieces; words of one and of several pieces have
# replacements of 1 to 3 pieces
WORD_STARTS = np.array([token % 3 != 0 for token in range(VOCAB)])
ENTRIES = {
    (1,): [(2,), (4, 6)],
    (5,): [(7, 9, 12)],
    (8, 3): [(10,), (11, 15)],
    (13, 6, 9): [(14,)],
    (16,): [(17,), (19,), (20,)],
    (22, 24): [(23, 24)],
    (25,): [(26,)],
    (28,): [(29, 30)],
}
SYNONYMS = TokenSynonyms._compile(ENTRIES, WORD_STARTS, VOCAB, "test")


@st.composite
def _batches(draw):
    rows = draw(st.integers(min_value=1, max_value=5))
    token = st.one_of(st.integers(min_value=0, max_value=30), st.sampled_from([1, 5, 8, 3, 16, 22, 24]))
    sentences, flags, keys = [], [], []
    for _ in range(rows):
        ids = draw(st.lists(token, max_size=45))
        special = draw(
            st.lists(st.sampled_from([False, False, False, False, True]), min_size=len(ids), max_size=len(ids))
        )
        sentences.append(ids)
        flags.append(special)
        keys.append(draw(st.integers(min_value=0, max_value=2**64 - 1)))
    return sentences, flags, keys


REFERENCES = {
    "del_word": (WordDeletion(DEL_ID, 0.4), lambda i, s, k: reference.del_word(i, s, k, DEL_ID, 0.4)),
    "del_span": (SpanDeletion(DEL_ID), lambda i, s, k: reference.del_span(i, s, k, DEL_ID)),
    "del_span_big": (
        SpanDeletion(DEL_ID, num_spans=3, span_ratio=0.2),
        lambda i, s, k: reference.del_span(i, s, k, DEL_ID, 3, 0.2),
    ),
    "reorder": (Reordering(), reference.reorder),
    "reorder_big": (Reordering(num_pairs=2, span_ratio=0.2), lambda i, s, k: reference.reorder(i, s, k, 2, 0.2)),
    "subs": (
        SynonymSubstitution(SYNONYMS, 0.5),
        lambda i, s, k: reference.subs(i, s, k, WORD_STARTS, ENTRIES, 0.5),
    ),
}
REFERENCES["subs+del_span"] = (
    Composition([REFERENCES["subs"][0], REFERENCES["del_span_big"][0]]),
    lambda i, s, k: reference.compose([REFERENCES["subs"][1], REFERENCES["del_span_big"][1]], i, s, k),
)
REFERENCES["subs+del_word+reorder"] = (
    Composition([REFERENCES[name][0] for name in ("subs", "del_word", "reorder_big")]),
    lambda i, s, k: reference.compose([REFERENCES[name][1] for name in ("subs", "del_word", "reorder_big")], i, s, k),
)
REFERENCES["del_word,reorder"] = (
    Mixture([REFERENCES["del_word"][0], REFERENCES["reorder_big"][0]]),
    lambda i, s, k: reference.mixture([REFERENCES["del_word"][1], REFERENCES["reorder_big"][1]], i, s, k),
)


@pytest.mark.parametrize("name", sorted(REFERENCES))
@settings(max_examples=40, deadline=None, derandomize=True)
@given(batch=_batches())
def test_vectorised_batch_matches_reference(name, batch):
    sentences, flags, keys = batch
    augmentation, slow = REFERENCES[name]
    out = augmentation.apply(TokenBatch.from_rows(sentences, flags), np.array(keys, dtype=np.uint64))
    for row, (ids, special, key) in enumerate(zip(sentences, flags, keys, strict=True)):
        expected_ids, expected_special = slow(ids, special, key)
        length = int(out.lengths[row])
        assert out.ids[row, :length].tolist() == expected_ids, (name, row)
        assert out.is_special[row, :length].tolist() == expected_special, (name, row)
        # invariants: special tokens kept in order, a non-empty sentence gives a non-empty view
        kept_specials = [t for t, f in zip(ids, special, strict=True) if f]
        view_specials = [t for t, f in zip(expected_ids, expected_special, strict=True) if f and t != DEL_ID]
        assert view_specials == kept_specials
        if ids:
            assert length > 0


def test_a_view_does_not_depend_on_the_rest_of_the_batch(tokenizer):
    add_del_token(tokenizer)
    augmentation = build_augmentation("subs+del_word+reorder", tokenizer, synonyms=TABLE)
    texts = [SENTENCE, "a short one", "hello", SENTENCE + " and the dog ran along the river"]
    rows = [tokenizer(text)["input_ids"] for text in texts]
    special = [[token in tokenizer.all_special_ids for token in row] for row in rows]
    keys = np.array([11, 22, 33, 44], dtype=np.uint64)
    together = augmentation.apply(TokenBatch.from_rows(rows, special), keys).rows()
    alone = [augmentation.apply(TokenBatch.from_rows([r], [s]), keys[[i]]).rows()[0] for i, (r, s) in
             enumerate(zip(rows, special, strict=True))]  # fmt: skip
    assert together == alone


# ----------------------------------------------------------------------------------------------------
# Compositions, mixtures and names
# ----------------------------------------------------------------------------------------------------


def test_composition_applies_in_order_with_a_key_per_stage(tokenizer):
    add_del_token(tokenizer)
    augmentation = build_augmentation("subs+del_span", tokenizer, synonyms=TABLE)
    assert isinstance(augmentation, Composition) and augmentation.name == "subs+del_span"
    substitute, delete = augmentation.parts
    assert isinstance(substitute, SynonymSubstitution) and isinstance(delete, SpanDeletion)
    rows = [tokenizer(SENTENCE)["input_ids"]] * 3
    batch = TokenBatch.from_rows(rows, [[t in tokenizer.all_special_ids for t in rows[0]]] * 3)
    keys = np.array([1, 2, 3], dtype=np.uint64)
    by_hand = delete.apply(substitute.apply(batch, combine(keys, 0)), combine(keys, 1))
    assert augmentation.apply(batch, keys).rows() == by_hand.rows()


def test_mixture_draws_each_views_augmentation_from_the_set(tokenizer):
    add_del_token(tokenizer)
    augmentation = build_augmentation("del_word,reorder", tokenizer)
    assert isinstance(augmentation, Mixture) and augmentation.name == "del_word,reorder"
    picks = augmentation.pick(np.arange(2000, dtype=np.uint64) * np.uint64(7919))
    assert abs(picks.mean() - 0.5) < 0.04
    ids, special = tokenizer(SENTENCE)["input_ids"], None
    special = [token in tokenizer.all_special_ids for token in ids]
    views = _views(augmentation, ids, special, 200, seed=4)
    with_del = sum(tokenizer.convert_tokens_to_ids(DEL_TOKEN) in view for view in views)
    assert 60 < with_del < 140  # about half the views deleted words, the others were reordered (same length)
    assert all(len(view) == len(ids) for view in views if tokenizer.convert_tokens_to_ids(DEL_TOKEN) not in view)


@pytest.mark.parametrize("name", [*CLEAR_AUGMENTATIONS, "dropout"])
def test_every_clear_name_builds_and_keeps_the_rules(tokenizer, name):
    del_id = add_del_token(tokenizer)
    augmentation = build_augmentation(name, tokenizer, synonyms=TABLE)
    assert augmentation.name == name
    parts = name.split("+")
    built = augmentation.parts if isinstance(augmentation, Composition) else (augmentation,)
    assert [part.name for part in built] == parts
    assert needs_del_token(name) == any(part in ("del_word", "del_span") for part in parts)
    texts = [SENTENCE, "hello", "the dog", "", SENTENCE + " " + SENTENCE]
    rows = [tokenizer(text)["input_ids"] for text in texts]
    special = [[token in tokenizer.all_special_ids for token in row] for row in rows]
    out = augmentation.apply(TokenBatch.from_rows(rows, special), np.arange(5, dtype=np.uint64))
    for row, view in zip(rows, out.rows(), strict=True):
        assert view[0] == tokenizer.cls_token_id and view[-1] == tokenizer.sep_token_id
        assert len(view) >= 3 or row == view  # never empty between the special tokens
        assert view.count(tokenizer.cls_token_id) == 1 and view.count(tokenizer.sep_token_id) == 1
        if name == "dropout":
            assert view == row
        if "del" not in name:
            assert del_id not in view


def test_hyper_parameters_reach_the_augmentations(tokenizer):
    add_del_token(tokenizer)
    augmentation = build_augmentation(
        "subs+del_span+reorder",
        tokenizer,
        synonyms=TABLE,
        num_deleted_spans=3,
        num_reordered_pairs=2,
        span_ratio=0.1,
        substitution_probability=0.5,
    )
    substitute, delete, reorder = augmentation.parts
    assert substitute.probability == 0.5
    assert (delete.num_spans, delete.span_ratio) == (3, 0.1)
    assert (reorder.num_pairs, reorder.span_ratio) == (2, 0.1)
    defaults = build_augmentation("del_span+reorder", tokenizer)  # CLEAR §4.1
    assert (defaults.parts[0].num_spans, defaults.parts[0].span_ratio, defaults.parts[1].num_pairs) == (5, 0.05, 5)


def test_subs_without_a_synonym_source_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="synonym source") as error:
        build_augmentation("subs", tokenizer)
    assert "--synonyms_file" in str(error.value)


@pytest.mark.parametrize("name", ["del_span", "subs+del_span", "reorder,del_word"])
def test_deletions_need_the_del_token(tokenizer, name):
    with pytest.raises(ValueError, match="add_del_token"):
        build_augmentation(name, tokenizer, synonyms=TABLE)


@pytest.mark.parametrize("name", ["", "subs+", "del_word,,reorder", "del-word", "reorder+shuffle"])
def test_malformed_names_are_rejected(tokenizer, name):
    with pytest.raises(ValueError, match="augmentation"):
        build_augmentation(name, tokenizer, synonyms=TABLE)
    assert "del_word" in AUGMENTATION_NAMES and math.isfinite(len(AUGMENTATION_NAMES))
