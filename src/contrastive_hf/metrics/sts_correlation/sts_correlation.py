"""STS correlation: Spearman's and Pearson's correlation (x 100) of predicted similarities with gold scores.

This is the measure of the semantic textual similarity tasks as SentEval (Conneau & Kiela, 2018), Sentence-BERT
(Reimers & Gurevych, 2019), SimCSE (Gao et al., 2021) and CLEAR (Wu et al., 2020) report them: the model's similarity
of each sentence pair (the cosine of the two embeddings) is correlated with the human scores, and the correlation is
multiplied by 100. Spearman's rank correlation is the headline figure.

This file is an `evaluate` module script: ``evaluate.load("<path to this folder>")`` loads it offline. It imports
nothing from contrastive_hf, because `evaluate` copies it into its own module cache before importing it.
"""

from __future__ import annotations

import math

import datasets
import evaluate
import numpy as np
from scipy.stats import pearsonr, spearmanr

__all__ = ["STSCorrelation", "sts_correlations"]

_DESCRIPTION = """\
Spearman's rank correlation and Pearson's correlation, both x 100, between predicted similarities of sentence pairs
(e.g. the cosine similarity of their embeddings) and gold similarity scores, as reported for STS12-16, STS-B and
SICK-R. A constant prediction has no correlation with the gold scores and scores 0 (SentEval's convention).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): the model's similarity of each pair (e.g. cosine similarity of the embeddings).
    references (`list` of `float`): the gold similarity of each pair (0-5 for STS, 1-5 for SICK).
Returns:
    spearman (`float`): Spearman's rank correlation x 100, in [-100, 100].
    pearson (`float`): Pearson's correlation x 100, in [-100, 100].
Examples:
    >>> metric = evaluate.load("path/to/sts_correlation")
    >>> metric.compute(predictions=[0.1, 0.5, 0.9], references=[1.0, 2.5, 4.0])
    {'spearman': 100.0, 'pearson': 100.0}
"""

_CITATION = """\
@inproceedings{conneau2018senteval,
  title={SentEval: An Evaluation Toolkit for Universal Sentence Representations},
  author={Conneau, Alexis and Kiela, Douwe},
  booktitle={LREC},
  year={2018}
}
"""


def sts_correlations(predictions, references) -> dict[str, float]:
    """Spearman and Pearson correlations (x 100) of ``predictions`` with ``references`` (equal-length sequences)."""
    predictions = np.asarray(predictions, dtype=np.float64).reshape(-1)
    references = np.asarray(references, dtype=np.float64).reshape(-1)
    if predictions.shape != references.shape:
        raise ValueError(
            f"STS correlation needs one prediction per reference, got {predictions.size} predictions and "
            f"{references.size} references."
        )
    if predictions.size < 2:
        raise ValueError(f"STS correlation needs at least two pairs, got {predictions.size}.")
    if not (np.isfinite(predictions).all() and np.isfinite(references).all()):
        raise ValueError("STS correlation got a NaN or infinite value; check the embeddings and the gold scores.")
    if np.ptp(predictions) == 0 or np.ptp(references) == 0:
        return {"spearman": 0.0, "pearson": 0.0}  # no ranking information: SentEval reports 0 for NaN
    spearman = float(spearmanr(predictions, references).statistic)
    pearson = float(pearsonr(predictions, references).statistic)
    return {
        "spearman": 0.0 if math.isnan(spearman) else spearman * 100,
        "pearson": 0.0 if math.isnan(pearson) else pearson * 100,
    }


class STSCorrelation(evaluate.Metric):
    """Spearman and Pearson correlation (x 100) of predicted similarities with gold STS scores."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
            ),
            reference_urls=["https://github.com/facebookresearch/SentEval"],
        )

    def _compute(self, predictions, references) -> dict[str, float]:
        return sts_correlations(predictions, references)
