"""Semantic textual similarity as the papers compute it: cosine similarity of the two embeddings against the gold
scores, Spearman x 100.

The seven tasks of CLEAR's Table 2, SimCSE's Table 5 and SG-BERT's Table 1: STS12-STS16 (SemEval test sets, read
from SentEval's layout), the STS Benchmark test set and SICK-Relatedness test set. A year of STS12-16 is aggregated
in SimCSE's "all" setting by default (the pairs of every subset concatenated, one Spearman figure); SentEval's
weighted mean of the subsets' figures (``aggregation="wmean"``) and plain mean (``"mean"``) are options. Sentences
are whitespace-normalised as SentEval tokenizes them (split on whitespace, joined by single spaces).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._files import naming_undecodable_line
from .alignment import alignment_uniformity_from_vectors
from .encoders import as_encoder
from .layout import require_files, resolve_task_directory

__all__ = [
    "STSData",
    "STS_TASKS",
    "STS_YEAR_SUBSETS",
    "AGGREGATIONS",
    "read_stsbenchmark",
    "read_sick",
    "read_sts_subset",
    "read_sts_year",
    "load_sts_task",
    "load_sts_tasks",
    "cosine_similarities",
    "sts_correlations",
    "evaluate_sts",
    "evaluate_sts_per_dimension",
    "evaluate_sts_suite",
    "sts_eval_metrics",
]

# The subsets SentEval distributes for each year (STS13 without SMT, which its licence keeps out).
STS_YEAR_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STS_TASKS = (*STS_YEAR_SUBSETS, "STS-B", "SICK-R")
AGGREGATIONS = ("all", "wmean", "mean")

# Task folders as SentEval names them (under its data/downstream); letter case is ignored.
_TASK_FOLDERS = {
    **{year: (f"STS/{year}-en-test", f"{year}-en-test") for year in STS_YEAR_SUBSETS},
    "STS-B": ("STS/STSBenchmark", "STSBenchmark"),
    "SICK-R": ("SICK", "STS/SICK"),
}
_STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
_SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
_SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score")


@dataclass
class STSData:
    """Sentence pairs with gold similarity scores."""

    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]

    # the metric that ranks models on it, for ``metric_for_best_model``: ``eval_<name>_spearman``, and what it is
    primary_metric = "spearman"
    primary_metric_description = (
        "the Spearman correlation of the similarities with the gold scores, as SimCSE selects checkpoints on STS-B dev"
    )

    def __len__(self) -> int:
        return len(self.scores)

    def training_metrics(self, model, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]:
        """What `ContrastiveTrainer.evaluate` logs for this eval set (`evaluation.training.TrainingEvalSet`):
        Spearman, Pearson, alignment and uniformity (`sts_eval_metrics`)."""
        return sts_eval_metrics(model, self, tokenizer, batch_size, prefix)

    @classmethod
    def concatenate(cls, parts: Sequence[STSData]) -> STSData:
        return cls(
            [s for part in parts for s in part.sentences1],
            [s for part in parts for s in part.sentences2],
            [s for part in parts for s in part.scores],
        )


def _normalise(sentence: str) -> str:
    return " ".join(sentence.split())


def _score(raw: str, path: str | os.PathLike, line: int, what: str = "score") -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{path}:{line}: {what} {raw!r} is not a number.") from None
    if not np.isfinite(value):
        raise ValueError(f"{path}:{line}: {what} {raw!r} is not a finite number.")
    return value


def _split_file(path: str | os.PathLike, split: str, files: dict[str, str], task: str) -> str:
    """``path`` itself when it is a file, else the split's file inside the folder ``path``."""
    if os.path.isfile(path):
        return os.fspath(path)
    if split not in files:
        raise ValueError(f"Unknown {task} split {split!r}; choose one of {', '.join(files)}.")
    if os.path.isdir(path):
        return require_files(task, os.fspath(path), [files[split]])[0]
    raise FileNotFoundError(
        f"{task} file not found: {path}. Expected the file itself or a folder holding {', '.join(files.values())}."
    )


def read_stsbenchmark(path: str | os.PathLike, split: str = "test") -> STSData:
    """Read the STS Benchmark: ``path`` is a file (``sts-{train,dev,test}.csv``) or the folder holding them, in which
    case ``split`` picks the file.

    Tab-separated: genre, file, year, id, score, sentence1, sentence2, and on some rows one or two source columns
    after sentence2. Quotes are not escaped, so lines are split on tabs, never parsed as CSV.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"STS Benchmark file not found: {path}. Expected the tab-separated sts-dev.csv / sts-test.csv of "
            "the STS Benchmark (columns genre, file, year, id, score, sentence1, sentence2), or their folder."
        )
    path = _split_file(path, split, _STSB_FILES, "STS-B")
    data = STSData([], [], [])
    with open(path, encoding="utf-8") as handle, naming_undecodable_line(path):
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            columns = line.rstrip("\n").split("\t")
            if len(columns) < 7:
                raise ValueError(
                    f"{path}:{number}: expected at least 7 tab-separated columns (genre, file, year, id, score, "
                    f"sentence1, sentence2), got {len(columns)}."
                )
            data.scores.append(_score(columns[4], path, number))
            data.sentences1.append(_normalise(columns[5]))
            data.sentences2.append(_normalise(columns[6]))
    if not data.scores:
        raise ValueError(f"{path} holds no sentence pairs.")
    return data


def read_sick(path: str | os.PathLike, split: str = "test") -> STSData:
    """Read SICK relatedness: ``path`` is a SICK file (``SICK_train.txt``, ``SICK_trial.txt``,
    ``SICK_test_annotated.txt``) or the folder holding them, in which case ``split`` (train, trial or test) picks
    the file. Tab-separated with a header; the columns sentence_A, sentence_B and relatedness_score (1-5) are used.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"SICK file not found: {path}. Expected {', '.join(_SICK_FILES.values())} or their folder."
        )
    path = _split_file(path, split, _SICK_FILES, "SICK-R")
    data = STSData([], [], [])
    with open(path, encoding="utf-8") as handle, naming_undecodable_line(path):
        header = handle.readline().lstrip("\ufeff").rstrip("\n").split("\t")
        missing = [name for name in _SICK_COLUMNS if name not in header]
        if missing:
            raise ValueError(
                f"{path}:1: the header lacks column(s) {', '.join(missing)}; expected a SICK file whose header names "
                f"pair_ID, {', '.join(_SICK_COLUMNS)}."
            )
        first, second, score = (header.index(name) for name in _SICK_COLUMNS)
        for number, line in enumerate(handle, start=2):
            if not line.strip():
                continue
            columns = line.rstrip("\n").split("\t")
            if len(columns) <= max(first, second, score):
                raise ValueError(
                    f"{path}:{number}: expected {len(header)} tab-separated columns as the header names, got "
                    f"{len(columns)}."
                )
            data.scores.append(_score(columns[score], path, number, "relatedness_score"))
            data.sentences1.append(_normalise(columns[first]))
            data.sentences2.append(_normalise(columns[second]))
    if not data.scores:
        raise ValueError(f"{path} holds no sentence pairs.")
    return data


def read_sts_subset(input_path: str | os.PathLike, gold_path: str | os.PathLike) -> STSData:
    """One SemEval STS subset in SentEval's layout: ``STS.input.<subset>.txt`` (two tab-separated sentences per line)
    and ``STS.gs.<subset>.txt`` (one score per line). An empty gold line marks an unscored pair, which is skipped."""
    with open(input_path, encoding="utf-8") as handle, naming_undecodable_line(input_path):
        inputs = handle.read().splitlines()
    with open(gold_path, encoding="utf-8") as handle, naming_undecodable_line(gold_path):
        gold = handle.read().splitlines()
    if len(inputs) != len(gold):
        raise ValueError(
            f"{input_path} has {len(inputs)} lines but {gold_path} has {len(gold)}; they must pair line by line "
            "(an unscored pair keeps an empty line in the gold file)."
        )
    data = STSData([], [], [])
    for number, (pair, raw_score) in enumerate(zip(inputs, gold, strict=True), start=1):
        if not raw_score.strip():
            continue
        score = _score(raw_score.strip(), gold_path, number, "gold score")
        sentences = pair.split("\t")
        if len(sentences) < 2:
            raise ValueError(
                f"{input_path}:{number}: expected two tab-separated sentences, found {len(sentences)} column(s)."
            )
        data.sentences1.append(_normalise(sentences[0]))
        data.sentences2.append(_normalise(sentences[1]))
        data.scores.append(score)
    if not data.scores:
        raise ValueError(f"{gold_path} scores no pair.")
    return data


def read_sts_year(directory: str | os.PathLike, year: str) -> dict[str, STSData]:
    """Every subset of ``year`` (STS12 ... STS16) from its SentEval folder (e.g. ``STS12-en-test``)."""
    if year not in STS_YEAR_SUBSETS:
        raise ValueError(f"Unknown STS year {year!r}; choose one of {', '.join(STS_YEAR_SUBSETS)}.")
    subsets = STS_YEAR_SUBSETS[year]
    names = [name for subset in subsets for name in (f"STS.input.{subset}.txt", f"STS.gs.{subset}.txt")]
    paths = require_files(year, os.fspath(directory), names)
    return {subset: read_sts_subset(paths[2 * i], paths[2 * i + 1]) for i, subset in enumerate(subsets)}


def load_sts_task(
    data_dir: str | os.PathLike, task: str, stsb_split: str = "test", sick_split: str = "test"
) -> dict[str, STSData]:
    """The data of one of `STS_TASKS` found under ``data_dir`` (SentEval's layout), as ``{subset: data}``; STS-B and
    SICK-R have one subset named after their split."""
    if task not in STS_TASKS:
        raise ValueError(f"Unknown STS task {task!r}; choose from {', '.join(STS_TASKS)}.")
    if task in STS_YEAR_SUBSETS:
        holds = "STS.input.<subset>.txt and STS.gs.<subset>.txt for " + ", ".join(STS_YEAR_SUBSETS[task])
        return read_sts_year(resolve_task_directory(data_dir, task, _TASK_FOLDERS[task], holds), task)
    if task == "STS-B":
        folder = resolve_task_directory(data_dir, task, _TASK_FOLDERS[task], ", ".join(_STSB_FILES.values()))
        return {stsb_split: read_stsbenchmark(folder, split=stsb_split)}
    folder = resolve_task_directory(data_dir, task, _TASK_FOLDERS[task], ", ".join(_SICK_FILES.values()))
    return {sick_split: read_sick(folder, split=sick_split)}


def load_sts_tasks(
    data_dir: str | os.PathLike | None,
    tasks: Sequence[str] = STS_TASKS,
    stsb_split: str = "test",
    sick_split: str = "test",
    stsb_file: str | os.PathLike | None = None,
) -> dict[str, dict[str, STSData]]:
    """``{task: {subset or split: data}}`` for ``tasks``; ``stsb_file`` reads STS-B from that file instead."""
    unknown = [task for task in tasks if task not in STS_TASKS]
    if unknown:
        raise ValueError(f"Unknown STS task(s) {', '.join(unknown)}; choose from {', '.join(STS_TASKS)}.")
    datasets = {}
    for task in tasks:
        if task == "STS-B" and stsb_file is not None:
            split = os.path.basename(os.fspath(stsb_file)).removeprefix("sts-").removesuffix(".csv")
            datasets[task] = {split: read_stsbenchmark(stsb_file)}
        elif data_dir is None:
            raise ValueError(f"{task} needs a data directory laid out like SentEval's (--data-dir).")
        else:
            datasets[task] = load_sts_task(data_dir, task, stsb_split=stsb_split, sick_split=sick_split)
    return datasets


def cosine_similarities(embeddings1: np.ndarray, embeddings2: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` arrays, in float64."""
    a = np.asarray(embeddings1, dtype=np.float64)
    b = np.asarray(embeddings2, dtype=np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return (a * b).sum(axis=1) / norms


def sts_correlations(predictions, references) -> dict[str, float]:
    """Spearman and Pearson (x 100), from the shipped `evaluate` module (`contrastive_hf.metrics`)."""
    from ..metrics.sts_correlation.sts_correlation import sts_correlations as correlations

    return correlations(predictions, references)


def _score_subsets(subsets: dict[str, STSData], vectors: dict[str, np.ndarray], aggregation: str) -> dict:
    """Per-subset figures and the three aggregates; ``spearman``/``pearson`` carry the chosen aggregate."""
    similarities, per_subset = {}, {}
    for name, data in subsets.items():
        first = np.stack([vectors[s] for s in data.sentences1])  # (n, d)
        second = np.stack([vectors[s] for s in data.sentences2])  # (n, d)
        similarities[name] = cosine_similarities(first, second)
        per_subset[name] = {**sts_correlations(similarities[name], data.scores), "pairs": len(data)}
    pairs = np.array([per_subset[name]["pairs"] for name in subsets], dtype=np.float64)
    aggregates = {
        "all": sts_correlations(
            np.concatenate([similarities[name] for name in subsets]),
            np.concatenate([np.asarray(data.scores, dtype=np.float64) for data in subsets.values()]),
        ),
        "wmean": {
            metric: float(np.average([per_subset[name][metric] for name in subsets], weights=pairs))
            for metric in ("spearman", "pearson")
        },
        "mean": {
            metric: float(np.mean([per_subset[name][metric] for name in subsets]))
            for metric in ("spearman", "pearson")
        },
    }
    result = {**aggregates[aggregation], "pairs": int(pairs.sum())}
    if len(subsets) > 1:
        result.update(aggregation=aggregation, aggregates=aggregates, subsets=per_subset)
    return result


def evaluate_sts(
    model,
    data: STSData,
    tokenizer=None,
    batch_size: int = 64,
    max_length: int | None = None,
    show_progress: bool = False,
) -> dict:
    """Spearman and Pearson correlations (x 100) of the embeddings' cosine similarities with the gold scores.

    ``model`` is anything `as_encoder` takes: a contrastive_hf model (a `ContrastiveForPreTraining` is scored through
    its encoder part) with ``tokenizer``, a `SentenceTransformer`, a `SentenceEncoder`, or an object with ``encode``.
    """
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)
    sentences = data.sentences1 + data.sentences2
    embeddings = encoder.encode(sentences, batch_size=batch_size, show_progress=show_progress)
    vectors = dict(zip(sentences, embeddings, strict=True))
    return _score_subsets({"data": data}, vectors, "all")


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


def evaluate_sts_per_dimension(
    model,
    data: STSData,
    dims: Sequence[int],
    tokenizer=None,
    batch_size: int = 64,
    max_length: int | None = None,
) -> dict[int, dict]:
    """`evaluate_sts` of the first m dimensions of the embeddings, for each m of ``dims`` (Matryoshka embeddings):
    ``{m: {"spearman", "pearson", "pairs"}}``, x 100. Each sentence is encoded once and its vector truncated, as
    ``encode(..., truncate_dim=m)`` truncates it; the cosine similarity renormalises the truncated vectors."""
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)
    sentences = list(dict.fromkeys(data.sentences1 + data.sentences2))
    embeddings = encoder.encode(sentences, batch_size=batch_size)
    too_large = [dim for dim in dims if not 0 < dim <= embeddings.shape[1]]
    if too_large:
        raise ValueError(f"Cannot truncate {embeddings.shape[1]}-dimensional embeddings to {too_large} dimensions.")
    return {
        int(dim): _score_subsets({"data": data}, dict(zip(sentences, embeddings[:, :dim], strict=True)), "all")
        for dim in dims
    }


def evaluate_sts_suite(
    model,
    data_dir: str | os.PathLike,
    tasks: Sequence[str] = STS_TASKS,
    aggregation: str = "all",
    stsb_split: str = "test",
    sick_split: str = "test",
    tokenizer=None,
    batch_size: int = 64,
    max_length: int | None = None,
    show_progress: bool = True,
    stsb_file: str | os.PathLike | None = None,
    datasets: dict[str, dict[str, STSData]] | None = None,
) -> dict:
    """Score ``tasks`` (default: the seven of `STS_TASKS`) found under ``data_dir``, each sentence encoded once.

    Returns ``{"aggregation", "tasks": {task: {"spearman", "pearson", "pairs", "split", ...}}, "avg": {"spearman",
    "tasks"}}``; every figure is x 100. STS12-16 also report their subsets and all three aggregates. ``stsb_file``
    reads STS-B from that file instead of ``data_dir``; ``datasets`` (from `load_sts_tasks`) skips the reading.
    Every file is read (and checked) before encoding starts.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"Unknown aggregation {aggregation!r}; choose one of {', '.join(AGGREGATIONS)}.")
    if datasets is None:
        datasets = load_sts_tasks(data_dir, tasks, stsb_split=stsb_split, sick_split=sick_split, stsb_file=stsb_file)
    sentences = list(
        dict.fromkeys(
            s for subsets in datasets.values() for d in subsets.values() for s in (*d.sentences1, *d.sentences2)
        )
    )
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)
    embeddings = encoder.encode(sentences, batch_size=batch_size, show_progress=show_progress)
    vectors = dict(zip(sentences, embeddings, strict=True))
    results = {}
    for task, subsets in datasets.items():
        results[task] = _score_subsets(subsets, vectors, aggregation)
        if task in ("STS-B", "SICK-R"):
            results[task]["split"] = next(iter(subsets))
    average = float(np.mean([result["spearman"] for result in results.values()])) if results else None
    return {"aggregation": aggregation, "tasks": results, "avg": {"spearman": average, "tasks": list(results)}}
