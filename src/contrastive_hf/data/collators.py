"""Batch builders: raw or tokenized sentences in, the model's view tensors (and an MLM copy) out.

* `ContrastiveDataCollator`: ``num_views`` augmented views of each sentence (CLEAR, unsupervised SimCSE) and an
  MLM-masked copy of the original (or of each view: ``mlm_on_views``, CLEAR's "Double MLM" control).
* `PairCollator`: supervised (anchor, positive) pairs, or (anchor, positive, k hard negatives) rows, e.g. SimCSE's
  NLI format ``sent0,sent1,hard_neg`` or sentence-transformers' ``anchor,positive,negative_1,...,negative_k``.
* `CollatorEpochCallback`: tells a collator the epoch, so that each epoch sees new views (`ContrastiveTrainer`
  adds it by itself).

Every random draw (augmentations, MLM masking) is derived from (seed, epoch, example, view), see
`contrastive_hf.data.seeding`: a run resumed from a checkpoint sees exactly the views of the uninterrupted run, and a
sentence's views do not depend on the batch it is in. The example is the ``example_index`` column when the dataset
has one (`contrastive_hf.data.tokenizing.tokenize_corpus` adds it), otherwise a hash of the sentence's token ids.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback

from ..models.host_data import host
from ..models.prompts import prompt_token_count, refuse_prompt_filling, role_prompt
from .augmentations import (
    DEL_TOKEN,
    DEL_WORD_PROBABILITY,
    Augmentation,
    Mixture,
    WordDeletion,
    build_augmentation,
    describe_augmentation,
    needs_synonyms,
)
from .seeding import EXAMPLE_INDEX_COLUMN, example_keys, mix64, new_seed, random_bits, stream
from .synonyms import TokenSynonyms, load_synonyms
from .token_batch import TokenBatch, special_token_table
from .tokenizing import special_token_frame

__all__ = [
    "ContrastiveDataCollator",
    "PairCollator",
    "CollatorEpochCallback",
    "content_room",
    "PAIR_COLUMN_NAMES",
    "NEGATIVE_COLUMN_NAMES",
    "negative_columns",
    "first_example",
    "column_views",
    "RolePrompts",
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
PAIR_COLUMN_NAMES = (("anchor", "positive", "hard_negative"), ("sent0", "sent1", "hard_neg"), ("query", "positive"))
# Hard-negative column names, tried in this order when none is given (see `negative_columns`).
NEGATIVE_COLUMN_NAMES = ("hard_negative", "hard_neg", "negative", "negatives")


def negative_columns(names: Sequence[str], candidates: Sequence[str] = NEGATIVE_COLUMN_NAMES) -> tuple[str, ...]:
    """The hard-negative columns among the column ``names``: the first of ``candidates`` that is a column (which may
    hold one negative per row, or a list of them), else the numbered columns ``<candidate>_1``, ``<candidate>_2``...
    of the first candidate that has a ``_1`` (sentence-transformers' ``negative_1..negative_k``, what
    ``contrastive-hf mine`` writes), in number order; () when there is none."""
    present = set(names)
    for candidate in candidates:
        if candidate in present:
            return (candidate,)
    for candidate in candidates:
        numbered = []
        while f"{candidate}_{len(numbered) + 1}" in present:
            numbered.append(f"{candidate}_{len(numbered) + 1}")
        if numbered:
            return tuple(numbered)
    return ()


def first_example(dataset) -> dict | None:
    """The first example of a map-style dataset, to tell what its batches will hold before training; None for a
    stream (read only by the dataloader) or no dataset."""
    try:
        return dataset[0] if dataset is not None and len(dataset) > 0 else None
    except (TypeError, NotImplementedError):
        return None


class RolePrompts:
    """Training-time prompts, as `encode` applies them at inference: the model config's ``prompts`` (e.g. E5's
    ``{"query": "query: ", "document": "passage: "}``) by role, the query (anchor) column taking the ``query`` prompt
    and every other column (positives, negatives, passages) the ``document`` one (or ``passage``, ``corpus``:
    `prompts.role_prompt`). With ``include_prompt=False`` a batch also carries ``prompt_lengths`` ``(B, S)``, how
    many leading tokens of each view are its prompt ([CLS] included, as sentence-transformers counts them), which
    the models leave out of the pooling exactly as `encode` does."""

    def __init__(self, tokenizer, prompts: dict[str, str] | None = None, include_prompt: bool = True):
        self.texts = {role: (prompts or {}).get(role_prompt(prompts, role)) for role in ("query", "document")}
        self.include_prompt = include_prompt
        self.lengths = {role: prompt_token_count(tokenizer, text) if text else 0 for role, text in self.texts.items()}

    def __bool__(self) -> bool:
        return any(self.texts.values())

    def refuse_filling(self, tokenizer, max_lengths: dict[str, tuple[int | None, str, str | None]]) -> None:
        """A `ValueError` for a prompt that leaves no room for text (`prompts.refuse_prompt_filling`):
        ``max_lengths`` gives each role's truncation as ``(length, setting, script flag or None)``, e.g.
        ``{"query": (32, "max_length", "--max_seq_length"), ...}``."""
        for role, (max_length, length_name, flag) in max_lengths.items():
            texts = "queries (the anchors)" if role == "query" else "documents (positives and negatives)"
            refuse_prompt_filling(tokenizer, self.texts[role], max_length, texts, length_name, flag)

    def of_column(self, index: int) -> str | None:
        """The prompt of a batch's column ``index``: the query's for column 0, the document's for the others."""
        return self.texts["query" if index == 0 else "document"]

    def lengths_array(self, size: int, columns_views: Sequence[int]) -> np.ndarray | None:
        """``prompt_lengths`` ``(size, views)`` for columns of ``columns_views`` views each, a host array
        (`models.host_data`); None when the prompts are pooled (``include_prompt``) or there is none."""
        if self.include_prompt or not self:
            return None
        per_view = [
            self.lengths["query" if index == 0 else "document"]
            for index, count in enumerate(columns_views)
            for _ in range(count)
        ]
        return host(np.tile(np.asarray(per_view, dtype=np.int64), (size, 1)))


def _is_token_ids(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], (int, np.integer))


def column_views(
    features: Sequence[dict[str, Any]],
    column: str,
    tokenizer,
    max_length: int | None,
    prompt: str | None = None,
) -> list[list[list[int]]]:
    """The token ids of one column of a batch, as views: ``views[v][row]``.

    A cell holds one sentence (a text, or a list of token ids) or several (a list of texts or of token-id lists,
    e.g. FlagEmbedding's list of negatives), which become that many views; every row of the batch must hold the same
    number. Texts are tokenized here, ``prompt`` first (as ``encode(prompt_name=...)`` prepends it), truncated at
    ``max_length``; token ids are taken as they are, so a prompt needs texts.
    """
    cells = []
    for row, feature in enumerate(features):
        value = feature.get(column)
        many = isinstance(value, (list, tuple)) and not _is_token_ids(value)
        sentences = list(value) if many else [value]
        if not sentences or any(
            sentence is None or len(sentence) == 0 or (isinstance(sentence, str) and not sentence.strip())
            for sentence in sentences
        ):
            raise ValueError(f"Example {row} of the batch has no {column!r}; drop incomplete rows first.")
        cells.append(sentences)
    counts = {len(sentences) for sentences in cells}
    if len(counts) > 1:
        raise ValueError(
            f"The rows of the batch hold {sorted(counts)} sentences in {column!r}: every row needs the same number of "
            "negatives (give each row k of them, e.g. as `contrastive-hf mine --num_negatives k` writes them)."
        )
    flat = [sentence for sentences in cells for sentence in sentences]  # row-major
    texts = [index for index, sentence in enumerate(flat) if isinstance(sentence, str)]
    if prompt and len(texts) < len(flat):
        raise ValueError(
            f"Column {column!r} holds token ids, but a prompt ({prompt!r}) is prepended to texts before tokenization "
            "(as encode does): give the collator the column's texts."
        )
    if texts:
        encoded = tokenizer(
            [(prompt or "") + flat[index] for index in texts], truncation=max_length is not None, max_length=max_length
        )["input_ids"]
        for index, ids in zip(texts, encoded, strict=True):
            flat[index] = ids
    per_row = counts.pop()
    return [flat[view::per_row] for view in range(per_row)]


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
    masked_next_token: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking, as transformers' `DataCollatorForLanguageModeling` does it, with keyed draws.

    Each non-special token is selected with probability ``mlm_probability``; a selected token becomes [MASK] with
    probability ``mask_replace_probability``, a uniformly random token id (over ``vocab_size``) with probability
    ``random_replace_probability``, and stays otherwise. Returns ``(input_ids, labels)``, both ``(N, L)``, labels
    -100 where nothing is predicted. The draws come from ``keys`` (one per row), so a row's masking does not depend
    on the rest of the batch. ``masked_next_token``: for a decoder that predicts each masked token from the position
    before it (MNTP), a row's first token, which no position precedes, is never selected.
    """
    bits = random_bits(keys[:, None], np.arange(batch.width))  # (N, L)
    select = (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24  # two independent 24-bit uniforms
    how = ((bits >> np.uint64(16)) & np.uint64(0xFFFFFF)).astype(np.float64) * 2.0**-24
    selected = (select < mlm_probability) & ~batch.is_special
    if masked_next_token:
        selected[:, 0] = False
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
    sentences: TokenBatch,
    keys: np.ndarray,
    tokenizer,
    mlm_probability: float,
    pad_to_multiple_of: int | None,
    mask_token_id: int | None = None,
    masked_next_token: bool = False,
) -> dict:
    """The MLM-masked copy of ``sentences`` as ``mlm_input_ids``, ``mlm_attention_mask`` and ``mlm_labels``
    ``(N, L)``, with what the model reads on the host (`models.host_data`): ``mlm_lengths`` ``(N,)`` and
    ``mlm_positions``, the masked tokens as flat indices into ``mlm_labels``. Masked with ``mask_token_id`` (default:
    the tokenizer's mask token); ``masked_next_token`` as `mask_tokens` says."""
    mask_token_id = tokenizer.mask_token_id if mask_token_id is None else mask_token_id
    masked, labels = mask_tokens(
        sentences, keys, mlm_probability, mask_token_id, len(tokenizer), masked_next_token=masked_next_token
    )
    masked_batch = TokenBatch(masked, sentences.is_special, sentences.lengths, sentences.pad_id)
    input_ids, attention_mask = masked_batch.to_tensors(pad_to_multiple_of)
    label_ids = TokenBatch(labels, sentences.is_special, sentences.lengths, -100).to_tensors(pad_to_multiple_of)[0]
    return {
        "mlm_input_ids": input_ids,
        "mlm_attention_mask": attention_mask,
        "mlm_labels": label_ids,
        "mlm_lengths": host(sentences.lengths),  # (N,)
        "mlm_positions": host(np.flatnonzero(label_ids.numpy().reshape(-1) != -100)),  # (M,)
    }


def mask_token_id(tokenizer, mask_token: str | None) -> int:
    """The id masked tokens take: ``mask_token``'s, a token of the tokenizer's vocabulary, or the tokenizer's own mask
    token. Decoder tokenizers have none: LLM2Vec masks a decoder's tokens with ``"_"``."""
    if mask_token is None:
        if tokenizer.mask_token is None:
            raise ValueError(
                f"MLM is on but {type(tokenizer).__name__} has no mask token; use a tokenizer with one "
                "(BERT/RoBERTa-style), give one of its tokens to mask with (mask_token / --mask_token; LLM2Vec "
                "masks a decoder's tokens with '_'), or turn MLM off (--mlm_weight 0 / mlm=False)."
            )
        return tokenizer.mask_token_id
    vocabulary = tokenizer.get_vocab()
    if mask_token not in vocabulary:
        raise ValueError(
            f"mask_token {mask_token!r} is not a token of {type(tokenizer).__name__}'s vocabulary (it would be split "
            "or read as unknown): give one of its tokens, e.g. '_', whose id tokenizer.convert_tokens_to_ids gives."
        )
    return vocabulary[mask_token]


def _uses_synonyms(augmentation) -> bool:
    if isinstance(augmentation, str | Augmentation):
        return needs_synonyms(augmentation)
    return any(_uses_synonyms(choice) for choice in augmentation)


def content_room(tokenizer, max_length: int | None) -> int | None:
    """How many tokens of a sentence ``max_length`` keeps once the tokenizer's special tokens are in (None: no
    limit). A ``max_length`` that keeps none is refused: every example would be the same ``[CLS] [SEP]``, which no
    loss can learn from."""
    if max_length is None:
        return None
    prefix, suffix = special_token_frame(tokenizer)
    if max_length <= len(prefix) + len(suffix):
        frame = " ".join(tokenizer.convert_ids_to_tokens([*prefix, *suffix]))
        raise ValueError(
            f"max_length={max_length} (--max_seq_length) leaves no room for words: {type(tokenizer).__name__} adds "
            f"{len(prefix) + len(suffix)} special tokens ({frame}) to every sentence, so every example would be "
            f"only those, the same for every sentence, and training would learn nothing (loss 0 or at chance). Set "
            f"it to at least {len(prefix) + len(suffix) + 1}; SimCSE and CLEAR use 32 for sentences."
        )
    return max_length - len(prefix) - len(suffix)


@dataclass
class ContrastiveDataCollator:
    """Turns sentences into ``num_views`` augmented views each, plus an MLM-masked copy of the original.

    Each feature is a dict with ``input_ids`` (tokenized, special tokens included) or ``text`` (tokenized here),
    and optionally ``example_index``. Every view of a sentence uses the same augmentation with an independent
    random draw (CLEAR §3.1); with several augmentations (a list, or names joined by ``,``) each view draws one.

    Returns a dict with ``input_ids`` and ``attention_mask`` of shape ``(batch, num_views, length)``, and when
    ``mlm`` is on, ``mlm_input_ids``, ``mlm_attention_mask`` and ``mlm_labels`` of shape ``(batch, mlm_length)``,
    masked as transformers' `DataCollatorForLanguageModeling` masks (15%, 80/10/10 by default); with
    ``mlm_on_views``, a masked copy of each view instead, ``(batch, num_views, mlm_length)``.

    Args:
        tokenizer: the model's tokenizer (with [DEL] added for ``del_word``/``del_span``: see
            `augmentations.add_del_token`).
        augmentation: an `Augmentation`, a name (``"dropout"``, ``"del_word"``, ``"subs+del_span"``,
            ``"del_word,reorder"``: see `augmentations.build_augmentation`), or a list of them to mix.
        num_views: views per sentence.
        mlm: also build the MLM copy (CLEAR's L_MLM).
        mlm_probability: fraction of tokens masked for MLM.
        mask_token: the token masked tokens become (a token of the tokenizer's vocabulary); default the tokenizer's
            mask token. Decoder tokenizers have none: LLM2Vec masks with ``"_"``.
        masked_next_token: the model predicts each masked token from the position before it (a decoder's masked
            next-token prediction, `ContrastiveForPreTraining.predicts_next_token`), so a sentence's first token,
            which no position precedes, is never masked.
        mlm_on_views: mask each view for MLM instead of the original sentence: with ``cl_weight=0``, CLEAR's
            "Double MLM" control (Table 3), MLM on the two augmented views, which sends as many sequences through
            the encoder's gradient as MLM + CL does, without the contrastive loss. Its masks are drawn apart from
            the views' own draws ([DEL] and the other special tokens are never masked).
        view_settings: the augmentations' hyper-parameters by flag, for an ``augmentation`` given by name
            (``{"del_word_probability": 0.3, "span_ratio": 0.1}``: see `augmentations.augmentation_hyperparameters`);
            the others keep their defaults.
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
    mask_token: str | None = None
    masked_next_token: bool = False
    mlm_on_views: bool = False
    view_settings: Mapping[str, int | float] = field(default_factory=dict)
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
        self._mask_token_id = mask_token_id(self.tokenizer, self.mask_token) if self.mlm else None
        if not 0.0 <= self.mlm_probability <= 1.0:
            raise ValueError(f"mlm_probability must be in [0, 1], got {self.mlm_probability}.")
        if self.mlm_on_views and not self.mlm:
            raise ValueError("mlm_on_views masks the views for MLM, but mlm is off: turn MLM on (--mlm_weight > 0).")
        if self.synonyms is not None and not isinstance(self.synonyms, TokenSynonyms):
            # compile now (a model given as the source is not kept, nor copied into dataloader workers)
            self.synonyms = load_synonyms(self.synonyms, self.tokenizer) if _uses_synonyms(self.augmentation) else None
        self.augmentation = self._build(self.augmentation)
        self._refuse_views_of_no_words(content_room(self.tokenizer, self.max_length))
        if self.seed is None:
            self.seed = new_seed()
        self._special = special_token_table(self.tokenizer)
        prefix, _ = special_token_frame(self.tokenizer)
        self._sentence_start = prefix[0] if prefix else None  # [CLS], <s>: what every sentence starts with

    def _refuse_cut_windows(self, sentences: TokenBatch) -> None:
        """A `ValueError` when examples do not start as the tokenizer starts a sentence ([CLS], <s>): token ids
        concatenated across texts and cut into windows, as transformers' run_mlm.py makes them without
        ``--line_by_line`` (``group_texts``). Their views would cross sentence boundaries with no [CLS] at position
        0, where the cls poolers read the sentence, and the contrastive loss would train on them silently. Checked
        on the host, where the batch is built: the training step reads nothing back."""
        if self._sentence_start is None:  # a tokenizer that adds nothing before a sentence (GPT-2's)
            return
        cut = np.flatnonzero(sentences.ids[:, 0] != self._sentence_start)
        if len(cut) == 0:
            return
        start = self.tokenizer.convert_ids_to_tokens(self._sentence_start)
        example = self.tokenizer.convert_ids_to_tokens(sentences.ids[cut[0], :4].tolist())
        raise ValueError(
            f"{len(cut)} of the {len(sentences)} examples of this batch do not start with {start} (example "
            f"{cut[0]} starts with {' '.join(example)}): they are windows cut from texts concatenated together, as "
            "run_mlm.py groups them without --line_by_line, not sentences. Their views would cross sentence "
            f"boundaries with no {start} at position 0, and the contrastive loss would train on them. Give one "
            "sentence (or text) per example: --line_by_line true in run_mlm.py, input_ids tokenized with the "
            f"tokenizer's special tokens, or contrastive_hf.tokenize_corpus, whose packed blocks each start with "
            f"{start}."
        )

    def _build(self, augmentation) -> Augmentation:
        if isinstance(augmentation, Augmentation):
            return augmentation
        if isinstance(augmentation, str):
            return build_augmentation(augmentation, self.tokenizer, self.synonyms, **self.view_settings)
        return Mixture([self._build(choice) for choice in augmentation])

    def _refuse_views_of_no_words(self, max_content: int | None) -> None:
        """Word deletion that deletes every token makes every view ``[CLS] [DEL] [SEP]``, whatever the sentence: the
        contrastive loss then stays at chance and the embeddings collapse."""
        for atom in self.augmentation.atoms():
            if isinstance(atom, WordDeletion) and atom.deletes_every_token(max_content):
                longest = "" if max_content is None else f" (of up to {max_content} tokens)"
                raise ValueError(
                    f"del_word_probability={atom.probability} deletes every token of every sentence{longest}: each "
                    f"view would be the same {DEL_TOKEN} between the special tokens, whatever the sentence, so the "
                    "contrastive loss stays at chance and the embeddings collapse. Use a ratio that keeps words: "
                    f"CLEAR's {DEL_WORD_PROBABILITY} (the default) or lower (the demo uses 0.3)."
                )

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
        views = augmentation + ("; MLM on a masked copy of each view" * self.mlm_on_views)
        return {
            "augmentation": augmentation,
            "mlm": bool(self.mlm),
            **({"masked_next_token": True} if self.mlm and self.masked_next_token else {}),
            "views": views,
            "views_description": describe_augmentation(self.augmentation),
            "view_settings": self.augmentation.settings(),
        }

    def hard_negatives_in_batches(self, dataset) -> bool:
        """Whether a batch gives each query hard negatives (`training.sanity` asks): never, every view is of the
        query's own sentence."""
        return False

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        sentences = TokenBatch.from_sequences(self._token_ids(features), self._special, self.tokenizer.pad_token_id)
        if (sentences.lengths == 0).any():
            raise ValueError(
                f"Example {int(np.argmin(sentences.lengths))} of the batch has no tokens; drop empty examples "
                "before training (contrastive_hf.data.tokenize_corpus does)."
            )
        self._refuse_cut_windows(sentences)
        identities = example_identities(features, sentences)
        size, views_per = len(sentences), self.num_views
        view_numbers = np.tile(np.arange(views_per, dtype=np.uint64), size)
        keys = example_keys(self.seed, self.epoch, np.repeat(identities, views_per), view_numbers)
        views = self.augmentation.apply(sentences.repeat(views_per), keys)  # row i * V + v: view v of sentence i
        if self.max_length:
            views = views.truncate(self.max_length)
        input_ids, attention_mask = views.to_tensors(self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids.view(size, views_per, -1),  # (B, V, L)
            "attention_mask": attention_mask.view(size, views_per, -1),
            # every view is of the same sentence; a copy per view, not a stride-0 view, which pinned memory refuses
            "sentence_ids": sentence_ids(sentences).repeat(1, views_per),  # (B, V)
            "input_lengths": host(views.lengths.reshape(size, views_per)),  # (B, V) on the host
        }
        if self.mlm and self.mlm_on_views:  # a mask per view, keyed apart from the views' own draws
            mlm_keys = example_keys(self.seed, self.epoch, np.repeat(identities, views_per), MLM_VIEW + view_numbers)
            copies = mlm_copy(views, mlm_keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of,
                              self._mask_token_id, self.masked_next_token)  # fmt: skip
            copies["mlm_lengths"] = copies["mlm_lengths"].reshape(size, views_per)
            batch.update(
                {name: value.view(size, views_per, -1) if torch.is_tensor(value) else value
                 for name, value in copies.items()}
            )  # fmt: skip
        elif self.mlm:
            mlm_keys = example_keys(self.seed, self.epoch, identities, MLM_VIEW)
            batch.update(
                mlm_copy(sentences, mlm_keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of,
                         self._mask_token_id, self.masked_next_token)
            )  # fmt: skip
        return batch


@dataclass
class PairCollator:
    """Supervised positives: (anchor, positive) pairs, or (anchor, positive, k hard negatives) rows.

    Each feature holds the sentences as text (tokenized here) or token-id lists. Columns default to
    ``anchor, positive``, SimCSE's NLI names ``sent0, sent1`` or ``query, positive``, whichever the features have,
    followed by the hard-negative columns found by `negative_columns` (``hard_negative``, ``hard_neg``, ...; or
    ``negative_1, ..., negative_k``). A hard-negative column may also hold a list of k negatives per row
    (FlagEmbedding's ``neg``; FlagEmbedding's ``train_group_size`` is 1 + k). Returns ``input_ids`` and
    ``attention_mask`` of shape ``(batch, 2 + k, length)`` and ``sentence_ids`` ``(batch, 2 + k)`` for
    `ContrastiveForPreTraining`, whose ``contrastive_loss="info_nce"`` takes views 2.. as each anchor's hard
    negatives (``hard_negative_weight`` added to each); with ``mlm``, also an MLM copy of the anchors (SimCSE's
    auxiliary MLM objective).

    Args:
        tokenizer: the model's tokenizer.
        columns: the (anchor, positive, hard negatives...) column names; detected when None.
        max_length: truncation length in tokens (SimCSE uses 32 for NLI).
        pad_to_multiple_of: pad lengths to a multiple of this.
        mlm, mlm_probability: the MLM copy of the anchors.
        mask_token, masked_next_token: the token masked tokens become, and a decoder's masked next-token prediction
            (as `ContrastiveDataCollator` takes them).
        seed: the seed the MLM draws derive from; None draws one.
        prompts, include_prompt: the model config's ``prompts`` and ``include_prompt``: the anchors are prefixed
            with the ``query`` prompt and the other columns with the ``document`` one, and with
            ``include_prompt=False`` the batch carries ``prompt_lengths`` so that the prompt is left out of the
            pooling in training as at inference (`RolePrompts`). Prompts need text features.
    """

    tokenizer: PreTrainedTokenizerBase
    columns: Sequence[str] | None = None
    max_length: int | None = 32
    pad_to_multiple_of: int | None = None
    mlm: bool = False
    mlm_probability: float = 0.15
    mask_token: str | None = None
    masked_next_token: bool = False
    seed: int | None = None
    epoch: int = 0
    prompts: dict[str, str] | None = None
    include_prompt: bool = True

    def __post_init__(self):
        if self.columns is not None and (isinstance(self.columns, str) or len(self.columns) < 2):
            raise ValueError(
                f"columns must name an anchor and a positive column, then any hard negatives, got {self.columns}."
            )
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        self._mask_token_id = mask_token_id(self.tokenizer, self.mask_token) if self.mlm else None
        content_room(self.tokenizer, self.max_length)  # refuses a max_length that keeps no word
        if self.seed is None:
            self.seed = new_seed()
        self._special = special_token_table(self.tokenizer)
        self._prompts = RolePrompts(self.tokenizer, self.prompts, self.include_prompt)
        length = (self.max_length, "max_length", "--max_seq_length")
        self._prompts.refuse_filling(self.tokenizer, {"query": length, "document": length})

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def resolve_columns(self, feature: dict[str, Any]) -> tuple[str, ...]:
        """The columns used for a feature's keys."""
        if self.columns is not None:
            missing = [column for column in self.columns if column not in feature]
            if missing:
                raise ValueError(f"PairCollator columns {missing} are not in the features (keys {sorted(feature)}).")
            return tuple(self.columns)
        for anchor, positive, *negative in PAIR_COLUMN_NAMES:
            if anchor in feature and positive in feature:
                negatives = negative_columns(list(feature), [*negative, *NEGATIVE_COLUMN_NAMES])
                return (anchor, positive, *(name for name in negatives if feature.get(name) not in (None, "")))
        names = " or ".join(",".join(names) for names in PAIR_COLUMN_NAMES)
        raise ValueError(f"PairCollator needs columns {names} (or columns=...); the features have {sorted(feature)}.")

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        columns = list(self.columns or ("anchor", "positive"))
        negatives = f", hard negatives {', '.join(columns[2:])}" if len(columns) > 2 else ""
        return {
            "pairs": True,
            "views": f"pairs: {columns[0]} -> {columns[1]}{negatives}",
            "hard_negatives": len(columns) - 2,
        }

    def hard_negatives_in_batches(self, dataset) -> bool | None:
        """Whether a batch gives each anchor hard negatives (`training.sanity` asks): columns after (anchor,
        positive), given or found in ``dataset``'s first example; None for a stream, unread before training."""
        if self.columns is not None:
            return len(self.columns) > 2
        first = first_example(dataset)
        return None if first is None else len(self.resolve_columns(first)) > 2

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        columns = self.resolve_columns(features[0])
        per_column = [
            column_views(features, column, self.tokenizer, self.max_length, self._prompts.of_column(index))
            for index, column in enumerate(columns)
        ]
        views = [view for column in per_column for view in column]
        size, num_views = len(features), len(views)
        sequences = [views[view][row] for row in range(size) for view in range(num_views)]  # row-major
        sentences = TokenBatch.from_sequences(sequences, self._special, self.tokenizer.pad_token_id)
        input_ids, attention_mask = sentences.to_tensors(self.pad_to_multiple_of)
        batch = {
            "input_ids": input_ids.view(size, num_views, -1),  # (B, 2 + k, L)
            "attention_mask": attention_mask.view(size, num_views, -1),
            "sentence_ids": sentence_ids(
                *(sentences.take(np.arange(view, len(sequences), num_views)) for view in range(num_views))
            ),
            "input_lengths": host(sentences.lengths.reshape(size, num_views)),  # (B, 2 + k) on the host
        }
        prompt_lengths = self._prompts.lengths_array(size, [len(column) for column in per_column])
        if prompt_lengths is not None:
            batch["prompt_lengths"] = prompt_lengths  # (B, 2 + k)
        if self.mlm:
            anchors = sentences.take(np.arange(0, len(sequences), num_views))
            keys = example_keys(self.seed, self.epoch, example_identities(features, anchors), MLM_VIEW)
            batch.update(
                mlm_copy(anchors, keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of,
                         self._mask_token_id, self.masked_next_token)
            )  # fmt: skip
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
