"""DeCLUTR's data: documents tokenized with their words counted (`tokenize_documents`, which drops those too short
for the views, `words_needed`) and the collator that samples each document's span views (`SpanViewCollator`); the
package's docstring says what each view is."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict, IterableDataset
from transformers import PreTrainedTokenizerBase

from ...data.collators import MLM_VIEW, content_hashes, example_identities, mlm_copy
from ...data.reading import resolve_text_column
from ...data.seeding import EXAMPLE_INDEX_COLUMN, combine, example_keys, new_seed, stream, uniform
from ...data.synonyms import word_start_table
from ...data.token_batch import TokenBatch, ragged_arange, row_of, special_token_table
from ...data.tokenizing import special_token_frame
from ...models.host_data import host

__all__ = [
    "SPAN_VIEWS",
    "SPAN_WORDS",
    "SPAN_MASK_PROBABILITY",
    "SpanViewCollator",
    "tokenize_documents",
    "words_needed",
]

logger = logging.getLogger(__name__)

SPAN_VIEWS = ("slice", "neighbour", "neighbouring_slice")
SPAN_WORDS = 32  # words per span
SPAN_MASK_PROBABILITY = 0.15  # tokens masked in each copy of a slice view


def words_needed(view: str, span_words: int = SPAN_WORDS, hard_negatives: bool = False) -> int:
    """The fewest words a document needs for the views: one span (slice) or two (neighbours), plus one for a hard
    negative."""
    if view not in SPAN_VIEWS:
        raise ValueError(f"Unknown span view {view!r}: choose one of {', '.join(SPAN_VIEWS)}.")
    if span_words < 1:
        raise ValueError(f"span_words must be >= 1, got {span_words}.")
    spans = 1 if view == "slice" else 2
    return (spans + int(hard_negatives)) * span_words


class _ShortDocumentCounter:
    """Filter keeping documents with enough words; counts the others in the log (at 1, 10, 100, then every 1000)."""

    def __init__(self, minimum: int, word_starts: np.ndarray):
        self.minimum = minimum
        self.word_starts = word_starts
        self.skipped = 0
        self.seen = 0

    def __call__(self, batch):
        keep = [int(np.count_nonzero(self.word_starts[ids])) >= self.minimum for ids in batch["input_ids"]]
        for kept in keep:
            self.seen += 1
            if not kept:
                self.skipped += 1
                if self.skipped in (1, 10, 100) or self.skipped % 1000 == 0:
                    logger.warning(
                        "Skipped %d document(s) of %d so far, shorter than the %d words the span views need.",
                        self.skipped,
                        self.seen,
                        self.minimum,
                    )
        return keep


def tokenize_documents(
    corpus: Dataset | DatasetDict | IterableDataset,
    tokenizer,
    view: str = "neighbouring_slice",
    span_words: int = SPAN_WORDS,
    hard_negatives: bool = False,
    text_column: str | None = None,
    num_proc: int | None = None,
) -> Dataset | IterableDataset:
    """Tokenize documents (one per row, no special tokens, no truncation) into ``input_ids`` and ``example_index``,
    dropping the documents too short for the views (counted and logged).

    A map-style corpus is processed with `datasets.map`/``filter`` (``num_proc`` processes); a streamed one lazily.
    """
    corpus, text_column, streaming, has_index = resolve_text_column(corpus, text_column)
    columns = corpus.column_names
    minimum = words_needed(view, span_words, hard_negatives)

    def tokenize(batch, indices):
        texts = [text if isinstance(text, str) else "" for text in batch[text_column]]
        encoded = {"input_ids": tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]}
        if has_index:
            encoded[EXAMPLE_INDEX_COLUMN] = list(batch[EXAMPLE_INDEX_COLUMN])
        elif not streaming:
            encoded[EXAMPLE_INDEX_COLUMN] = list(indices)
        return encoded

    word_starts = word_start_table(tokenizer)
    if streaming:
        tokenized = corpus.map(tokenize, batched=True, with_indices=True, remove_columns=columns)
        return tokenized.filter(_ShortDocumentCounter(minimum, word_starts), batched=True)
    total = len(corpus)
    tokenized = corpus.map(
        tokenize, batched=True, with_indices=True, remove_columns=columns, num_proc=num_proc, desc="Tokenizing"
    )
    kept = tokenized.filter(
        lambda batch: [int(np.count_nonzero(word_starts[ids])) >= minimum for ids in batch["input_ids"]],
        batched=True,
        num_proc=num_proc,
        desc="Dropping short documents",
    )
    skipped = total - len(kept)
    if skipped:
        logger.warning(
            "Skipped %d document(s) of %d, shorter than the %d words %s views of %d-word spans need%s.",
            skipped,
            total,
            minimum,
            view,
            span_words,
            " with a hard negative" if hard_negatives else "",
        )
    if len(kept) == 0:
        raise ValueError(
            f"No document of the corpus has the {minimum} words {view} views need: use shorter spans "
            "(--span_words), another view, or a corpus of longer documents (paragraphs rather than sentences)."
        )
    return kept


def _two_distinct_sorted(keys: np.ndarray, population: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two distinct integers of ``range(population)`` per row (population >= 2), uniformly, in increasing order."""
    draws = uniform(keys[:, None], np.arange(2))
    first = np.floor(draws[:, 0] * population).astype(np.int64)
    second = np.floor(draws[:, 1] * (population - 1)).astype(np.int64)
    second += second >= first
    return np.minimum(first, second), np.maximum(first, second)


@dataclass
class SpanViewCollator:
    """Builds DeCLUTR-style span views from tokenized documents (see the module docstring).

    Each feature holds a document's ``input_ids`` (without special tokens: `tokenize_documents`) and optionally
    its ``example_index``. Returns ``input_ids`` and ``attention_mask`` of shape ``(batch, 2 or 3, length)``: anchor,
    positive and (with ``hard_negatives``) hard negative spans, each framed by the tokenizer's special tokens; with
    ``mlm``, also an MLM copy of the unmasked anchor spans (DeCLUTR trains with MLM too).

    Args:
        tokenizer: the model's tokenizer (with a mask token for the slice views).
        view: ``"slice"``, ``"neighbour"`` or ``"neighbouring_slice"``.
        span_words: words per span (32 by default).
        mask_probability: fraction of a span's tokens masked in each slice copy (15%).
        hard_negatives: add a third span of the same document as the anchor's hard negative.
        mlm, mlm_probability: the MLM copy of the anchors.
        max_length: most tokens per view, special tokens included (long words can make 32 words > 32 tokens);
            default: the tokenizer's maximum, at most 512.
        pad_to_multiple_of: pad lengths to a multiple of this.
        seed: the seed every draw derives from; None draws one.
        epoch: the current epoch (kept up to date by `collators.CollatorEpochCallback`).
    """

    tokenizer: PreTrainedTokenizerBase
    view: str = "neighbouring_slice"
    span_words: int = SPAN_WORDS
    mask_probability: float = SPAN_MASK_PROBABILITY
    hard_negatives: bool = False
    mlm: bool = False
    mlm_probability: float = 0.15
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    epoch: int = 0

    def __post_init__(self):
        self.min_words = words_needed(self.view, self.span_words, self.hard_negatives)
        self.masked = self.view in ("slice", "neighbouring_slice")
        if not 0.0 <= self.mask_probability <= 0.5:
            raise ValueError(
                f"mask_probability must be in [0, 0.5] (two disjoint masks), got {self.mask_probability}."
            )
        if (self.masked or self.mlm) and self.tokenizer.mask_token is None:
            raise ValueError(f"{self.view} views and MLM mask tokens, but {type(self.tokenizer).__name__} has none.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        self.prefix, self.suffix = special_token_frame(self.tokenizer)
        limit = self.max_length or min(self.tokenizer.model_max_length or 512, 512)
        self.max_content = limit - len(self.prefix) - len(self.suffix)
        if self.max_content < 1:
            raise ValueError(f"max_length={limit} leaves no room for a span between the special tokens.")
        if self.seed is None:
            self.seed = new_seed()
        self._word_starts = word_start_table(self.tokenizer)
        self._special = special_token_table(self.tokenizer)
        self.skipped_documents = 0

    @property
    def num_views(self) -> int:
        return 3 if self.hard_negatives else 2

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        views = f"{self.view} spans of {self.span_words} words" + (", a third as hard negative" * self.hard_negatives)
        return {"method": "DeCLUTR", "views": views, "hard_negatives": self.hard_negatives}

    def hard_negatives_in_batches(self, dataset) -> bool:
        """Whether a batch gives each anchor a hard negative (`training.sanity` asks): the third span."""
        return bool(self.hard_negatives)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        documents = TokenBatch.from_sequences([f["input_ids"] for f in features], self._special, 0)
        flat = documents.ids[documents.valid]  # all documents' tokens, one after the other
        lengths = documents.lengths
        doc_start = np.cumsum(lengths) - lengths
        first_token = np.zeros(len(flat), dtype=bool)
        first_token[doc_start[lengths > 0]] = True
        is_word_start = (self._word_starts[flat] if len(flat) else np.zeros(0, dtype=bool)) | first_token
        word_start = np.flatnonzero(is_word_start)
        words = np.bincount(row_of(lengths)[word_start], minlength=len(lengths))
        usable = np.flatnonzero(words >= self.min_words)
        if len(usable) < len(features):
            self.skipped_documents += len(features) - len(usable)
            logger.warning(
                "Skipped %d document(s) of the batch shorter than %d words (%d so far); filter them beforehand "
                "with contrastive_hf.recipes.declutr.tokenize_documents.",
                len(features) - len(usable),
                self.min_words,
                self.skipped_documents,
            )
            if not len(usable):
                raise ValueError(f"No document of the batch has the {self.min_words} words the span views need.")
        # word boundaries: each document's word starts followed by its end, so that word w of document d starts at
        # bounds[first_bound[d] + w] and words [a, b) cover the tokens [bounds[first + a], bounds[first + b])
        doc_end = doc_start + lengths
        keys_sorted = np.sort(np.concatenate([word_start * 2 + 1, doc_end * 2]))  # ends before equal starts
        bounds = keys_sorted // 2
        first_bound = np.cumsum(words + 1) - (words + 1)
        identities = example_identities([features[i] for i in usable], documents.take(usable))
        keys = example_keys(self.seed, self.epoch, identities, 0)
        anchor, positive, negative = self._layout(keys, words[usable])
        first = first_bound[usable]

        def token_range(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            begin = bounds[first + word]
            end = np.minimum(bounds[first + word + self.span_words], begin + self.max_content)
            return begin, end

        spans = [token_range(anchor), token_range(positive)]
        if self.hard_negatives:
            spans.append(token_range(negative))
        views = len(spans)
        begins = np.stack([span[0] for span in spans], axis=1).reshape(-1)  # row b * views + v
        ends = np.stack([span[1] for span in spans], axis=1).reshape(-1)
        content = TokenBatch.from_flat(
            flat[np.repeat(begins, ends - begins) + ragged_arange(ends - begins)],
            np.zeros(int((ends - begins).sum()), dtype=bool),
            ends - begins,
            self.tokenizer.pad_token_id,
        )
        # identical spans (e.g. of a document that is in the batch twice) are never each other's negatives
        span_ids = torch.from_numpy(content_hashes(content).view(np.int64)).view(len(usable), views)
        unmasked_anchor = content.take(np.arange(0, len(content), views))
        if self.masked:
            content = self._mask(content, keys, views)
        batch_views = self._frame(content)
        input_ids, attention_mask = batch_views.to_tensors(self.pad_to_multiple_of)
        size = len(usable)
        batch = {
            "input_ids": input_ids.view(size, views, -1),  # (B, 2 or 3, L)
            "attention_mask": attention_mask.view(size, views, -1),
            "sentence_ids": span_ids,
            "input_lengths": host(batch_views.lengths.reshape(size, views)),  # (B, 2 or 3) on the host
        }
        if self.mlm:
            anchors = self._frame(unmasked_anchor)
            mlm_keys = example_keys(self.seed, self.epoch, identities, MLM_VIEW)
            batch.update(mlm_copy(anchors, mlm_keys, self.tokenizer, self.mlm_probability, self.pad_to_multiple_of))
        return batch

    def _layout(self, keys: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """First words of the anchor, positive and hard-negative spans of each document, uniformly placed."""
        width = self.span_words
        pair = width if self.view == "slice" else 2 * width  # words the positive pair covers
        layout_keys = stream(keys, "span_views/layout")
        if not self.hard_negatives:
            anchor = np.floor(uniform(layout_keys, 0) * (words - pair + 1)).astype(np.int64)
            negative = anchor
        else:
            # the pair block and the negative span in a random order, with the free words spread around them:
            # two of the (free + 2) items "free word or block", whose starts are then shifted by the blocks before
            free = words - pair - width
            low, high = _two_distinct_sorted(stream(keys, "span_views/gaps"), free + 2)
            negative_first = uniform(layout_keys, 1) < 0.5
            anchor = np.where(negative_first, high + width - 1, low)
            negative = np.where(negative_first, low, high + pair - 1)
        positive = anchor if self.view == "slice" else anchor + width
        return anchor, positive, negative

    def _mask(self, content: TokenBatch, keys: np.ndarray, views: int) -> TokenBatch:
        """Mask round(mask_probability * n) tokens of each span; the two copies of a slice get disjoint masks."""
        rows = len(content)
        count = np.rint(self.mask_probability * content.lengths).astype(np.int64)
        view_of_row = np.tile(np.arange(views), rows // views)
        document_key = np.repeat(keys, views)
        # a slice's two copies share their priorities (ranks [0, m) masked in one, [m, 2m) in the other);
        # neighbouring spans and hard negatives draw their own
        shared = self.view == "slice"
        draw_view = np.where(shared & (view_of_row < 2), 0, view_of_row)
        mask_keys = combine(stream(document_key, "span_views/mask"), draw_view)
        priority = uniform(mask_keys[:, None], np.arange(content.width))  # (rows, L)
        priority[~content.valid] = 2.0
        ordered = np.sort(priority, axis=1)
        second_copy = shared & (view_of_row == 1)
        low_rank = np.where(second_copy, count, 0)  # mask ranks [low_rank, low_rank + count)
        row_index = np.arange(rows)
        upper = ordered[row_index, np.clip(low_rank + count - 1, 0, content.width - 1)]
        lower = np.where(low_rank > 0, ordered[row_index, np.clip(low_rank - 1, 0, content.width - 1)], -1.0)
        masked = (priority > lower[:, None]) & (priority <= upper[:, None]) & (count > 0)[:, None] & content.valid
        ids = np.where(masked, self.tokenizer.mask_token_id, content.ids)
        return TokenBatch(ids, content.is_special, content.lengths, content.pad_id)

    def _frame(self, content: TokenBatch) -> TokenBatch:
        """Put the tokenizer's special tokens around each span ([CLS] span [SEP], <s> span </s>)."""
        before, after = len(self.prefix), len(self.suffix)
        rows = len(content)
        width = content.width + before + after
        ids = np.full((rows, width), self.tokenizer.pad_token_id, dtype=np.int64)
        is_special = np.ones((rows, width), dtype=bool)
        ids[:, :before] = self.prefix
        ids[:, before : before + content.width] = content.ids
        is_special[:, before : before + content.width] = content.is_special
        row_index = np.arange(rows)[:, None]
        tail = before + content.lengths[:, None] + np.arange(after)  # (N, after)
        ids[row_index, tail] = self.suffix
        is_special[row_index, tail] = True
        lengths = content.lengths + before + after
        ids[np.arange(width) >= lengths[:, None]] = self.tokenizer.pad_token_id
        return TokenBatch(ids, is_special, lengths, self.tokenizer.pad_token_id)
