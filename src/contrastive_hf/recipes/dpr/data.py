"""Question-passage data for dual encoders (DPR): tokenization with `datasets` and the collator (the columns they
read are found by `contrastive_hf.data.columns`).

A training example is a question, its positive passage and optionally k hard negative passages (DPR §3.2 takes a
BM25 passage that does not contain the answer; NLI triples give a contradiction; `contrastive-hf mine` finds them
with a trained model). Queries and passages are tokenized
with their own length limits and padded separately, so a short question is never padded to a passage's length.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ...data.collators import RolePrompts, column_views, first_example, negative_columns, sentence_ids
from ...data.reading import drop_incomplete_rows
from ...data.token_batch import TokenBatch, special_token_table
from ...models.host_data import host

__all__ = [
    "TOKENIZED_COLUMNS",
    "QueryPassageCollator",
    "tokenized_columns",
    "tokenize_query_passage_pairs",
]

logger = logging.getLogger(__name__)


# The columns `tokenize_query_passage_pairs` writes and `QueryPassageCollator` reads by default (with k > 1 hard
# negatives: hard_negative_1, ..., hard_negative_k, see `tokenized_columns`).
TOKENIZED_COLUMNS = ("query", "positive", "hard_negative")


def tokenized_columns(num_negatives: int) -> tuple[str, ...]:
    """The columns `tokenize_query_passage_pairs` writes for pairs with ``num_negatives`` hard negatives each."""
    if num_negatives <= 1:
        return TOKENIZED_COLUMNS[: 2 + num_negatives]
    return (*TOKENIZED_COLUMNS[:2], *(f"hard_negative_{index}" for index in range(1, num_negatives + 1)))


def tokenize_query_passage_pairs(
    dataset,
    tokenizer,
    columns: Sequence[str | None],
    max_query_length: int = 64,
    max_passage_length: int = 256,
    num_proc: int | None = None,
):
    """Tokenize a `datasets.Dataset` of (query, positive, k hard negatives) texts into the token-id columns
    `tokenized_columns` names (``query``, ``positive``, then ``hard_negative`` or ``hard_negative_1..k``), which
    `QueryPassageCollator` reads; other columns are dropped. ``columns`` is what `resolve_query_passage_columns`
    returns (None entries are ignored).

    Rows with an empty query or passage (or an empty hard negative, when they are used: every row of a batch must
    have them) are dropped first (`drop_incomplete_rows`).
    """
    columns = [column for column in columns if column is not None]
    dataset = drop_incomplete_rows(dataset, columns, num_proc)
    names = tokenized_columns(len(columns) - 2)

    def tokenize(batch):
        encoded = {}
        for index, (column, name) in enumerate(zip(columns, names, strict=True)):
            limit = max_query_length if index == 0 else max_passage_length
            texts = batch[column]
            if texts and not isinstance(texts[0], str):  # a list of negatives per row
                sizes = [len(row) for row in texts]
                flat = tokenizer([text for row in texts for text in row], truncation=True, max_length=limit)
                starts = np.cumsum([0, *sizes])
                encoded[name] = [flat["input_ids"][a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
            else:
                encoded[name] = tokenizer(texts, truncation=True, max_length=limit)["input_ids"]
        return encoded

    return dataset.map(
        tokenize, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc="Tokenizing"
    )


@dataclass
class QueryPassageCollator:
    """Batches of (query, positive passage, k hard negatives) for `DualEncoderModel`.

    Each feature holds the query, its positive passage and optionally hard negatives, as token-id lists (what
    `tokenize_query_passage_pairs` writes) or texts (tokenized here). A hard-negative column may hold a list of
    negatives per row; every row of a batch needs the same number. Negative columns are used when the first feature
    has them; then every feature must.

    Returns ``query_input_ids`` / ``query_attention_mask`` ``(B, Lq)``, ``passage_input_ids`` /
    ``passage_attention_mask`` ``(B, 1 + k, Lp)`` (the positive first), and ``sentence_ids`` ``(B, 2 + k)``, content
    hashes of the texts for duplicate masking.

    Args:
        tokenizer: the tokenizer of both encoders.
        columns: the (query, positive, hard negatives...) feature keys; default ``query``, ``positive`` and the
            hard-negative columns `tokenize_query_passage_pairs` writes (``hard_negative`` or
            ``hard_negative_1..k``), when the features have them.
        max_query_length, max_passage_length: truncation of texts tokenized here (DPR: 256 for passages).
        pad_to_multiple_of: pad lengths to a multiple of this.
        prompts, include_prompt: the model config's: queries are prefixed with the ``query`` prompt and passages
            with the ``document`` one (as `encode_query` / `encode_document` prefix them), and with
            ``include_prompt=False`` the batch carries ``prompt_lengths`` ``(B, 2 + k)`` so that the prompts are left
            out of the pooling in training as at inference (`collators.RolePrompts`). Prompts need text features.
    """

    tokenizer: PreTrainedTokenizerBase
    columns: Sequence[str] | None = None
    max_query_length: int | None = 64
    max_passage_length: int | None = 256
    pad_to_multiple_of: int | None = None
    prompts: dict[str, str] | None = None
    include_prompt: bool = True

    def __post_init__(self):
        if self.columns is not None and (isinstance(self.columns, str) or len(self.columns) < 2):
            raise ValueError(f"columns must name (query, positive, hard negatives...), got {self.columns}.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        self._special = special_token_table(self.tokenizer)
        self._prompts = RolePrompts(self.tokenizer, self.prompts, self.include_prompt)
        self._prompts.refuse_filling(
            self.tokenizer,
            {
                "query": (self.max_query_length, "max_query_length", None),  # the scripts' flags of the same names
                "document": (self.max_passage_length, "max_passage_length", None),
            },
        )
        self.resolved_columns: tuple[str, ...] | None = None

    def resolve_columns(self, feature: dict[str, Any]) -> tuple[str, ...]:
        """The columns a batch is built from: the given or default ones that the (first) feature has."""
        if self.columns is not None:
            columns = tuple(self.columns)
        else:
            columns = (*TOKENIZED_COLUMNS[:2], *negative_columns(list(feature), TOKENIZED_COLUMNS[2:]))
        return columns[:2] + tuple(name for name in columns[2:] if feature.get(name) is not None)

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        columns = self.resolved_columns or tuple(self.columns or TOKENIZED_COLUMNS[:2])
        negatives = len(columns) - 2
        return {
            "method": "DPR",
            "views": "questions and their passages" + (f", {negatives} hard negative column(s)" * (negatives > 0)),
            "hard_negatives": negatives,
        }

    def hard_negatives_in_batches(self, dataset) -> bool | None:
        """Whether a batch gives each query hard negative passages (`training.sanity` asks): negative columns that
        ``dataset``'s first example fills; None for a stream, unread before training."""
        if self.columns is not None and len(self.columns) < 3:
            return False
        first = first_example(dataset)
        return None if first is None else len(self.resolve_columns(first)) > 2

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        columns = self.resolved_columns = self.resolve_columns(features[0])
        prompt = self._prompts.of_column
        (queries,) = column_views(features, columns[0], self.tokenizer, self.max_query_length, prompt(0))
        passage_views = [
            view
            for column in columns[1:]
            for view in column_views(features, column, self.tokenizer, self.max_passage_length, prompt(1))
        ]
        size, per_query = len(features), len(passage_views)
        passages = [passage_views[view][row] for row in range(size) for view in range(per_query)]  # row-major
        queries = TokenBatch.from_sequences(queries, self._special, self.tokenizer.pad_token_id)
        passages = TokenBatch.from_sequences(passages, self._special, self.tokenizer.pad_token_id)
        query_input_ids, query_attention_mask = queries.to_tensors(self.pad_to_multiple_of)
        passage_input_ids, passage_attention_mask = passages.to_tensors(self.pad_to_multiple_of)
        batch = {
            "query_input_ids": query_input_ids,  # (B, Lq)
            "query_attention_mask": query_attention_mask,
            "passage_input_ids": passage_input_ids.view(size, per_query, -1),  # (B, 1 + k, Lp)
            "passage_attention_mask": passage_attention_mask.view(size, per_query, -1),
            "sentence_ids": sentence_ids(  # (B, 2 + k)
                queries, *(passages.take(np.arange(view, size * per_query, per_query)) for view in range(per_query))
            ),
            "query_lengths": host(queries.lengths),  # (B,) on the host
            "passage_lengths": host(passages.lengths.reshape(size, per_query)),  # (B, 1 + k) on the host
        }
        prompt_lengths = self._prompts.lengths_array(size, [1, per_query])
        if prompt_lengths is not None:
            batch["prompt_lengths"] = prompt_lengths  # (B, 1 + P)
        return batch
