"""GLUE's tasks (Wang et al., 2019) and the metrics CLEAR reports on them (`glue.py` fine-tunes and scores).

**Metrics** (CLEAR's, x 100): accuracy (SST-2, QNLI, RTE, WNLI); the mean of accuracy and F1 of the positive class
(MRPC, QQP); the mean of Pearson's and Spearman's correlation (STS-B); Matthews' correlation (CoLA); the mean of the
matched and mismatched accuracies (MNLI); and the unweighted average of the tasks run. A task's score is the mean of
its figures, which is each of these rules. The group ``glue`` is the eight tasks of CLEAR's, RoBERTa's and BERT's
tables (MNLI, QNLI, QQP, RTE, SST-2, MRPC, CoLA, STS-B); WNLI, which they leave out, runs when named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "GLUE_GROUP",
    "GLUE_TASKS",
    "GlueTask",
    "glue_task",
    "Metric",
    "METRICS",
    "accuracy",
    "binary_f1",
    "matthews_correlation",
    "split_metrics",
    "task_score",
    "figure_name",
]


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its files, its Hub configuration, its labels and its metric.

    ``file_columns`` are the files' text columns then their label column: header names, or positions for files
    without a header (CoLA). ``labels`` are the class names in the Hub's order (the label ids); empty for a regression
    (STS-B). ``dev_splits`` are ``(Hub split, file, key)``: the key names the split's figures (``accuracy_matched``).
    """

    name: str
    config: str
    text_columns: tuple[str, ...]
    file_columns: tuple[str | int, ...]
    labels: tuple[str, ...] = ()
    metric: str = "accuracy"  # one of METRICS
    labels_written_as_names: bool = False  # MNLI, QNLI, RTE write "entailment", not ids
    dev_splits: tuple[tuple[str, str, str], ...] = (("validation", "dev.tsv", "dev"),)
    # rows with a field missing are dropped (QQP), as transformers' GLUE reader and the Hub's GLUE builder drop them
    skip_short_rows: bool = False

    @property
    def is_regression(self) -> bool:
        return not self.labels


_NLI = ("entailment", "not_entailment")
GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        GlueTask(
            "MNLI", "mnli", ("premise", "hypothesis"), ("sentence1", "sentence2", "gold_label"),
            ("entailment", "neutral", "contradiction"), labels_written_as_names=True,
            dev_splits=(
                ("validation_matched", "dev_matched.tsv", "matched"),
                ("validation_mismatched", "dev_mismatched.tsv", "mismatched"),
            ),
        ),
        GlueTask("QNLI", "qnli", ("question", "sentence"), ("question", "sentence", "label"), _NLI,
                 labels_written_as_names=True),
        GlueTask("QQP", "qqp", ("question1", "question2"), ("question1", "question2", "is_duplicate"),
                 ("not_duplicate", "duplicate"), metric="accuracy_f1", skip_short_rows=True),
        GlueTask("RTE", "rte", ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"), _NLI,
                 labels_written_as_names=True),
        GlueTask("SST-2", "sst2", ("sentence",), ("sentence", "label"), ("negative", "positive")),
        GlueTask("MRPC", "mrpc", ("sentence1", "sentence2"), ("#1 String", "#2 String", "Quality"),
                 ("not_equivalent", "equivalent"), metric="accuracy_f1"),
        # CoLA's files have no header: source, label, the original annotation, sentence
        GlueTask("CoLA", "cola", ("sentence",), (3, 1), ("unacceptable", "acceptable"),
                 metric="matthews_correlation"),
        GlueTask("STS-B", "stsb", ("sentence1", "sentence2"), ("sentence1", "sentence2", "score"),
                 metric="pearson_spearman"),
        GlueTask("WNLI", "wnli", ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"),
                 ("not_entailment", "entailment")),
    )
}  # fmt: skip
GLUE_GROUP = ("MNLI", "QNLI", "QQP", "RTE", "SST-2", "MRPC", "CoLA", "STS-B")  # CLEAR's and RoBERTa's order


def glue_task(task: str | GlueTask) -> GlueTask:
    """The `GlueTask` named ``task`` (or ``task`` itself); a ValueError listing the tasks for an unknown name."""
    if isinstance(task, GlueTask):
        return task
    if task not in GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {task!r}; the tasks are {', '.join(GLUE_TASKS)}.")
    return GLUE_TASKS[task]


# Metrics ----------------------------------------------------------------------------------------------------


def accuracy(predictions, references) -> float:
    """Accuracy x 100."""
    predictions, references = np.asarray(predictions), np.asarray(references)
    return 100.0 * float(np.mean(predictions == references))


def binary_f1(predictions, references, positive: int = 1) -> float:
    """F1 x 100 of the class ``positive`` (MRPC's paraphrases, QQP's duplicates); 0 when neither the predictions nor
    the references hold it."""
    predictions, references = np.asarray(predictions) == positive, np.asarray(references) == positive
    true_positives = int(np.sum(predictions & references))
    wrong = int(np.sum(predictions != references))  # false positives + false negatives
    denominator = 2 * true_positives + wrong
    return 100.0 * 2 * true_positives / denominator if denominator else 0.0


def matthews_correlation(predictions, references) -> float:
    """Matthews' correlation coefficient x 100 (its multi-class form, Gorodkin 2004), from the confusion matrix; 0
    when predictions or references hold a single class (the coefficient is undefined there)."""
    predictions, references = np.asarray(predictions), np.asarray(references)
    classes = np.union1d(predictions, references)
    confusion = np.zeros((classes.size, classes.size), dtype=np.float64)  # (true, predicted)
    np.add.at(confusion, (np.searchsorted(classes, references), np.searchsorted(classes, predictions)), 1)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    total, correct = confusion.sum(), np.trace(confusion)
    covariance = correct * total - predicted_counts @ true_counts
    denominator = math.sqrt((total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts))
    return 100.0 * covariance / denominator if denominator else 0.0


def _pearson_spearman(predictions, references) -> dict[str, float]:
    from .sts import sts_correlations  # the STS tasks' correlations: scipy's, x 100, 0 for a constant prediction

    correlations = sts_correlations(predictions, references)
    return {"pearson": correlations["pearson"], "spearman": correlations["spearman"]}


class Metric(NamedTuple):
    """A task's metric: the names of its figures, how they are computed from predictions and references, and how
    its score is described."""

    figures: tuple[str, ...]
    compute: Callable[[np.ndarray, np.ndarray], dict[str, float]]
    description: str


METRICS: dict[str, Metric] = {
    "accuracy": Metric(("accuracy",), lambda p, r: {"accuracy": accuracy(p, r)}, "accuracy"),
    "accuracy_f1": Metric(
        ("accuracy", "f1"), lambda p, r: {"accuracy": accuracy(p, r), "f1": binary_f1(p, r)}, "mean of accuracy and F1"
    ),
    "matthews_correlation": Metric(
        ("matthews_correlation",),
        lambda p, r: {"matthews_correlation": matthews_correlation(p, r)},
        "Matthews correlation",
    ),
    "pearson_spearman": Metric(("pearson", "spearman"), _pearson_spearman, "mean of Pearson and Spearman"),
}


def split_metrics(task: str | GlueTask, outputs, references) -> dict[str, float]:
    """The figures of ``task`` on one dev split from the model's ``outputs`` (logits ``(n, classes)``, or ``(n, 1)``
    predictions of a regression)."""
    task = glue_task(task)
    outputs = np.asarray(outputs)
    predictions = outputs.reshape(-1) if task.is_regression else outputs.argmax(axis=-1)
    return METRICS[task.metric].compute(predictions, np.asarray(references).reshape(-1))


def task_score(figures: dict[str, float]) -> float:
    """A task's score: the mean of its figures (accuracy and F1; Pearson and Spearman; matched and mismatched
    accuracy), or its one figure."""
    return float(np.mean(list(figures.values())))


def figure_name(metric: str, key: str) -> str:
    """The name of a figure of one dev split: ``accuracy``, or with MNLI's split key ``accuracy_matched``."""
    return metric if key == "dev" else f"{metric}_{key}"
