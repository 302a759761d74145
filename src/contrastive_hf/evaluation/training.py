"""Evaluation during training, as SimCSE selects checkpoints: e.g. STS-B dev Spearman (plus alignment and
uniformity) every ``eval_steps``, logged as ``eval_stsb_spearman`` so that ``metric_for_best_model`` can use it.

An eval dataset that scores a model itself is a `TrainingEvalSet`; `ContrastiveTrainer.evaluate` asks each such set
among its eval datasets for its metrics (`STSData`: `sts_eval_metrics`; `RetrievalData`: recall@k and MRR). Any
other eval dataset gets the Trainer's loss evaluation.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .alignment import alignment_uniformity_from_vectors
from .encoders import as_encoder
from .sts import STSData, cosine_similarities, sts_correlations

__all__ = ["TrainingEvalSet", "sts_eval_metrics"]


@runtime_checkable
class TrainingEvalSet(Protocol):
    """An eval dataset that scores a model itself, under the Trainer's metric names (``{prefix}_<metric>``).

    ``training_metrics(model, tokenizer, batch_size, prefix)`` encodes what it needs with ``model`` (in eval mode,
    restoring the model's mode afterwards) and returns the metrics to log. Every process of a distributed run calls
    it (under DeepSpeed ZeRO-3 each forward needs all of them) and must return the same figures.
    """

    def training_metrics(self, model, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]: ...


def sts_eval_metrics(model, data: STSData, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]:
    """``{prefix}_spearman``, ``{prefix}_pearson`` (x 100), ``{prefix}_alignment`` (when ``data`` has pairs scored
    >= 4) and ``{prefix}_uniformity`` of ``model`` on ``data``, from one encoding pass of its distinct sentences.

    The model is put in eval mode for the pass and back in its previous mode afterwards. Every process of a
    distributed run computes the same figures (under DeepSpeed ZeRO-3 each forward needs all of them).
    """
    encoder = as_encoder(model, tokenizer=tokenizer)
    sentences = list(dict.fromkeys(data.sentences1 + data.sentences2))
    vectors = dict(zip(sentences, encoder.encode(sentences, batch_size=batch_size), strict=True))
    similarities = cosine_similarities([vectors[s] for s in data.sentences1], [vectors[s] for s in data.sentences2])
    correlations = sts_correlations(similarities, data.scores)
    geometry = alignment_uniformity_from_vectors(data, vectors)
    metrics = {
        f"{prefix}_spearman": correlations["spearman"],
        f"{prefix}_pearson": correlations["pearson"],
        f"{prefix}_uniformity": geometry["uniformity"],
    }
    if geometry["alignment"] is not None:
        metrics[f"{prefix}_alignment"] = geometry["alignment"]
    return metrics
