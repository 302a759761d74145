"""SentEval's transfer data (Conneau & Kiela, 2018): the seven tasks (`TRANSFER_TASKS`: MR, CR, SUBJ, MPQA, SST-2,
TREC, MRPC) read from SentEval's layout (``data/downstream/MR/rt-polarity.pos`` ...), each checked as it is read, and
the order in which SentEval hands a task's samples to its classifier (`senteval_order`: by word count, then label).
Sentences are whitespace-normalised as SentEval tokenizes them. The classifiers trained and scored on their
embeddings are `transfer`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .._files import naming_undecodable_line
from .layout import require_files, resolve_task_directory

__all__ = [
    "TRANSFER_TASKS",
    "BINARY_TASKS",
    "ClassificationData",
    "PairClassificationData",
    "read_binary_task",
    "read_sst2",
    "read_trec",
    "read_mrpc",
    "load_transfer_task",
    "load_transfer_tasks",
    "senteval_order",
    "senteval_sorted",
]

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")

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
# The tasks of one file per class, whose classifiers are cross-validated (`transfer.inner_kfold_accuracy`).
BINARY_TASKS = tuple(_BINARY_FILES)


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
        _refuse_empty(path, data, "'sentence<TAB>label'", f"SST-2's {split} split")
        splits[split] = data
    return splits


def _refuse_empty(path: str, data, row: str, what: str) -> None:
    """A `ValueError` naming ``path`` when it gave ``data`` no row: a classifier cannot be trained or scored on it."""
    if not len(data):
        raise ValueError(
            f"{path} has no rows (no {row} line): {what} is empty. Copy the file again from SentEval's data."
        )


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
        _refuse_empty(path, data, "'COARSE:fine question'", f"TREC's {split} split")
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
        _refuse_empty(path, data, "tab-separated pair", f"MRPC's {split} split")
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


def senteval_order(data: ClassificationData | PairClassificationData) -> list[int]:
    """The order in which SentEval hands a task's samples to its classifier: a stable sort by word count, then label
    (a pair: words of the first sentence, of the second, then label). SentEval sorts to pad less while encoding; the
    cross-validation folds and the PyTorch classifier's batches are drawn from this order, so it changes the figures.
    """
    if isinstance(data, PairClassificationData):
        keys = [
            (len(first.split()), len(second.split()), label)
            for first, second, label in zip(data.sentences1, data.sentences2, data.labels, strict=True)
        ]
    else:
        keys = [(len(sentence.split()), label) for sentence, label in zip(data.sentences, data.labels, strict=True)]
    return sorted(range(len(keys)), key=keys.__getitem__)


def senteval_sorted(data: ClassificationData | PairClassificationData):
    """``data`` in `senteval_order`."""
    order = senteval_order(data)
    if isinstance(data, PairClassificationData):
        return PairClassificationData(
            [data.sentences1[i] for i in order], [data.sentences2[i] for i in order], [data.labels[i] for i in order]
        )
    return ClassificationData([data.sentences[i] for i in order], [data.labels[i] for i in order])
