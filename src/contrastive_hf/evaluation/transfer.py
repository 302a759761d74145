"""SentEval's transfer tasks (Conneau & Kiela, 2018): a logistic-regression classifier (scikit-learn) on frozen
sentence embeddings, accuracy in %.

The protocol is SentEval's, as SimCSE's Table 7 and CLEAR report it:

- MR, CR, SUBJ, MPQA (one file per class): 10-fold cross-validation; on each training fold an inner 10-fold
  cross-validation chooses the inverse L2 penalty C (SentEval's ``InnerKFoldClassifier``).
- SST-2 (train/dev/test): C chosen on dev, accuracy on test (``SplitClassifier``).
- TREC, MRPC (train/test): C chosen by 10-fold cross-validation on train, then the classifier is trained on all of
  train and tested on test (``KFoldClassifier``). An MRPC pair (u, v) is represented by [|u - v|, u * v].

Penalty grids are SentEval's for scikit-learn: C in {2^-2, ..., 2^3} for the first two protocols and
{2^-1, ..., 2^5} for the third; fold splits are stratified and shuffled with the seed (SentEval's 1111). Cross-
validation scores are rounded to two decimals before the best C is taken (the first on ties), as SentEval does.
Files follow SentEval's layout (``data/downstream/MR/rt-polarity.pos`` ...); sentences are whitespace-normalised
as SentEval tokenizes them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._files import naming_undecodable_line
from .._optional import require
from .encoders import as_encoder
from .layout import require_files, resolve_task_directory

__all__ = [
    "TRANSFER_TASKS",
    "INNER_KFOLD_GRID",
    "KFOLD_GRID",
    "ClassificationData",
    "PairClassificationData",
    "read_binary_task",
    "read_sst2",
    "read_trec",
    "read_mrpc",
    "load_transfer_task",
    "load_transfer_tasks",
    "inner_kfold_accuracy",
    "kfold_accuracy",
    "split_accuracy",
    "pair_features",
    "evaluate_transfer",
]

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
INNER_KFOLD_GRID = tuple(2.0**t for t in range(-2, 4))  # also SST-2's dev-selected grid
KFOLD_GRID = tuple(2.0**t for t in range(-1, 6))
SEED = 1111  # SentEval's default

# (file, label) per class, SentEval's order and labels.
_BINARY_FILES = {
    "MR": (("rt-polarity.pos", 1), ("rt-polarity.neg", 0)),
    "CR": (("custrev.pos", 1), ("custrev.neg", 0)),
    "SUBJ": (("subj.objective", 1), ("subj.subjective", 0)),
    "MPQA": (("mpqa.pos", 1), ("mpqa.neg", 0)),
}
_FOLDERS = {"MR": ("MR",), "CR": ("CR",), "SUBJ": ("SUBJ",), "MPQA": ("MPQA",), "SST2": ("SST/binary",)}
_FOLDERS.update(TREC=("TREC",), MRPC=("MRPC",))
_SST_FILES = {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"}
_TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}
_TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
_MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


@dataclass
class ClassificationData:
    """Sentences with integer class labels."""

    sentences: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class PairClassificationData:
    """Sentence pairs with integer class labels (MRPC: 1 = paraphrase)."""

    sentences1: list[str]
    sentences2: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


def _normalise(sentence: str) -> str:
    return " ".join(sentence.split())


def _lines(path: str, encoding: str) -> list[tuple[int, str]]:
    with open(path, encoding=encoding) as handle, naming_undecodable_line(path, encoding):
        return [(number, line.rstrip("\n").lstrip("\ufeff")) for number, line in enumerate(handle, start=1)]


def _label(raw: str, path: str, number: int, allowed: Sequence[int] = (0, 1)) -> int:
    try:
        label = int(raw.strip())
    except ValueError:
        label = None
    if label not in allowed:
        raise ValueError(f"{path}:{number}: label {raw.strip()!r} is not one of {', '.join(map(str, allowed))}.")
    return label


def read_binary_task(directory: str | os.PathLike, task: str) -> ClassificationData:
    """MR, CR, SUBJ or MPQA from its folder: one sentence per line in one file per class (latin-1, as SentEval)."""
    if task not in _BINARY_FILES:
        raise ValueError(f"{task!r} is not one of the one-file-per-class tasks {', '.join(_BINARY_FILES)}.")
    files = _BINARY_FILES[task]
    paths = require_files(task, os.fspath(directory), [name for name, _ in files])
    data = ClassificationData([], [])
    for path, (_, label) in zip(paths, files, strict=True):
        # empty lines stay, as in SentEval (CR has four), so that task sizes match the published ones
        sentences = [_normalise(line) for _, line in _lines(path, "latin-1")]
        if not any(sentences):
            raise ValueError(f"{path} holds no sentence.")
        data.sentences += sentences
        data.labels += [label] * len(sentences)
    return data


def read_sst2(directory: str | os.PathLike) -> dict[str, ClassificationData]:
    """SST-2 (SentEval's ``SST/binary``): ``sentiment-{train,dev,test}``, each line ``sentence<TAB>label``."""
    paths = require_files("SST2", os.fspath(directory), list(_SST_FILES.values()))
    splits = {}
    for split, path in zip(_SST_FILES, paths, strict=True):
        data = ClassificationData([], [])
        for number, line in _lines(path, "utf-8"):
            if not line.strip():
                continue
            sentence, tab, raw = line.rpartition("\t")
            if not tab:
                raise ValueError(f"{path}:{number}: expected 'sentence<TAB>label', found no tab.")
            data.sentences.append(_normalise(sentence))
            data.labels.append(_label(raw, path, number))
        splits[split] = data
    return splits


def read_trec(directory: str | os.PathLike) -> dict[str, ClassificationData]:
    """TREC question types: ``train_5500.label`` and ``TREC_10.label``, lines ``COARSE:fine question`` (latin-1);
    the six coarse classes are the labels."""
    paths = require_files("TREC", os.fspath(directory), list(_TREC_FILES.values()))
    splits = {}
    for split, path in zip(_TREC_FILES, paths, strict=True):
        data = ClassificationData([], [])
        for number, line in _lines(path, "latin-1"):
            if not line.strip():
                continue
            coarse, colon, rest = line.strip().partition(":")
            _, space, question = rest.partition(" ")
            if not colon or not space or coarse not in _TREC_CLASSES:
                raise ValueError(
                    f"{path}:{number}: expected 'COARSE:fine question' with COARSE one of {', '.join(_TREC_CLASSES)}, "
                    f"got {line[:60]!r}."
                )
            data.sentences.append(_normalise(question))
            data.labels.append(_TREC_CLASSES.index(coarse))
        splits[split] = data
    return splits


def read_mrpc(directory: str | os.PathLike) -> dict[str, PairClassificationData]:
    """MRPC: ``msr_paraphrase_{train,test}.txt``, tab-separated with a header: Quality, #1 ID, #2 ID, #1 String,
    #2 String."""
    paths = require_files("MRPC", os.fspath(directory), list(_MRPC_FILES.values()))
    splits = {}
    for split, path in zip(_MRPC_FILES, paths, strict=True):
        data = PairClassificationData([], [], [])
        for number, line in _lines(path, "utf-8")[1:]:
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) < 5:
                raise ValueError(
                    f"{path}:{number}: expected 5 tab-separated columns (Quality, #1 ID, #2 ID, #1 String, "
                    f"#2 String), got {len(columns)}."
                )
            data.labels.append(_label(columns[0], path, number))
            data.sentences1.append(_normalise(columns[3]))
            data.sentences2.append(_normalise(columns[4]))
        if not data.labels:
            raise ValueError(f"{path} holds no sentence pair.")
        splits[split] = data
    return splits


def load_transfer_task(data_dir: str | os.PathLike, task: str):
    """The data of one of `TRANSFER_TASKS` found under ``data_dir`` (SentEval's layout)."""
    if task not in TRANSFER_TASKS:
        raise ValueError(f"Unknown transfer task {task!r}; choose from {', '.join(TRANSFER_TASKS)}.")
    holds = {
        **{name: " and ".join(f for f, _ in files) for name, files in _BINARY_FILES.items()},
        "SST2": ", ".join(_SST_FILES.values()),
        "TREC": ", ".join(_TREC_FILES.values()),
        "MRPC": ", ".join(_MRPC_FILES.values()),
    }[task]
    directory = resolve_task_directory(data_dir, task, _FOLDERS[task], holds)
    if task in _BINARY_FILES:
        return read_binary_task(directory, task)
    return {"SST2": read_sst2, "TREC": read_trec, "MRPC": read_mrpc}[task](directory)


def load_transfer_tasks(data_dir: str | os.PathLike, tasks: Sequence[str] = TRANSFER_TASKS) -> dict:
    """``{task: data}`` for ``tasks`` found under ``data_dir``."""
    unknown = [task for task in tasks if task not in TRANSFER_TASKS]
    if unknown:
        raise ValueError(f"Unknown transfer task(s) {', '.join(unknown)}; choose from {', '.join(TRANSFER_TASKS)}.")
    if data_dir is None:
        raise ValueError("The transfer tasks need a data directory laid out like SentEval's (--data-dir).")
    return {task: load_transfer_task(data_dir, task) for task in tasks}


def _one_blas_thread():
    """Logistic regression on embeddings is many small solves: multi-threaded BLAS costs more than it gains (about
    9x slower on 2 shared cores for 10k x 384 features), so each fit runs on one thread (processes: ``n_jobs``)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _classifier(penalty: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    # lbfgs with room to converge; SentEval ran scikit-learn's then-default solver with its default iterations
    return LogisticRegression(C=penalty, random_state=seed, max_iter=1000)


def _choose_penalty(features, labels, grid, kfold: int, seed: int, n_jobs: int | None) -> tuple[float, float]:
    """The C of ``grid`` with the best mean cross-validated accuracy (%, rounded to 2 decimals) and that accuracy."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    folds = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed)
    scores = [
        round(100 * cross_val_score(_classifier(c, seed), features, labels, cv=folds, n_jobs=n_jobs).mean(), 2)
        for c in grid
    ]
    best = int(np.argmax(scores))
    return grid[best], scores[best]


def inner_kfold_accuracy(
    features: np.ndarray,
    labels: np.ndarray,
    kfold: int = 10,
    seed: int = SEED,
    grid: Sequence[float] = INNER_KFOLD_GRID,
    n_jobs: int | None = None,
) -> dict[str, float]:
    """Mean test accuracy (%) over ``kfold`` stratified folds, C chosen on each training fold by an inner
    ``kfold``-fold cross-validation (SentEval's InnerKFoldClassifier)."""
    from sklearn.model_selection import StratifiedKFold

    features, labels = np.asarray(features), np.asarray(labels)
    outer = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed)
    dev_scores, test_scores = [], []
    with _one_blas_thread():
        for train, test in outer.split(features, labels):
            penalty, dev = _choose_penalty(features[train], labels[train], grid, kfold, seed, n_jobs)
            classifier = _classifier(penalty, seed).fit(features[train], labels[train])
            dev_scores.append(dev)
            test_scores.append(100 * classifier.score(features[test], labels[test]))
    return {"accuracy": float(np.mean(test_scores)), "dev_accuracy": float(np.mean(dev_scores))}


def kfold_accuracy(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    kfold: int = 10,
    seed: int = SEED,
    grid: Sequence[float] = KFOLD_GRID,
    n_jobs: int | None = None,
) -> dict:
    """Test accuracy (%) with C chosen by ``kfold``-fold cross-validation on train (SentEval's KFoldClassifier);
    also returns the test predictions."""
    with _one_blas_thread():
        penalty, dev = _choose_penalty(np.asarray(train_features), np.asarray(train_labels), grid, kfold, seed, n_jobs)
        classifier = _classifier(penalty, seed).fit(train_features, train_labels)
        predictions = classifier.predict(test_features)
    accuracy = 100 * float(np.mean(predictions == np.asarray(test_labels)))
    return {"accuracy": accuracy, "dev_accuracy": dev, "penalty": penalty, "predictions": predictions}


def split_accuracy(
    train: tuple[np.ndarray, np.ndarray],
    dev: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    seed: int = SEED,
    grid: Sequence[float] = INNER_KFOLD_GRID,
) -> dict[str, float]:
    """Test accuracy (%) of the classifier whose C scores best on dev (SentEval's SplitClassifier)."""
    with _one_blas_thread():
        fitted = [_classifier(c, seed).fit(*train) for c in grid]
        dev_scores = [round(100 * classifier.score(*dev), 2) for classifier in fitted]
        best = int(np.argmax(dev_scores))
        accuracy = 100 * float(fitted[best].score(*test))
    return {
        "accuracy": accuracy,
        "dev_accuracy": dev_scores[best],
        "penalty": grid[best],
    }


def pair_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """SentEval's MRPC representation of a pair: ``[|u - v|, u * v]``, ``(n, d), (n, d) -> (n, 2d)``."""
    return np.concatenate([np.abs(first - second), first * second], axis=1)


def evaluate_transfer(
    model,
    data_dir: str | os.PathLike,
    tasks: Sequence[str] = TRANSFER_TASKS,
    kfold: int = 10,
    seed: int = SEED,
    tokenizer=None,
    batch_size: int = 64,
    max_length: int | None = None,
    show_progress: bool = True,
    n_jobs: int | None = None,
    datasets: dict | None = None,
) -> dict:
    """Run ``tasks`` (default: the seven of `TRANSFER_TASKS`) found under ``data_dir`` on frozen embeddings.

    Returns ``{"tasks": {task: {"accuracy", "dev_accuracy", "examples", ...}}, "avg": {"accuracy", "tasks"},
    "kfold"}`` (accuracies in %; MRPC also reports F1 x 100). ``datasets`` (from `load_transfer_tasks`) skips the
    reading. Every file is read (and checked) before encoding starts.
    """
    require("sklearn", "transfer", "SentEval transfer evaluation")
    from sklearn.metrics import f1_score
    from tqdm.auto import tqdm

    if datasets is None:
        datasets = load_transfer_tasks(data_dir, tasks)
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)

    def embed(sentences):
        return encoder.encode(sentences, batch_size=batch_size, show_progress=show_progress)

    results = {}
    for task, data in tqdm(datasets.items(), desc="Transfer tasks", unit="task", disable=not show_progress):
        if task in _BINARY_FILES:
            scores = inner_kfold_accuracy(embed(data.sentences), data.labels, kfold, seed, n_jobs=n_jobs)
            scores["examples"] = len(data)
        elif task == "SST2":
            splits = {name: (embed(split.sentences), np.asarray(split.labels)) for name, split in data.items()}
            scores = split_accuracy(splits["train"], splits["dev"], splits["test"], seed)
            scores["examples"] = {name: len(split) for name, split in data.items()}
        elif task == "TREC":
            train, test = data["train"], data["test"]
            scores = kfold_accuracy(
                embed(train.sentences), train.labels, embed(test.sentences), test.labels, kfold, seed, n_jobs=n_jobs
            )
            scores.pop("predictions")
            scores["examples"] = {"train": len(train), "test": len(test)}
        else:  # MRPC
            train, test = data["train"], data["test"]
            train_features = pair_features(embed(train.sentences1), embed(train.sentences2))
            test_features = pair_features(embed(test.sentences1), embed(test.sentences2))
            scores = kfold_accuracy(
                train_features, train.labels, test_features, test.labels, kfold, seed, n_jobs=n_jobs
            )
            scores["f1"] = 100 * float(f1_score(test.labels, scores.pop("predictions")))
            scores["examples"] = {"train": len(train), "test": len(test)}
        results[task] = scores
    average = float(np.mean([result["accuracy"] for result in results.values()])) if results else None
    return {"tasks": results, "avg": {"accuracy": average, "tasks": list(results)}, "kfold": kfold}
