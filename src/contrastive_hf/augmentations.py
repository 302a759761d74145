"""Positive-pair views made on token ids (after tokenization, so they are fast and tokenizer-agnostic).

An augmentation maps one sentence's token ids to a new list of ids. Special tokens ([CLS], [SEP], <s>, </s>,
padding) are never deleted or moved, and a view is never empty: a sentence reduced to nothing keeps one [DEL].

Names follow CLEAR (Wu et al., 2020, §3.1 and §4.1): ``del_word``; plus ``dropout``, the identity view of
unsupervised SimCSE (Gao et al., 2021), whose two views differ only by the encoder's dropout masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEL_TOKEN",
    "Augmentation",
    "Identity",
    "WordDeletion",
    "AUGMENTATION_NAMES",
    "build_augmentation",
    "add_del_token",
]

DEL_TOKEN = "[DEL]"


class Augmentation:
    """Base class: ``augment(ids, is_special, rng)`` returns the ids of one view."""

    name = "augmentation"

    def augment(self, ids: Sequence[int], is_special: np.ndarray, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class Identity(Augmentation):
    """SimCSE's unsupervised view: the sentence itself; dropout in the encoder makes the two views differ."""

    name = "dropout"

    def augment(self, ids, is_special, rng):
        return list(ids)


@dataclass(repr=False)
class WordDeletion(Augmentation):
    """CLEAR's word deletion: a fraction ``probability`` of the tokens becomes [DEL]; a run of [DEL]s becomes one.

    Args:
        del_token_id: id of the [DEL] token (see `add_del_token`).
        probability: fraction of the non-special tokens deleted (CLEAR §4.1: 0.7). The count is
            round(probability * n), so every view of an n-token sentence deletes the same number of tokens.
    """

    del_token_id: int
    probability: float = 0.7
    name = "del_word"

    def __post_init__(self):
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"del_word probability must be in [0, 1], got {self.probability}.")

    def augment(self, ids, is_special, rng):
        ids = np.asarray(ids)
        candidates = np.flatnonzero(~is_special)
        n_delete = int(round(self.probability * len(candidates)))
        if n_delete == 0:
            return ids.tolist()
        deleted = np.zeros(len(ids), dtype=bool)
        deleted[rng.choice(candidates, size=n_delete, replace=False)] = True
        # keep a [DEL] only where a run of deletions starts
        run_start = deleted & ~np.concatenate([[False], deleted[:-1]])
        out = np.where(deleted, self.del_token_id, ids)
        return out[~deleted | run_start].tolist()


AUGMENTATION_NAMES = ("dropout", "del_word")


def build_augmentation(name: str, tokenizer, del_word_probability: float = 0.7) -> Augmentation:
    """The augmentation called ``name`` (one of `AUGMENTATION_NAMES`), configured for ``tokenizer``."""
    if name == "dropout":
        return Identity()
    if name == "del_word":
        del_token_id = tokenizer.convert_tokens_to_ids(DEL_TOKEN)
        if del_token_id is None or del_token_id == tokenizer.unk_token_id:
            raise ValueError(
                f"del_word needs the {DEL_TOKEN} token in the tokenizer; call "
                "contrastive_hf.augmentations.add_del_token(tokenizer, model) first."
            )
        return WordDeletion(del_token_id=del_token_id, probability=del_word_probability)
    raise ValueError(f"Unknown augmentation {name!r}: choose one of {', '.join(AUGMENTATION_NAMES)}.")


def add_del_token(tokenizer, model=None) -> int:
    """Add CLEAR's [DEL] special token to ``tokenizer`` when missing, resize ``model``'s embeddings to match, and
    return its id."""
    if DEL_TOKEN not in tokenizer.get_vocab():
        # keep the tokenizer's other extra special tokens special (the default would replace them)
        tokenizer.add_special_tokens({"additional_special_tokens": [DEL_TOKEN]}, replace_extra_special_tokens=False)
    if model is not None and model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return tokenizer.convert_tokens_to_ids(DEL_TOKEN)
