"""Evaluation during training, as SimCSE selects checkpoints: e.g. STS-B dev Spearman (plus alignment and
uniformity) every ``eval_steps``, logged as ``eval_stsb_spearman`` so that ``metric_for_best_model`` can use it.

An eval dataset that scores a model itself is a `TrainingEvalSet`; `ContrastiveTrainer.evaluate` asks each such set
among its eval datasets for its metrics (`STSData`: `sts_eval_metrics`; `RetrievalData`: recall@k and MRR). Any
other eval dataset gets the Trainer's evaluation (the loss, and ``compute_metrics`` when the trainer has one).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["TrainingEvalSet"]


@runtime_checkable
class TrainingEvalSet(Protocol):
    """An eval dataset that scores a model itself, under the Trainer's metric names (``{prefix}_<metric>``).

    ``training_metrics(model, tokenizer, batch_size, prefix)`` encodes what it needs with ``model`` (in eval mode,
    restoring the model's mode afterwards) and returns the metrics to log. Every process of a distributed run calls
    it (under DeepSpeed ZeRO-3 each forward needs all of them) and must return the same figures. A set may name the
    metric that ranks models on it (``primary_metric``, e.g. ``"spearman"``) and say what it is
    (``primary_metric_description``), which the trainer suggests for ``metric_for_best_model``: such a set logs no
    loss, transformers' default.
    """

    def training_metrics(self, model, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]: ...
