"""Batch builders: raw or tokenized sentences in, the model's view tensors (and an MLM copy) out.

* `ContrastiveDataCollator`: ``num_views`` augmented views of each sentence (CLEAR, unsupervised SimCSE) and an
  MLM-masked copy of the original.
* `PairCollator`: supervised (anchor, positive) pairs or (anchor, positive, hard negative) triplets, e.g. SimCSE's
  NLI format ``sent0,sent1,hard_neg``.
* `CollatorEpochCallback`: tells a collator the epoch, so that each epoch sees new views (`ContrastiveTrainer`
  adds it by itself).

Every random draw (augmentations, MLM masking) is derived from (seed, epoch, example, view), see
`contrastive_hf.data.seeding`: a run resumed from a checkpoint sees exactly the views of the uninterrupted run, and a
sentence's views do not depend on the batch it is in. The example is the ``example_index`` column when the dataset
has one (`contrastive_hf.data.corpus.tokenize_corpus` adds it), otherwise a hash of the sentence's token ids.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback

from .augmentations import DEL_WORD_PROBABILITY, Augmentation, Mixture, SynonymSubstitution, build_augmentation
from .seeding import EXAMPLE_INDEX_COLUMN, example_keys, mix64, new_seed, random_bits, stream
from .synonyms import TokenSynonyms, load_synonyms
from .token_batch import TokenBatch, special_token_table

__all__ = [
    "ContrastiveDataCollator",
    "PairCollator",
    "CollatorEpochCallback",
    "EXAMPLE_INDEX_COLUMN",
    "PAIR_COLUMN_NAMES",
    "content_hashes",
    "example_identities",
    "sentence_ids",
    "mask_tokens",
    "pad_sequences",
]

logger = logging.getLogger(__name__)

# The view number the MLM copy's draws are keyed with (views are 0, 1, 2...).
MLM_VIEW = 2**32
# Column names of supervised pairs/triplets, tried in this order when not given: (anchor, positive, hard negative).
PAIR_COLUMN_NAMES = (("anchor", "positive", "hard_negative"), ("sent0", "sent1", "hard_neg"))


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_token_id: int, pad_to_multiple_of: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into ``(input_ids, attention_mask)``, each ``(len(sequences), max_length)``."""
    lengths = np.fromiter((len(sequence) for sequence in sequences), dtype=np.int64, count=len(sequences))
    flat = np.fromiter((token for sequence in sequences for token in sequence), dtype=np.int64, count=lengths.sum())
    batch = TokenBatch.from_flat(flat, np.zeros(len(flat), dtype=bool), lengths, pad_token_id)
    return batch.to_tensors(pad_to_multiple_of)


def example_identities(features: Sequence[dict[str, Any]], batch: TokenBatch) -> np.ndarray:
    """A stable 64-bit identity per example: its ``example_index`` when every feature has one, else a hash of its
    token ids (then identical sentences share their random draws)."""
    if features and all(EXAMPLE_INDEX_COLUMN in feature for feature in features):
        return np.array([int(feature[EXAMPLE_INDEX_COLUMN]) for feature in features], dtype=np.int64).astype(np.uint64)
    return content_hashes(batch)


def content_hashes(batch: TokenBatch) -> np.ndarray:
    """A 64-bit hash of each row's token ids (uint64): equal rows, and only they (up to hash collisions), share it."""
    positions = np.arange(batch.width, dtype=np.uint64)
    with np.errstate(over="ignore"):
        codes = mix64(batch.ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + positions)
    codes[~batch.valid] = 0
    return mix64(codes.sum(axis=1, dtype=np.uint64) + batch.lengths.astype(np.uint64))


def sentence_ids(*columns: TokenBatch) -> torch.Tensor:
    """The models' ``sentence_ids`` input: ``(B, len(columns))`` int64 content hashes of each example's sentence in
    each column, so that identical sentences are never made each other's negatives (`losses.duplicate_mask`)."""
    return torch.from_numpy(np.stack([content_hashes(column) for column in columns], axis=1).view(np.int64))


def mask_tokens(
    batch: TokenBatch,
    keys: np.ndarray,
    mlm_probability: float,
    mask_token_id: int,
    vocab_size: int,
    mask_replace_probability: float = 0.8,
    random_replace_probability: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking, as transformers' `DataCollatorForLanguageModeling` does it, with keyed draws.

    Each non-special token is selected with probability ``mlm_probability``; a selected token becomes [MASK] with
    probability ``mask_replace_probability``, a uniformly random token id (over ``vocab_size``) with probability
    ``random_replace_probability``, and stays otherwise. Returns ``(input_ids, labels)``, both ``(N, L)``, labels
    -100 where nothing is predicted. The draws come from ``keys`` (one per row), so a row's masking does not depend
    on the rest of the batch.
    """
    bits = random_bits(keys[:, None], np.arange(batch.width))  # (N, L)
    select = (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24  # two independent 24-bit uniforms
    how = ((bits >> np.uint64(16)) & np.uint64(0xFFFFFF)).astype(np.float64) * 2.0**-24
    selected = (select < mlm_probability) & ~batch.is_special
    labels = np.where(selected, batch.ids, -100)
    ids = batch.ids.copy()
    ids[selected & (how < mask_replace_probability)] = mask_token_id
    randomised = (
        selected & (how >= mask_replace_probability) & (how < mask_replace_probability + random_replace_probability)
    )
    rows, columns = np.nonzero(randomised)
    ids[rows, columns] = (random_bits(stream(keys, "mlm/random")[rows], columns) % np.uint64(vocab_size)).astype(
        np.int64
    )
    return ids, labels


def mlm_copy(
    sentences: TokenBatch, keys: np.ndarray, tokenizer, mlm_probability: float, pad_to_multiple_of: int | None
) -> dict[str, torch.Tensor]:
    """The MLM-masked copy of ``sentences`` as ``mlm_input_ids``, ``mlm_attention_mask`` and ``mlm_labels``."""
    masked, labels = mask_tokens(sentences, keys, mlm_probability, tokenizer.mask_token_id, len(tokenizer))
    masked_batch = TokenBatch(masked, sentences.is_special, sentences.lengths, sentences.pad_id)
    input_ids, attention_mask = masked_batch.to_tensors(pad_to_multiple_of)
    label_ids = TokenBatch(labels, sentences.is_special, sentences.lengths, -100).to_tensors(pad_to_multiple_of)[0]
    return {"mlm_input_ids": input_ids, "mlm_attention_mask": attention_mask, "mlm_labels": label_ids}


def _uses_subs(augmentation) -> bool:
    if isinstance(augmentation, str):
        return "subs" in {name.strip() for choice in augmentation.split(",") for name in choice.split("+")}
    if isinstance(augmentation, SynonymSubstitution):
        return True
    if isinstance(augmentation, Augmentation):
        return any(_uses_subs(part) for part in getattr(augmentation, "parts", getattr(augmentation, "choices", ())))
    return any(_uses_subs(choice) for choice in augmentation)


@dataclass
class ContrastiveDataCollator:
    """Turns sentences into ``num_views`` augmented views each, plus an MLM-masked copy of the original.

    Each feature is a dict with ``input_ids`` (tokenized, special tokens included) or ``text`` (tokenized here),
    and optionally ``example_index``. Every view of a sentence uses the same augmentation with an independent
    random draw (CLEAR §3.1); with several augmentations (a list, or names joined by ``,``) each view draws one.

    Returns a dict with ``input_ids`` and ``attention_mask`` of shape ``(batch, num_views, length)``, and when
    ``mlm`` is on, ``mlm_input_ids``, ``mlm_attention_mask`` and ``mlm_labels`` of shape ``(batch, mlm_length)``,
    masked as transformers' `DataCollatorForLanguageModeling` masks (15%, 80/10/10 by default).

    Args:
        tokenizer: the model's tokenizer (with [DEL] added for ``del_word``/``del_span``: see
            `augmentations.add_del_token`).
        augmentation: an `Augmentation`, a name (``"dropout"``, ``"del_word"``, ``"subs+del_span"``,
            ``"del_word,reorder"``: see `augmentations.build_augmentation`), or a list of them to mix.
        num_views: views per sentence.
        mlm: also build the MLM copy (CLEAR's L_MLM).
        mlm_probability: fraction of tokens masked for MLM.
        del_word_probability: CLEAR's word-deletion ratio, used when ``augmentation`` names ``del_word``.
        max_length: truncation length for ``text`` features, and for views (which ``subs`` can lengthen).
        pad_to_multiple_of: pad lengths to a multiple of this (tensor-core friendly sizes on GPUs).
        seed: the seed every draw derives from; None draws one (batches are then not reproducible).
        synonyms: the synonym source of ``subs`` (a JSON table path, a dict, a `synonyms.TokenSynonyms`, or a
            model whose input embeddings give nearest-neighbour synonyms).
        epoch: the current epoch (kept up to date by `CollatorEpochCallback`).
    """

    tokenizer: PreTrainedTokenizerBase
    augmentation: Augmentation | str | Sequence[Augmentation | str] = "del_word"
    num_views: int = 2
    mlm: bool = True
    mlm_probability: float = 0.15
    del_word_probability: float = DEL_WORD_PROBABILITY
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    synonyms: Any = field(default=None, repr=False)
    epoch: int = 0

    def __post_init__(self):
        if self.num_views < 1:
            raise ValueError(f"num_views must be >= 1, got {self.num_views}.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        if self.mlm and self.tokenizer.mask_token is None:
            raise ValueError(
                f"MLM is on but {type(self.tokenizer).__name__} has no mask token; use a tokenizer with one "
                "(BERT/RoBERTa-style) or turn MLM off (--mlm_weight 0 / mlm=False)."
            )
        if not 0.0 <= self.mlm_probability <= 1.0:
            raise ValueError(f"mlm_probability must be in [0, 1], got {self.mlm_probability}.")
        if self.synonyms is not None and not isinstance(self.synonyms, TokenSynonyms):
            # compile now (a model given as the source is not kept, nor copied into dataloader workers)
            self.synonyms = load_synonyms(self.synonyms, self.tokenizer) if _uses_subs(self.augmentation) else None
        self.augmentation = self._build(self.augmentation)
        if self.seed is None:
            self.seed = new_seed()
        self._special = special_token_table(self.tokenizer)

    def _build(self, augmentation) -> Augmentation:
        if isinstance(augmentation, Augmentation):
            return augmentation
        if isinstance(augmentation, str):
            return build_augmentation(augmentation, self.tokenizer, self.del_word_probability, self.synonyms)
        return Mixture([self._build(choice) for choice in augmentation])

    def set_epoch(self, epoch: int) -> None:
        """Views are drawn anew each epoch; `CollatorEpochCallback` calls this at the start of every epoch."""
        self.epoch = int(epoch)

    def _token_ids(self, features: list[dict[str, Any]]) -> list:
        if "input_ids" in features[0]:
            return [feature["input_ids"] for feature in features]
        if "text" in features[0]:
            encoded = self.tokenizer(
                [feature["text"] for feature in features], truncation=True, max_length=self.max_length
            )
            return encoded["input_ids"]
        raise ValueError(
            f"ContrastiveDataCollator needs features with 'input_ids' or 'text', got keys {sorted(features[0])}."
        )

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        augmentation = self.augmentation if isinstance(self.augmentation, str) else repr(self.augmentation)
        method = "SimCSE" if augmentation == "dropout" and not self.mlm else "CLEAR"
        return {"method": method, "views": augmentation}

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        sentences = TokenBatch.from_sequences(self._token_ids(features), self._special, self.tokenizer.pad_token_id)
        if (sentences.lengths == 0).any():
            raise ValueError(
                f"Example {int(np.argmin(sentences.lengths))} of the batch has no tokens; drop empty examples "
                "before training (contrastive_hf.data.corpus.tokenize_corpus does)."
            )
        identities = example_identities(features, sentences)
        size, views_per = len(sentences), self.num_views
        keys = example_keys(
            self.seed, self.epoch, np.repeat(identities, views_per), np.tile(np.arange(views_per), size)
        )
        views = self.augmentation.apply(sentences.repeat(views_per), keys)  # row i * V + v: view v of sentence i
        if self.max_length:
            views = views.truncate(self.max_length)
        input_ids, attention_mask = views.to_tensors(self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids.view(size, views_per, -1),  # (B, V, L)
            "attention_mask": attention_mask.view(size, views_per, -1),
            "sentence_ids": sentence_ids(sentences).expand(size, views_per),  # every view is of the same sentence
        }
        if self.mlm:
            mlm_keys = example_keys(self.seed, self.epoch, identities, MLM_VIEW)
            batch.update(mlm_copy(sentences, mlm_keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of))
        return batch


@dataclass
class PairCollator:
    """Supervised positives: (anchor, positive) pairs or (anchor, positive, hard negative) triplets.

    Each feature holds the sentences as text (tokenized here) or token-id lists. Columns default to
    ``anchor, positive[, hard_negative]`` or SimCSE's NLI names ``sent0, sent1[, hard_neg]``, whichever the
    features have; the hard negative is used when its column is there. Returns ``input_ids`` and
    ``attention_mask`` of shape ``(batch, 2 or 3, length)`` for `ContrastiveForPreTraining`, whose
    ``contrastive_loss="info_nce"`` takes the third view as each anchor's hard negative; with ``mlm``, also an
    MLM copy of the anchors (SimCSE's auxiliary MLM objective).

    Args:
        tokenizer: the model's tokenizer.
        columns: the (anchor, positive[, hard negative]) column names; detected when None.
        max_length: truncation length in tokens (SimCSE uses 32 for NLI).
        pad_to_multiple_of: pad lengths to a multiple of this.
        mlm, mlm_probability: the MLM copy of the anchors.
        seed: the seed the MLM draws derive from; None draws one.
    """

    tokenizer: PreTrainedTokenizerBase
    columns: Sequence[str] | None = None
    max_length: int | None = 32
    pad_to_multiple_of: int | None = None
    mlm: bool = False
    mlm_probability: float = 0.15
    seed: int | None = None
    epoch: int = 0

    def __post_init__(self):
        if self.columns is not None and len(self.columns) not in (2, 3):
            raise ValueError(f"columns must name 2 (anchor, positive) or 3 (+ hard negative), got {self.columns}.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        if self.mlm and self.tokenizer.mask_token is None:
            raise ValueError(f"MLM is on but {type(self.tokenizer).__name__} has no mask token; set mlm=False.")
        if self.seed is None:
            self.seed = new_seed()
        self._special = special_token_table(self.tokenizer)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def resolve_columns(self, feature: dict[str, Any]) -> tuple[str, ...]:
        """The columns used for a feature's keys."""
        if self.columns is not None:
            missing = [column for column in self.columns if column not in feature]
            if missing:
                raise ValueError(f"PairCollator columns {missing} are not in the features (keys {sorted(feature)}).")
            return tuple(self.columns)
        for anchor, positive, negative in PAIR_COLUMN_NAMES:
            if anchor in feature and positive in feature:
                has_negative = feature.get(negative) not in (None, "")
                return (anchor, positive, negative) if has_negative else (anchor, positive)
        names = " or ".join(",".join(names) for names in PAIR_COLUMN_NAMES)
        raise ValueError(f"PairCollator needs columns {names} (or columns=...); the features have {sorted(feature)}.")

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        columns = list(self.columns or ("anchor", "positive"))
        views = f"pairs: {columns[0]} -> {columns[1]}" + (f", hard negative {columns[2]}" if len(columns) == 3 else "")
        return {"method": "Supervised SimCSE", "views": views, "hard_negatives": len(columns) == 3}

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        columns = self.resolve_columns(features[0])
        sequences: list = [None] * (len(features) * len(columns))  # row-major: example, then column
        for slot, column in enumerate(columns):
            values = [feature.get(column) for feature in features]
            for row, value in enumerate(values):
                if value is None or (isinstance(value, str) and not value.strip()) or len(value) == 0:
                    raise ValueError(f"Example {row} of the batch has no {column!r}; drop incomplete rows first.")
            texts = [row for row, value in enumerate(values) if isinstance(value, str)]
            if texts:
                encoded = self.tokenizer(
                    [values[row] for row in texts], truncation=self.max_length is not None, max_length=self.max_length
                )["input_ids"]
                for row, ids in zip(texts, encoded, strict=True):
                    values[row] = ids
            for row, value in enumerate(values):
                sequences[row * len(columns) + slot] = value
        sentences = TokenBatch.from_sequences(sequences, self._special, self.tokenizer.pad_token_id)
        input_ids, attention_mask = sentences.to_tensors(self.pad_to_multiple_of)
        size = len(features)
        batch = {
            "input_ids": input_ids.view(size, len(columns), -1),  # (B, 2 or 3, L)
            "attention_mask": attention_mask.view(size, len(columns), -1),
            "sentence_ids": sentence_ids(
                *(sentences.take(np.arange(slot, len(sequences), len(columns))) for slot in range(len(columns)))
            ),
        }
        if self.mlm:
            anchors = sentences.take(np.arange(0, len(sequences), len(columns)))
            keys = example_keys(self.seed, self.epoch, example_identities(features, anchors), MLM_VIEW)
            batch.update(mlm_copy(anchors, keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of))
        return batch


class CollatorEpochCallback(TrainerCallback):
    """Keeps a collator's ``epoch`` equal to the trainer's, so each epoch draws new views and a resumed run draws
    the views of the uninterrupted one. `ContrastiveTrainer` adds it for any collator with ``set_epoch``; with a
    plain `transformers.Trainer`, add it yourself: ``trainer.add_callback(CollatorEpochCallback(collator))``.

    The epoch of the first pass is the integer part of ``state.epoch`` (0, or the epoch of the checkpoint being
    resumed); each later pass adds one, as the Trainer's own loop counts.
    """

    def __init__(self, collator):
        self.collator = collator
        self._epoch: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._epoch = None
        if args.dataloader_persistent_workers and args.dataloader_num_workers > 0:
            logger.warning(
                "dataloader_persistent_workers keeps the collator of the first epoch in each worker: every epoch "
                "will see the views of the first. Turn persistent workers off to draw new views each epoch."
            )

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._epoch = math.floor(state.epoch or 0.0) if self._epoch is None else self._epoch + 1
        self.collator.set_epoch(self._epoch)
