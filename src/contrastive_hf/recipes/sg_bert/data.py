"""SG-BERT's batches: each sentence once (its views come from BERT_F's layers, not from augmentation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...data.collators import pad_sequences
from ...models.host_data import host

__all__ = ["SelfGuidedCollator"]


@dataclass
class SelfGuidedCollator:
    """Pads sentences into ``input_ids`` / ``attention_mask`` ``(B, T)``: SG-BERT needs each sentence once.

    Features hold ``input_ids`` (e.g. from `contrastive_hf.data.tokenize_corpus`) or raw text in ``text_column``,
    tokenized here and truncated to ``max_length``. Other columns (``example_index``...) are dropped.
    """

    tokenizer: Any
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    text_column: str = "text"

    def __post_init__(self):
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no padding token; set tokenizer.pad_token before collating batches.")

    def card_description(self) -> dict:
        """What a model card says about these batches (`hub.model_card.card_info_from_trainer`)."""
        return {"method": "SG-BERT", "views": "none: the pooled layers of a frozen copy of the encoder"}

    def hard_negatives_in_batches(self, dataset) -> None:
        """Whether a batch gives each query hard negatives (`training.sanity` asks): SG-BERT's views are the frozen
        copy's layers, drawn in the model, not in the batch: None."""
        return None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if "input_ids" in features[0]:
            sequences = [feature["input_ids"] for feature in features]
        elif self.text_column in features[0]:
            texts = [feature[self.text_column] for feature in features]
            truncate = self.max_length is not None
            sequences = self.tokenizer(texts, truncation=truncate, max_length=self.max_length)["input_ids"]
        else:
            raise ValueError(
                f"SelfGuidedCollator needs 'input_ids' or a {self.text_column!r} column, got the keys "
                f"{sorted(features[0])}; set text_column to the column holding the sentences."
            )
        input_ids, attention_mask = pad_sequences(sequences, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        lengths = np.fromiter((len(sequence) for sequence in sequences), dtype=np.int64, count=len(sequences))
        # the lengths on the host too (models.host_data): the model then reads nothing back from the device
        return {"input_ids": input_ids, "attention_mask": attention_mask, "input_lengths": host(lengths)}
