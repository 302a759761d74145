"""TokenBatch and the ragged-array helpers, against plain-Python references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from contrastive_hf.data.token_batch import TokenBatch, ragged_arange, ragged_gather, row_of, special_token_table


@settings(max_examples=60, deadline=None, derandomize=True)
@given(lengths=st.lists(st.integers(min_value=0, max_value=6), max_size=8), data=st.data())
def test_ragged_helpers_match_python(lengths, data):
    source = np.arange(100, 150)
    starts = [data.draw(st.integers(min_value=0, max_value=50 - n)) for n in lengths]
    assert ragged_arange(np.array(lengths, dtype=np.int64)).tolist() == [i for n in lengths for i in range(n)]
    assert ragged_gather(source, np.array(starts), np.array(lengths)).tolist() == [
        int(source[s + i]) for s, n in zip(starts, lengths, strict=True) for i in range(n)
    ]
    assert row_of(np.array(lengths, dtype=np.int64)).tolist() == [r for r, n in enumerate(lengths) for _ in range(n)]


def test_from_sequences_lists_arrays_and_tensors(tokenizer):
    table = special_token_table(tokenizer)
    rows = [[2, 50, 51, 3], [2, 60, 3], [4]]
    for given_rows in (rows, [np.array(r) for r in rows], [torch.tensor(r) for r in rows]):
        batch = TokenBatch.from_sequences(given_rows, table, pad_id=0)
        assert batch.ids.tolist() == [[2, 50, 51, 3], [2, 60, 3, 0], [4, 0, 0, 0]]
        assert batch.lengths.tolist() == [4, 3, 1]
        # special tokens and padding are flagged: nothing may touch them
        assert batch.is_special.tolist() == [[True, False, False, True], [True, False, True, True], [True] * 4]
        assert batch.rows() == rows


def test_ids_outside_the_vocabulary_are_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match=r"Token id 99999 is outside the tokenizer's vocabulary \(size 8192\)"):
        TokenBatch.from_sequences([[2, 99999, 3]], special_token_table(tokenizer), 0)


def test_take_repeat_keep_and_stack():
    batch = TokenBatch.from_rows([[1, 2, 3], [4], [5, 6]], [[True, False, True], [False], [False, False]], pad_id=0)
    assert batch.repeat(2).rows() == [[1, 2, 3], [1, 2, 3], [4], [4], [5, 6], [5, 6]]
    taken = batch.take(np.array([1, 2]))
    assert taken.rows() == [[4], [5, 6]] and taken.width == 2
    kept = batch.keep(np.array([[True, False, True], [False, True, True], [True, True, False]]))
    assert kept.rows() == [[1, 3], [], [5, 6]]
    assert kept.is_special[0, :2].tolist() == [True, True]
    stacked = TokenBatch.stack([taken, batch.take(np.array([0]))], [np.array([0, 2]), np.array([1])], 3, pad_id=0)
    assert stacked.rows() == [[4], [1, 2, 3], [5, 6]]


def test_truncate_keeps_the_final_special_token():
    batch = TokenBatch.from_rows(
        [[2, 10, 11, 12, 13, 3], [2, 10, 11, 12], [2, 10, 3]],
        [[True, False, False, False, False, True], [True, False, False, False], [True, False, True]],
    )
    assert batch.truncate(4).rows() == [[2, 10, 11, 3], [2, 10, 11, 12], [2, 10, 3]]
    assert batch.truncate(4).is_special[0].tolist() == [True, False, False, True]
    assert batch.truncate(10) is batch


@pytest.mark.parametrize(("multiple", "width"), [(None, 3), (4, 4), (2, 4)])
def test_to_tensors(multiple, width):
    batch = TokenBatch.from_rows([[7, 8, 9], [5]], [[False] * 3, [False]], pad_id=-1)
    ids, mask = batch.to_tensors(multiple)
    assert ids.dtype == mask.dtype == torch.long
    assert ids.tolist() == [[7, 8, 9] + [-1] * (width - 3), [5] + [-1] * (width - 1)]
    assert mask.tolist() == [[1, 1, 1] + [0] * (width - 3), [1] + [0] * (width - 1)]
