"""SentEval's transfer tasks (Conneau & Kiela, 2018): a linear classifier on frozen sentence embeddings, accuracy in %.

Two protocols, both SentEval's, differ in the classifier (`PROTOCOLS`):

- ``simcse`` (the default): SentEval's PyTorch classifier exactly as SimCSE's ``evaluation.py --mode test`` runs it,
  which produced SimCSE's transfer figures (its Table 7): a linear layer trained by Adam in batches of 64 with early
  stopping (tenacity 5, epoch size 4), weight decay chosen from {1e-5, 1e-4, 1e-3, 1e-2}; 10 folds
  (`SentEvalClassifierConfig`, `train_linear_classifiers`). SentEval ran it on a GPU; here it runs on the CPU, with
  SentEval's seeding (the same initialisation and batch order), so figures can differ from a GPU run only through
  float rounding.
- ``sklearn``: SentEval's scikit-learn path (``usepytorch=False``): ``LogisticRegression`` with scikit-learn's
  defaults, the inverse penalty C chosen from {2^-2, ..., 2^3} (`INNER_KFOLD_GRID`) or {2^-1, ..., 2^5}
  (`KFOLD_GRID`). With today's scikit-learn it gives what SentEval's own engine gives.

Cost of the classifiers on CPU, 384-dimensional embeddings (all-MiniLM-L6-v2), one thread: MR, CR, SST-2 (trained on
GLUE's 67,349 phrases) and MRPC take about 250 CPU seconds with ``simcse`` (MR alone 165) and 42 with ``sklearn``
(docs/results.md has the figures of both).

The validation schemes are SentEval's for both:

- MR, CR, SUBJ, MPQA (one file per class): 10-fold cross-validation; on each training fold an inner 10-fold
  cross-validation chooses the penalty (``InnerKFoldClassifier``).
- SST-2 (train/dev/test): the penalty chosen on dev, accuracy on test (``SplitClassifier``).
- TREC, MRPC (train/test): the penalty chosen by 10-fold cross-validation on train, then the classifier is trained on
  all of train and tested on test (``KFoldClassifier``). An MRPC pair (u, v) is represented by [|u - v|, u * v].

Samples are ordered as SentEval orders them (`senteval_order`: by word count, then label) before the stratified,
shuffled folds are drawn with the seed (SentEval's 1111). Cross-validation scores are rounded to two decimals before
the best penalty is taken (the first on ties), and accuracies are reported to two decimals, as SentEval does. The
tasks' data (SentEval's files read and checked, whitespace-normalised sentences, SentEval's order) is
`transfer_data`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .._optional import require
from .encoders import as_encoder
from .transfer_data import BINARY_TASKS, TRANSFER_TASKS, load_transfer_tasks, senteval_sorted

__all__ = [
    "PROTOCOLS",
    "DEFAULT_PROTOCOL",
    "INNER_KFOLD_GRID",
    "KFOLD_GRID",
    "WEIGHT_DECAY_GRID",
    "SentEvalClassifierConfig",
    "SIMCSE_CLASSIFIER",
    "LinearClassifiers",
    "train_linear_classifiers",
    "inner_kfold_accuracy",
    "kfold_accuracy",
    "split_accuracy",
    "pair_features",
    "evaluate_transfer",
]

logger = logging.getLogger(__name__)

PROTOCOLS = ("simcse", "sklearn")
DEFAULT_PROTOCOL = "simcse"  # the classifier behind SimCSE's published transfer figures
# SentEval's grids: scikit-learn's inverse penalty C (inner k-fold and split; k-fold), the PyTorch weight decay (all)
INNER_KFOLD_GRID = tuple(2.0**t for t in range(-2, 4))
KFOLD_GRID = tuple(2.0**t for t in range(-1, 6))
WEIGHT_DECAY_GRID = (1e-5, 1e-4, 1e-3, 1e-2)
SEED = 1111  # SentEval's default


@dataclass(frozen=True)
class SentEvalClassifierConfig:
    """SentEval's PyTorch classifier as SimCSE's ``evaluation.py --mode test`` configures it: ``nhid`` 0 (one linear
    layer, softmax cross-entropy averaged over the batch), Adam (torch's defaults: lr 1e-3, betas (0.9, 0.999), eps
    1e-8) with the L2 penalty as its weight decay on every parameter, batches of 64. Accuracy on the validation data is
    measured every ``epoch_size`` passes over the training data; the best model is kept, and training stops at the
    ``tenacity + 1``-th measurement that does not beat the best so far (SentEval never resets that count), or after
    ``max_epoch`` (SentEval's default 200) passes. Without validation data, ``validation_split`` of the training data
    (drawn with the seed) is held out for it."""

    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    validation_split: float = 0.05
    learning_rate: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


SIMCSE_CLASSIFIER = SentEvalClassifierConfig()


@dataclass
class LinearClassifiers:
    """Linear softmax classifiers trained side by side, one per weight decay.

    ``parameters`` is ``(R, classes, d + 1)``: each classifier's weight matrix with its bias as the last column.
    ``validation_accuracy`` (fractions) and ``epochs`` (passes over the training data) are per classifier.
    """

    parameters: torch.Tensor
    validation_accuracy: list[float]
    epochs: list[int]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Class predictions ``(R, n)`` of every classifier."""
        return _logits(self.parameters, _with_bias_input(features)).argmax(dim=-1).numpy()


def _with_bias_input(features) -> torch.Tensor:
    inputs = torch.as_tensor(np.asarray(features, dtype=np.float32))
    return torch.cat([inputs, torch.ones(len(inputs), 1)], dim=1)  # (n, d + 1)


def _logits(parameters: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    return torch.matmul(inputs, parameters.transpose(1, 2))  # (n, d + 1) x (R, d + 1, c) -> (R, n, c)


@contextlib.contextmanager
def _one_thread():
    """Each fit is many small products: threads cost far more than they gain on 2 shared cores (about 20x for the
    PyTorch classifier on 3,000 x 384 features, 9x for logistic regression on 10k x 384), so fits run on one thread
    (processes: ``n_jobs``)."""
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(threads)


@_one_thread()
def train_linear_classifiers(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    weight_decays: Sequence[float],
    validation: tuple[np.ndarray, np.ndarray] | None = None,
    seed: int = SEED,
    config: SentEvalClassifierConfig = SIMCSE_CLASSIFIER,
) -> LinearClassifiers:
    """SentEval's PyTorch classifier (see `SentEvalClassifierConfig`), one per weight decay, with early stopping on
    ``validation`` (or on ``config.validation_split`` of the training data held out with the seed).

    SentEval seeds numpy's generator and torch's with ``seed`` before building each classifier, so every classifier of
    a grid starts from the same ``torch.nn.Linear`` initialisation and sees the same batches (numpy permutations, one
    per pass): they are trained here as one ``(R, c, d + 1)`` tensor, which gives each the figures it would get alone
    (a classifier that has stopped is still updated, but only the best state it reached is kept). Float32, on CPU.
    """
    features = np.asarray(features, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    numpy_generator = np.random.RandomState(seed)  # SentEval: np.random.seed(seed) for each classifier
    if validation is None:
        order = numpy_generator.permutation(len(features))
        held_out = int(config.validation_split * len(features))
        if held_out == 0:
            raise ValueError(
                f"{len(features)} training samples leave none for the {config.validation_split:.0%} validation split "
                f"of SentEval's PyTorch classifier; it needs at least {int(np.ceil(1 / config.validation_split))} "
                "(the sklearn protocol has no such split)."
            )
        validation = (features[order[:held_out]], labels[order[:held_out]])
        features, labels = features[order[held_out:]], labels[order[held_out:]]  # SentEval trains in this order
    inputs, targets = _with_bias_input(features), torch.from_numpy(labels)
    validation_inputs, validation_targets = _with_bias_input(validation[0]), torch.as_tensor(validation[1])

    with torch.random.fork_rng(devices=[]):  # torch.manual_seed(seed) and nn.Linear, without touching the caller's
        torch.manual_seed(seed)
        layer = torch.nn.Linear(features.shape[1], n_classes)
    initial = torch.cat([layer.weight.detach(), layer.bias.detach()[:, None]], dim=1)  # (c, d + 1)
    parameters = initial.repeat(len(weight_decays), 1, 1)  # (R, c, d + 1)
    weight_decay = torch.tensor(weight_decays, dtype=torch.float32)[:, None, None]  # (R, 1, 1)
    exp_avg, exp_avg_sq = torch.zeros_like(parameters), torch.zeros_like(parameters)
    beta1, beta2 = config.betas

    best = parameters.clone()
    best_correct = [-1] * len(weight_decays)
    misses = [0] * len(weight_decays)
    epochs = [0] * len(weight_decays)
    training = set(range(len(weight_decays)))
    epoch = step = 0
    while training and epoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            order = torch.from_numpy(numpy_generator.permutation(len(inputs)))
            for start in range(0, len(inputs), config.batch_size):
                batch = order[start : start + config.batch_size]
                batch_inputs, batch_targets = inputs[batch], targets[batch]  # (B, d + 1), (B,)
                # d(mean cross-entropy)/d(logits) = (softmax - one-hot) / B, then the linear layer's backward
                logit_gradient = torch.softmax(_logits(parameters, batch_inputs), dim=-1)  # (R, B, c)
                logit_gradient[:, torch.arange(len(batch)), batch_targets] -= 1
                logit_gradient /= len(batch)
                gradient = torch.matmul(logit_gradient.transpose(1, 2), batch_inputs)  # (R, c, d + 1)
                gradient += weight_decay * parameters  # torch's Adam adds weight_decay * parameter to the gradient
                step += 1
                exp_avg.lerp_(gradient, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
                denominator = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(config.eps)
                parameters.addcdiv_(exp_avg, denominator, value=-config.learning_rate / (1 - beta1**step))
        epoch += config.epoch_size
        correct = (_logits(parameters, validation_inputs).argmax(dim=-1) == validation_targets).sum(dim=1).tolist()
        for index in sorted(training):
            epochs[index] = epoch
            if correct[index] > best_correct[index]:
                best_correct[index] = correct[index]
                best[index] = parameters[index]
            else:
                if misses[index] >= config.tenacity:
                    training.discard(index)
                misses[index] += 1
    return LinearClassifiers(best, [count / len(validation_targets) for count in best_correct], epochs)


def _logistic_regression(penalty: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    # SentEval's call: scikit-learn's defaults (today lbfgs, 100 iterations) with the inverse penalty C and the seed
    return LogisticRegression(C=penalty, random_state=seed)


@_one_thread()
def _fit_grid(protocol: str, grid, train, validation, n_classes: int, seed: int):
    """One classifier per penalty of ``grid`` trained on ``train`` (``validation``: the PyTorch classifier's early
    stopping data, None for its 5% split; scikit-learn ignores it); returns ``features -> (len(grid), n)`` labels."""
    if protocol == "sklearn":
        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():
            # SentEval runs lbfgs for its default 100 iterations, converged or not; so do we, quietly
            warnings.simplefilter("ignore", ConvergenceWarning)
            fitted = [_logistic_regression(penalty, seed).fit(*train) for penalty in grid]
        return lambda features: np.stack([classifier.predict(features) for classifier in fitted])
    return train_linear_classifiers(*train, n_classes, grid, validation, seed).predict


def _fold_accuracies(protocol, grid, features, labels, train, test, n_classes, seed) -> np.ndarray:
    """Accuracy (fraction) on the ``test`` rows of one classifier per penalty trained on the ``train`` rows; the
    PyTorch classifier stops early on the ``test`` rows, as SentEval's cross-validation does."""
    predict = _fit_grid(
        protocol, grid, (features[train], labels[train]), (features[test], labels[test]), n_classes, seed
    )
    return np.mean(predict(features[test]) == labels[test], axis=1)


def _cross_validation_scores(protocol, grid, features, labels, kfold, seed, n_classes, n_jobs) -> list[float]:
    """Per penalty, the mean accuracy (%) over stratified shuffled folds, rounded to 2 decimals as SentEval rounds
    before it takes the best (the first on ties)."""
    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed).split(features, labels)
    per_fold = Parallel(n_jobs=n_jobs)(
        delayed(_fold_accuracies)(protocol, grid, features, labels, train, test, n_classes, seed)
        for train, test in folds
    )
    return [round(100 * float(score), 2) for score in np.mean(per_fold, axis=0)]


def _check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"Unknown transfer protocol {protocol!r}: choose simcse (SentEval's PyTorch classifier, as SimCSE reports "
            "its transfer figures) or sklearn (SentEval's scikit-learn logistic regression, faster)."
        )
    return protocol


def _grid(protocol: str, scheme: str, grid: Sequence[float] | None) -> tuple[float, ...]:
    if grid is not None:
        return tuple(grid)
    if protocol == "simcse":
        return WEIGHT_DECAY_GRID
    return KFOLD_GRID if scheme == "kfold" else INNER_KFOLD_GRID


def _class_count(*labels: np.ndarray) -> int:
    return int(max(np.max(part) for part in labels)) + 1


def inner_kfold_accuracy(
    features: np.ndarray,
    labels: np.ndarray,
    kfold: int = 10,
    seed: int = SEED,
    grid: Sequence[float] | None = None,
    n_jobs: int | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> dict:
    """Mean test accuracy (%) over ``kfold`` stratified folds, the penalty chosen on each training fold by an inner
    ``kfold``-fold cross-validation (SentEval's InnerKFoldClassifier); the chosen classifier is then trained on the
    whole training fold (the PyTorch one stopping early on a 5% split of it). Accuracies are rounded to 2 decimals per
    fold and on average, as SentEval reports them. ``seed`` draws both levels of folds (SentEval draws them with 1111
    whatever its seed, so the two agree at the default)."""
    from sklearn.model_selection import StratifiedKFold

    protocol = _check_protocol(protocol)
    grid = _grid(protocol, "inner_kfold", grid)
    features, labels = np.asarray(features), np.asarray(labels)
    n_classes = _class_count(labels)
    outer = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed)
    dev_scores, test_scores, penalties = [], [], []
    for train, test in outer.split(features, labels):
        scores = _cross_validation_scores(
            protocol, grid, features[train], labels[train], kfold, seed, n_classes, n_jobs
        )
        best = int(np.argmax(scores))
        predict = _fit_grid(protocol, grid[best : best + 1], (features[train], labels[train]), None, n_classes, seed)
        accuracy = float(np.mean(predict(features[test])[0] == labels[test]))
        dev_scores.append(scores[best])
        test_scores.append(round(100 * accuracy, 2))
        penalties.append(grid[best])
    return {
        "accuracy": round(float(np.mean(test_scores)), 2),
        "dev_accuracy": round(float(np.mean(dev_scores)), 2),
        "penalties": penalties,
    }


def kfold_accuracy(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    kfold: int = 10,
    seed: int = SEED,
    grid: Sequence[float] | None = None,
    n_jobs: int | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> dict:
    """Test accuracy (%, 2 decimals) with the penalty chosen by ``kfold``-fold cross-validation on train (SentEval's
    KFoldClassifier), the classifier then trained on all of train (the PyTorch one stopping early on a 5% split of
    it); also returns the test predictions."""
    protocol = _check_protocol(protocol)
    grid = _grid(protocol, "kfold", grid)
    train_features, train_labels = np.asarray(train_features), np.asarray(train_labels)
    test_labels = np.asarray(test_labels)
    n_classes = _class_count(train_labels, test_labels)
    scores = _cross_validation_scores(protocol, grid, train_features, train_labels, kfold, seed, n_classes, n_jobs)
    best = int(np.argmax(scores))
    predict = _fit_grid(protocol, grid[best : best + 1], (train_features, train_labels), None, n_classes, seed)
    predictions = predict(np.asarray(test_features))[0]
    accuracy = round(100 * float(np.mean(predictions == test_labels)), 2)
    return {"accuracy": accuracy, "dev_accuracy": scores[best], "penalty": grid[best], "predictions": predictions}


def split_accuracy(
    train: tuple[np.ndarray, np.ndarray],
    dev: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    seed: int = SEED,
    grid: Sequence[float] | None = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> dict:
    """Test accuracy (%, 2 decimals) of the classifier whose penalty scores best on dev (SentEval's SplitClassifier;
    the PyTorch classifier stops early on dev). SentEval trains the chosen classifier again, with the same seed and
    data; that gives the same classifier, so the one of the grid is kept."""
    protocol = _check_protocol(protocol)
    grid = _grid(protocol, "split", grid)
    train, dev, test = ((np.asarray(features), np.asarray(labels)) for features, labels in (train, dev, test))
    n_classes = _class_count(train[1], dev[1], test[1])
    predict = _fit_grid(protocol, grid, train, dev, n_classes, seed)
    dev_scores = [round(100 * float(score), 2) for score in np.mean(predict(dev[0]) == dev[1], axis=1)]
    best = int(np.argmax(dev_scores))
    accuracy = round(100 * float(np.mean(predict(test[0])[best] == test[1])), 2)
    return {"accuracy": accuracy, "dev_accuracy": dev_scores[best], "penalty": grid[best]}


def _warn_of_one_class(task: str, data) -> None:
    """Warn when the data a classifier of ``task`` trains on holds one class only: it then predicts that class for
    everything, and the accuracy is that class's share of the test data, whatever the embeddings."""
    split, training = ("train", data["train"]) if isinstance(data, dict) else ("whole (cross-validated)", data)
    classes = sorted(set(training.labels))
    if len(classes) == 1:
        logger.warning(
            "%s: the %s split holds one class only (label %d, %d examples): its classifier predicts that class for "
            "everything, and its accuracy is that class's share of the test data, whatever the embeddings. Check the "
            "task's files.",
            task,
            split,
            classes[0],
            len(training),
        )


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
    protocol: str = DEFAULT_PROTOCOL,
) -> dict:
    """Run ``tasks`` (default: the seven of `TRANSFER_TASKS`) found under ``data_dir`` on frozen embeddings, with the
    classifier of ``protocol`` (`PROTOCOLS`: ``simcse``, the default, or ``sklearn``).

    Samples reach the classifiers in `senteval_order`, as in SentEval. Returns ``{"tasks": {task: {"accuracy",
    "dev_accuracy", "examples", ...}}, "avg": {"accuracy", "tasks"}, "kfold", "protocol", "classifier"}`` (accuracies
    in %, 2 decimals as SentEval reports them; MRPC also reports F1 x 100). ``datasets`` (from `load_transfer_tasks`)
    skips the reading. Every file is read (and checked) before encoding starts.
    """
    require("sklearn", "transfer", "SentEval transfer evaluation")
    from sklearn.metrics import f1_score
    from tqdm.auto import tqdm

    protocol = _check_protocol(protocol)
    if datasets is None:
        datasets = load_transfer_tasks(data_dir, tasks)
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)

    def embed(sentences):
        return encoder.encode(sentences, batch_size=batch_size, show_progress=show_progress)

    common = {"seed": seed, "protocol": protocol}
    results = {}
    for task, data in tqdm(datasets.items(), desc="Transfer tasks", unit="task", disable=not show_progress):
        _warn_of_one_class(task, data)
        if task in BINARY_TASKS:
            data = senteval_sorted(data)
            scores = inner_kfold_accuracy(embed(data.sentences), data.labels, kfold, n_jobs=n_jobs, **common)
            scores["examples"] = len(data)
        elif task == "SST2":
            data = {name: senteval_sorted(split) for name, split in data.items()}
            splits = {name: (embed(split.sentences), np.asarray(split.labels)) for name, split in data.items()}
            scores = split_accuracy(splits["train"], splits["dev"], splits["test"], **common)
            scores["examples"] = {name: len(split) for name, split in data.items()}
        elif task == "TREC":
            train, test = senteval_sorted(data["train"]), senteval_sorted(data["test"])
            scores = kfold_accuracy(
                embed(train.sentences),
                train.labels,
                embed(test.sentences),
                test.labels,
                kfold,
                n_jobs=n_jobs,
                **common,
            )
            scores.pop("predictions")
            scores["examples"] = {"train": len(train), "test": len(test)}
        else:  # MRPC
            train, test = senteval_sorted(data["train"]), senteval_sorted(data["test"])
            train_features = pair_features(embed(train.sentences1), embed(train.sentences2))
            test_features = pair_features(embed(test.sentences1), embed(test.sentences2))
            scores = kfold_accuracy(
                train_features, train.labels, test_features, test.labels, kfold, n_jobs=n_jobs, **common
            )
            scores["f1"] = round(100 * float(f1_score(test.labels, scores.pop("predictions"))), 2)
            scores["examples"] = {"train": len(train), "test": len(test)}
        results[task] = scores
    average = round(float(np.mean([result["accuracy"] for result in results.values()])), 2) if results else None
    if protocol == "simcse":
        classifier = {"model": "SentEval's PyTorch classifier, nhid 0", **asdict(SIMCSE_CLASSIFIER)}
    else:
        classifier = {"model": "sklearn.linear_model.LogisticRegression, default settings"}
    return {
        "tasks": results,
        "avg": {"accuracy": average, "tasks": list(results)},
        "kfold": kfold,
        "protocol": protocol,
        "classifier": classifier,
    }
