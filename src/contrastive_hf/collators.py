"""Batch builders: raw or tokenized sentences in, the model's view tensors (and an MLM copy) out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .augmentations import Augmentation, build_augmentation

__all__ = ["ContrastiveDataCollator", "pad_sequences"]


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_token_id: int, pad_to_multiple_of: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into ``(input_ids, attention_mask)``, each ``(len(sequences), max_length)``."""
    length = max(len(sequence) for sequence in sequences)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    input_ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
        attention_mask[row, : len(sequence)] = 1
    return input_ids, attention_mask


@dataclass
class ContrastiveDataCollator:
    """Turns sentences into ``num_views`` augmented views each, plus an MLM-masked copy of the original.

    Each feature is a dict with ``input_ids`` (tokenized, special tokens included) or ``text`` (tokenized here).
    Every view of a sentence uses the same augmentation with an independent random draw (CLEAR §3.1).

    Returns a dict with ``input_ids`` and ``attention_mask`` of shape ``(batch, num_views, length)``, and when
    ``mlm`` is on, ``mlm_input_ids``, ``mlm_attention_mask`` and ``mlm_labels`` of shape ``(batch, mlm_length)``
    masked with transformers' own `DataCollatorForLanguageModeling` (15%, 80/10/10 by default).

    Args:
        tokenizer: the model's tokenizer (with [DEL] added for ``del_word``: see `augmentations.add_del_token`).
        augmentation: an `Augmentation` or its name (``"dropout"``, ``"del_word"``).
        num_views: views per sentence.
        mlm: also build the MLM copy (CLEAR's L_MLM).
        mlm_probability: fraction of tokens masked for MLM.
        del_word_probability: CLEAR's word-deletion ratio, used when ``augmentation="del_word"``.
        max_length: truncation length for ``text`` features.
        pad_to_multiple_of: pad lengths to a multiple of this (tensor-core friendly sizes on GPUs).
        seed: seeds the augmentation and masking generators, for reproducible batches.
    """

    tokenizer: PreTrainedTokenizerBase
    augmentation: Augmentation | str = "del_word"
    num_views: int = 2
    mlm: bool = True
    mlm_probability: float = 0.15
    del_word_probability: float = 0.7
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self):
        if isinstance(self.augmentation, str):
            self.augmentation = build_augmentation(self.augmentation, self.tokenizer, self.del_word_probability)
        if self.num_views < 1:
            raise ValueError(f"num_views must be >= 1, got {self.num_views}.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        if self.mlm and self.tokenizer.mask_token is None:
            raise ValueError(
                f"MLM is on but {type(self.tokenizer).__name__} has no mask token; use a tokenizer with one "
                "(BERT/RoBERTa-style) or turn MLM off (--mlm_weight 0 / mlm=False)."
            )
        self._rng = np.random.default_rng(self.seed)
        self._special_ids = np.array(sorted(set(self.tokenizer.all_special_ids)))
        self._masker = (
            DataCollatorForLanguageModeling(self.tokenizer, mlm=True, mlm_probability=self.mlm_probability)
            if self.mlm
            else None
        )
        if self._masker is not None and self.seed is not None:
            self._masker.generator = torch.Generator().manual_seed(self.seed)

    def _token_ids(self, features: list[dict[str, Any]]) -> list[list[int]]:
        if "input_ids" in features[0]:
            return [list(feature["input_ids"]) for feature in features]
        if "text" in features[0]:
            encoded = self.tokenizer(
                [feature["text"] for feature in features], truncation=True, max_length=self.max_length
            )
            return encoded["input_ids"]
        raise ValueError(
            f"ContrastiveDataCollator needs features with 'input_ids' or 'text', got keys {sorted(features[0])}."
        )

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        sentences = self._token_ids(features)
        views = []
        for ids in sentences:
            is_special = np.isin(ids, self._special_ids)
            views.extend(self.augmentation.augment(ids, is_special, self._rng) for _ in range(self.num_views))
        input_ids, attention_mask = pad_sequences(views, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids.view(len(sentences), self.num_views, -1),  # (B, V, L)
            "attention_mask": attention_mask.view(len(sentences), self.num_views, -1),
        }
        if self._masker is not None:
            mlm_ids, mlm_mask = pad_sequences(sentences, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
            special = torch.from_numpy(np.isin(mlm_ids.numpy(), self._special_ids))  # padding is special too
            batch["mlm_input_ids"], batch["mlm_labels"] = self._masker.torch_mask_tokens(mlm_ids, special)
            batch["mlm_attention_mask"] = mlm_mask
        return batch
