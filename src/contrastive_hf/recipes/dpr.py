"""Question-passage data for dual encoders (DPR): column names, tokenization with `datasets`, and the collator.

A training example is a question, its positive passage and optionally a hard negative passage (DPR §3.2 takes a
BM25 passage that does not contain the answer; NLI triples give a contradiction). Queries and passages are tokenized
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

from ..data.collators import sentence_ids
from ..data.corpus import drop_incomplete_rows
from ..data.token_batch import TokenBatch, special_token_table

__all__ = [
    "MODEL_CARD",
    "QUERY_COLUMN_CANDIDATES",
    "POSITIVE_COLUMN_CANDIDATES",
    "HARD_NEGATIVE_COLUMN_CANDIDATES",
    "QueryPassageCollator",
    "drop_incomplete_rows",
    "resolve_query_passage_columns",
    "tokenize_query_passage_pairs",
]

logger = logging.getLogger(__name__)

MODEL_CARD = {
    "name": "DPR",
    "description": "DPR trains a question encoder and a passage encoder so that a question's inner product with its "
    "answering passage exceeds that with the other passages of the batch (and hard negatives); DensePhrases adds the "
    "passages of the previous batches as further negatives.",
    "citation_short": "Karpukhin et al., 2020; Lee et al., 2021",
    "bibtex": "@inproceedings{karpukhin2020dense,\n  title={Dense Passage Retrieval for Open-Domain Question "
    "Answering},\n  author={Karpukhin, Vladimir and O{\\u{g}}uz, Barlas and Min, Sewon and Lewis, Patrick and Wu, "
    "Ledell and Edunov, Sergey and Chen, Danqi and Yih, Wen-tau},\n  booktitle={EMNLP},\n  year={2020}\n}",
}

# Column names tried, in order, when none is given: ours, then common Hub layouts (sentence-transformers' query/answer,
# SimCSE's NLI sent0/sent1/hard_neg, anchor/positive/negative).
QUERY_COLUMN_CANDIDATES = ("query", "question", "anchor", "sent0")
POSITIVE_COLUMN_CANDIDATES = ("positive", "positive_passage", "passage", "answer", "sent1")
HARD_NEGATIVE_COLUMN_CANDIDATES = ("hard_negative", "negative_passage", "negative", "hard_neg")
# The columns `tokenize_query_passage_pairs` writes and `QueryPassageCollator` reads by default.
TOKENIZED_COLUMNS = ("query", "positive", "hard_negative")


def resolve_query_passage_columns(
    column_names: Sequence[str],
    query_column: str | None = None,
    positive_column: str | None = None,
    hard_negative_column: str | None = None,
    use_hard_negatives: bool = True,
) -> tuple[str, str, str | None]:
    """``(query, positive, hard negative or None)`` column names of a dataset.

    Given names must exist; missing ones are detected from the ``*_CANDIDATES`` lists. The hard negative is used
    when ``use_hard_negatives`` and such a column exists (a given ``hard_negative_column`` must exist).
    """
    columns = list(column_names)

    def pick(given: str | None, candidates: Sequence[str], what: str, flag: str, required: bool) -> str | None:
        if given is not None:
            if given not in columns:
                raise ValueError(f"{flag} {given!r} is not a column of the data set; its columns are {columns}.")
            return given
        found = next((name for name in candidates if name in columns), None)
        if found is None and required:
            raise ValueError(
                f"Found no {what} column among {columns} (tried {', '.join(candidates)}): name it with {flag}."
            )
        return found

    query = pick(query_column, QUERY_COLUMN_CANDIDATES, "query", "--query_column", True)
    positive = pick(positive_column, POSITIVE_COLUMN_CANDIDATES, "positive passage", "--positive_column", True)
    if query == positive:
        raise ValueError(f"The query and positive passage columns are both {query!r}: name them apart.")
    hard_negative = None
    if use_hard_negatives:
        hard_negative = pick(
            hard_negative_column, HARD_NEGATIVE_COLUMN_CANDIDATES, "hard negative", "--hard_negative_column", False
        )
    elif hard_negative_column is not None:
        raise ValueError("--hard_negative_column was given but hard negatives are turned off.")
    return query, positive, hard_negative


def tokenize_query_passage_pairs(
    dataset,
    tokenizer,
    columns: tuple[str, str, str | None],
    max_query_length: int = 64,
    max_passage_length: int = 256,
    num_proc: int | None = None,
):
    """Tokenize a `datasets.Dataset` of (query, positive[, hard negative]) texts into the token-id columns ``query``,
    ``positive`` and ``hard_negative`` that `QueryPassageCollator` reads (other columns are dropped).

    Rows with an empty query or passage (or an empty hard negative, when one is used: every row of a batch must have
    one) are dropped first (`drop_incomplete_rows`).
    """
    query_column, positive_column, negative_column = columns
    dataset = drop_incomplete_rows(dataset, columns, num_proc)

    def tokenize(batch):
        encoded = {
            "query": tokenizer(batch[query_column], truncation=True, max_length=max_query_length)["input_ids"],
            "positive": tokenizer(batch[positive_column], truncation=True, max_length=max_passage_length)["input_ids"],
        }
        if negative_column is not None:
            encoded["hard_negative"] = tokenizer(
                batch[negative_column], truncation=True, max_length=max_passage_length
            )["input_ids"]
        return encoded

    return dataset.map(
        tokenize, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc="Tokenizing"
    )


@dataclass
class QueryPassageCollator:
    """Batches of (query, positive passage[, hard negative]) for `DualEncoderModel`.

    Each feature holds the query, its positive passage and optionally a hard negative, as token-id lists (what
    `tokenize_query_passage_pairs` writes) or texts (tokenized here). The hard negative is used when the first
    feature has one; then every feature must.

    Returns ``query_input_ids`` / ``query_attention_mask`` ``(B, Lq)``, ``passage_input_ids`` /
    ``passage_attention_mask`` ``(B, P, Lp)`` (P = 1, or 2 with hard negatives: positive first), and
    ``sentence_ids`` ``(B, 1 + P)``, content hashes of the texts for duplicate masking.

    Args:
        tokenizer: the tokenizer of both encoders.
        columns: the (query, positive[, hard negative]) feature keys.
        max_query_length, max_passage_length: truncation of texts tokenized here (DPR: 256 for passages).
        pad_to_multiple_of: pad lengths to a multiple of this.
    """

    tokenizer: PreTrainedTokenizerBase
    columns: Sequence[str] = TOKENIZED_COLUMNS
    max_query_length: int | None = 64
    max_passage_length: int | None = 256
    pad_to_multiple_of: int | None = None

    def __post_init__(self):
        if len(self.columns) not in (2, 3):
            raise ValueError(f"columns must name (query, positive[, hard negative]), got {self.columns}.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token before building batches.")
        self._special = special_token_table(self.tokenizer)

    def _column(self, features: list[dict[str, Any]], column: str, max_length: int | None) -> TokenBatch:
        values = [feature.get(column) for feature in features]
        for row, value in enumerate(values):
            if value is None or len(value) == 0 or (isinstance(value, str) and not value.strip()):
                raise ValueError(f"Example {row} of the batch has no {column!r}; drop incomplete rows first.")
        texts = [row for row, value in enumerate(values) if isinstance(value, str)]
        if texts:
            encoded = self.tokenizer(
                [values[row] for row in texts], truncation=max_length is not None, max_length=max_length
            )["input_ids"]
            for row, ids in zip(texts, encoded, strict=True):
                values[row] = ids
        return TokenBatch.from_sequences(values, self._special, self.tokenizer.pad_token_id)

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        hard = len(self.columns) == 3
        return {
            "method": "DPR",
            "views": "questions and their passages" + (", hard negatives" * hard),
            "hard_negatives": hard,
        }

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        query_column, positive_column = self.columns[:2]
        negative_column = self.columns[2] if len(self.columns) == 3 else None
        if negative_column is not None and features[0].get(negative_column) is None:
            negative_column = None  # pairs only
        queries = self._column(features, query_column, self.max_query_length)
        passage_columns = [self._column(features, positive_column, self.max_passage_length)]
        if negative_column is not None:
            passage_columns.append(self._column(features, negative_column, self.max_passage_length))
        size, per_query = len(features), len(passage_columns)
        # row i * P + c: passage c of example i; all padded together to the longest passage
        rows = [np.arange(size) * per_query + column for column in range(per_query)]
        passages = TokenBatch.stack(passage_columns, rows, size * per_query, queries.pad_id)
        query_input_ids, query_attention_mask = queries.to_tensors(self.pad_to_multiple_of)
        passage_input_ids, passage_attention_mask = passages.to_tensors(self.pad_to_multiple_of)
        return {
            "query_input_ids": query_input_ids,  # (B, Lq)
            "query_attention_mask": query_attention_mask,
            "passage_input_ids": passage_input_ids.view(size, per_query, -1),  # (B, P, Lp)
            "passage_attention_mask": passage_attention_mask.view(size, per_query, -1),
            "sentence_ids": sentence_ids(queries, *passage_columns),  # (B, 1 + P)
        }
