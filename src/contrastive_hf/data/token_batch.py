"""`TokenBatch`: a batch of token-id sequences as padded numpy arrays, and the ragged-array helpers that the
vectorised augmentations and collators are built from (no Python loop over tokens anywhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

__all__ = ["TokenBatch", "ragged_arange", "ragged_gather", "row_of", "special_token_table", "ID_DTYPE"]

# Token ids inside the vectorised pipeline: int32 halves the memory every operation touches (vocabularies are far
# below 2**31); tensors handed to the model are int64.
ID_DTYPE = np.int32


def special_token_table(tokenizer, size: int | None = None) -> np.ndarray:
    """A boolean lookup table over token ids: True for the tokenizer's special tokens ([CLS], [SEP], [DEL]...)."""
    size = max(size or 0, len(tokenizer))
    table = np.zeros(size, dtype=bool)
    special = [token_id for token_id in tokenizer.all_special_ids if token_id is not None and token_id >= 0]
    table[special] = True
    return table


def ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])``, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)


def ragged_gather(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([source[s : s + n] for s, n in zip(starts, lengths)])``, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return source[np.repeat(np.asarray(starts, dtype=np.int64), lengths) + ragged_arange(lengths)]


def row_of(lengths: np.ndarray) -> np.ndarray:
    """For a flat concatenation of rows with these lengths, the row of each element."""
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


@dataclass
class TokenBatch:
    """``N`` token sequences, right-padded.

    Attributes:
        ids: ``(N, L)`` token ids (`ID_DTYPE`); positions at or after a row's length hold ``pad_id``.
        is_special: ``(N, L)`` bool; True for special tokens ([CLS], [SEP], [DEL]...) *and for padding*, the
            positions no augmentation may delete, move or substitute.
        lengths: ``(N,)`` int64 number of real tokens per row.
        pad_id: the padding id.
    """

    ids: np.ndarray
    is_special: np.ndarray
    lengths: np.ndarray
    pad_id: int = 0

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]], special_table: np.ndarray, pad_id: int) -> TokenBatch:
        """Pad id sequences (lists, numpy arrays or tensors); special tokens are looked up in ``special_table``."""
        lengths = np.fromiter((len(sequence) for sequence in sequences), dtype=np.int64, count=len(sequences))
        total = int(lengths.sum())
        if sequences and not isinstance(sequences[0], (list, tuple)):
            flat = np.concatenate([np.asarray(sequence, dtype=np.int64).reshape(-1) for sequence in sequences])
        else:
            flat = np.fromiter(chain.from_iterable(sequences), dtype=np.int64, count=total)
        if total and (flat.min() < 0 or flat.max() >= len(special_table)):
            bad = flat[(flat < 0) | (flat >= len(special_table))][0]
            raise ValueError(
                f"Token id {int(bad)} is outside the tokenizer's vocabulary (size {len(special_table)}): the "
                "input_ids were made with another tokenizer."
            )
        return cls.from_flat(flat, special_table[flat], lengths, pad_id)

    @classmethod
    def from_flat(cls, flat_ids: np.ndarray, flat_special: np.ndarray, lengths: np.ndarray, pad_id: int):
        """Rows given as one flat concatenation (``flat_ids``, ``flat_special``) and their ``lengths``."""
        lengths = np.asarray(lengths, dtype=np.int64)
        width = int(lengths.max()) if len(lengths) else 0
        ids = np.full((len(lengths), width), pad_id, dtype=ID_DTYPE)
        is_special = np.ones((len(lengths), width), dtype=bool)
        valid = np.arange(width) < lengths[:, None]  # (N, L): row-major order matches the flat concatenation
        ids[valid] = flat_ids
        is_special[valid] = flat_special
        return cls(ids, is_special, lengths, pad_id)

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], special_rows: Sequence[Sequence[bool]], pad_id: int = 0):
        """Rows with explicit special-token flags (no tokenizer needed)."""
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        flags = np.fromiter(chain.from_iterable(special_rows), dtype=bool, count=int(lengths.sum()))
        return cls.from_flat(flat, flags, lengths, pad_id)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return self.ids.shape[1]

    @property
    def valid(self) -> np.ndarray:
        """``(N, L)`` True before each row's length."""
        return np.arange(self.width) < self.lengths[:, None]

    def rows(self) -> list[list[int]]:
        """The sequences as lists, without padding."""
        return [row[:length].tolist() for row, length in zip(self.ids, self.lengths, strict=True)]

    def take(self, rows: np.ndarray) -> TokenBatch:
        """A batch of the given rows (in that order), trimmed to their longest."""
        lengths = self.lengths[rows]
        width = int(lengths.max()) if len(lengths) else 0
        return TokenBatch(self.ids[rows, :width], self.is_special[rows, :width], lengths, self.pad_id)

    def repeat(self, times: int) -> TokenBatch:
        """Each row ``times`` times in a row: rows ``i * times ... i * times + times - 1`` are copies of row ``i``."""
        return self.take(np.repeat(np.arange(len(self)), times))

    def keep(self, keep: np.ndarray) -> TokenBatch:
        """Drop the positions where ``keep`` is False, closing the gaps (order preserved)."""
        keep = keep & self.valid
        return TokenBatch.from_flat(self.ids[keep], self.is_special[keep], keep.sum(axis=1), self.pad_id)

    def truncate(self, max_length: int) -> TokenBatch:
        """Cut rows longer than ``max_length``, keeping a final special token ([SEP], </s>) at the end."""
        if self.width <= max_length:
            return self
        ids, is_special = self.ids[:, :max_length].copy(), self.is_special[:, :max_length].copy()
        too_long = np.flatnonzero(self.lengths > max_length)
        last = self.lengths[too_long] - 1
        ends_special = self.is_special[too_long, last]
        rows, lasts = too_long[ends_special], last[ends_special]
        ids[rows, max_length - 1] = self.ids[rows, lasts]
        is_special[rows, max_length - 1] = True
        return TokenBatch(ids, is_special, np.minimum(self.lengths, max_length), self.pad_id)

    @staticmethod
    def stack(parts: Sequence[TokenBatch], rows: Sequence[np.ndarray], size: int, pad_id: int) -> TokenBatch:
        """Reassemble a batch of ``size`` rows from ``parts``, part ``k`` holding the rows ``rows[k]``."""
        width = max((part.width for part in parts), default=0)
        ids = np.full((size, width), pad_id, dtype=ID_DTYPE)
        is_special = np.ones((size, width), dtype=bool)
        lengths = np.zeros(size, dtype=np.int64)
        for part, indices in zip(parts, rows, strict=True):
            ids[indices, : part.width] = part.ids
            is_special[indices, : part.width] = part.is_special
            lengths[indices] = part.lengths
        longest = int(lengths.max(initial=0))
        return TokenBatch(ids[:, :longest], is_special[:, :longest], lengths, pad_id)

    def to_tensors(self, pad_to_multiple_of: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)`` long tensors of shape ``(N, L)``, L rounded up to ``pad_to_multiple_of``."""
        width = int(self.lengths.max(initial=0))
        if pad_to_multiple_of:
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        ids = np.full((len(self), width), self.pad_id, dtype=np.int64)  # torch's embedding lookups take int64
        shared = min(width, self.width)
        ids[:, :shared] = self.ids[:, :shared]
        mask = np.arange(width) < self.lengths[:, None]
        ids[~mask] = self.pad_id
        return torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64))
