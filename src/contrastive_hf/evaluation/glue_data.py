"""GLUE's data, from its own files or the Hub: under ``data_dir``, GLUE's own files (the layout its download script
writes: ``SST-2/train.tsv``, ``dev.tsv``, MNLI's ``dev_matched.tsv`` and ``dev_mismatched.tsv``, directly in
``data_dir`` or in its ``glue_data/`` or ``glue/`` folder); a task whose folder is not there is loaded from the Hub
(``datasets.load_dataset("nyu-mll/glue", config)``, or ``hub_dataset``). Both give the same columns, label ids and
split names (the Hub's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .._files import naming_undecodable_line
from .glue_tasks import GlueTask, figure_name, glue_task
from .layout import find_case_insensitive

__all__ = [
    "GLUE_HUB_DATASET",
    "GlueData",
    "find_glue_folder",
    "read_glue_file",
    "load_glue_task",
    "load_glue_tasks",
]

GLUE_HUB_DATASET = "nyu-mll/glue"
# Folders under ``data_dir`` in which GLUE's task folders may sit (its download script writes glue_data/).
GLUE_ROOTS = ("", "glue_data", "glue")
GLUE_DATA_HINT = (
    "GLUE's download script (download_glue_data.py of the GLUE baselines, github.com/nyu-mll/GLUE-baselines) writes "
    "this layout; a task with no folder holding train.tsv under --data-dir is loaded from the Hub (nyu-mll/glue)."
)


@dataclass
class GlueData:
    """A task's training set and dev split(s) (`datasets.Dataset`, the Hub's columns and label ids), and where they
    came from."""

    task: GlueTask
    train: object
    dev: dict[str, object]  # key ("dev"; MNLI: "matched", "mismatched") -> Dataset
    source: str  # the folder, or "<Hub dataset> (<config>)"
    hub_dataset: str | None = None  # the Hub dataset it was loaded from; None for local files

    def describe(self) -> dict:
        """Where the data came from and its sizes, for the results."""
        sizes = {figure_name("dev", key): len(split) for key, split in self.dev.items()}
        return {"source": self.source, "hub_dataset": self.hub_dataset, "train": len(self.train), **sizes}


def find_glue_folder(data_dir: str | os.PathLike, task: str | GlueTask) -> str | None:
    """The folder of ``task`` in GLUE's layout under ``data_dir`` (or its ``glue_data/``, ``glue/``), letter case
    ignored: the first such folder that holds a ``train.tsv``. None when there is none."""
    task = glue_task(task)
    for root in GLUE_ROOTS:
        found = find_case_insensitive(data_dir, f"{root}/{task.name}" if root else task.name)
        if found is not None and find_case_insensitive(found, "train.tsv") is not None:
            return found
    return None


def _features(task: GlueTask):
    from datasets import ClassLabel, Features, Value

    label = Value("float32") if task.is_regression else ClassLabel(names=list(task.labels))
    return Features({**{column: Value("string") for column in task.text_columns}, "label": label})


def _parse_label(task: GlueTask, raw: str, where: str) -> int | float:
    raw = raw.strip()
    if task.is_regression:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{where}: {task.name} score {raw!r} is not a number.") from None
    if task.labels_written_as_names:
        if raw in task.labels:
            return task.labels.index(raw)
        raise ValueError(f"{where}: {task.name} label {raw!r} is not one of {', '.join(task.labels)}.")
    allowed = [str(index) for index in range(len(task.labels))]
    if raw in allowed:
        return int(raw)
    raise ValueError(f"{where}: {task.name} label {raw!r} is not one of {', '.join(allowed)}.")


def read_glue_file(task: str | GlueTask, path: str | os.PathLike):
    """One GLUE file (``train.tsv``, ``dev.tsv``, ...) as a `datasets.Dataset` with the Hub's columns and label ids.

    Fields are split on tabs without quoting (GLUE's quotes are text), as GLUE's own readers did. Errors name the file
    and the line: a missing column of the header, a row with too few fields (QQP's such rows are skipped, as
    transformers' reader skipped them), a label that is not one of the task's.
    """
    from datasets import Dataset

    task, path = glue_task(task), os.fspath(path)
    with open(path, encoding="utf-8-sig") as handle, naming_undecodable_line(path):
        lines = [line.rstrip("\r\n") for line in handle]
    numbered = [(number, line.split("\t")) for number, line in enumerate(lines, start=1) if line.strip()]
    positions = list(task.file_columns)
    if isinstance(positions[0], str):
        if not numbered:
            raise ValueError(f"{path} is empty; a GLUE {task.name} file starts with its header.")
        (_, header), numbered = numbered[0], numbered[1:]
        missing = [name for name in positions if name not in header]
        if missing:
            raise ValueError(
                f"{path}:1: the header has no column {', '.join(map(repr, missing))} (it has {', '.join(header)}); "
                f"GLUE's {task.name} files have the columns {', '.join(map(str, task.file_columns))}. "
                f"{GLUE_DATA_HINT}"
            )
        positions = [header.index(name) for name in positions]
    needed = max(positions) + 1
    columns: dict[str, list] = {column: [] for column in (*task.text_columns, "label")}
    for number, row in numbered:
        if len(row) < needed:
            if task.skip_short_rows:
                continue
            raise ValueError(
                f"{path}:{number}: {len(row)} tab-separated field(s), expected at least {needed} (GLUE {task.name})."
            )
        *texts, label = (row[position] for position in positions)
        for column, text in zip(task.text_columns, texts, strict=True):
            columns[column].append(text)
        columns["label"].append(_parse_label(task, label, f"{path}:{number}"))
    if not columns["label"]:
        raise ValueError(f"{path} holds no {task.name} example.")
    return Dataset.from_dict(columns, features=_features(task))


def _from_folder(task: GlueTask, folder: str) -> GlueData:
    from .layout import require_files

    names = ["train.tsv", *(file for _, file, _ in task.dev_splits)]
    paths = require_files(f"GLUE {task.name}", folder, names, hint=GLUE_DATA_HINT)
    train, *dev = (read_glue_file(task, path) for path in paths)
    keys = [key for _, _, key in task.dev_splits]
    return GlueData(task, train, dict(zip(keys, dev, strict=True)), source=folder)


def _from_hub(task: GlueTask, hub_dataset: str, looked_in: str) -> GlueData:
    from datasets import load_dataset

    try:
        loaded = load_dataset(hub_dataset, task.config)
    except Exception as error:  # offline, not in the cache, a wrong id: say what was tried and what else works
        raise FileNotFoundError(
            f"GLUE {task.name}: {looked_in}, and loading it from the Hub failed "
            f"(datasets.load_dataset({hub_dataset!r}, {task.config!r}): {type(error).__name__}: {error}). Go online "
            f"(unset HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) or give --data-dir a folder in GLUE's layout "
            f"({task.name}/train.tsv, {', '.join(file for _, file, _ in task.dev_splits)}). {GLUE_DATA_HINT}"
        ) from error
    wanted = ["train", *(split for split, _, _ in task.dev_splits)]
    missing = [split for split in wanted if split not in loaded]
    if missing:
        raise ValueError(
            f"{hub_dataset} ({task.config}) has no split {', '.join(missing)} (it has {', '.join(loaded)}); GLUE "
            f"{task.name} needs {', '.join(wanted)}."
        )
    columns = [*task.text_columns, "label"]
    for split in wanted:
        absent = [column for column in columns if column not in loaded[split].column_names]
        if absent:
            raise ValueError(
                f"{hub_dataset} ({task.config}, {split}) lacks the column(s) {', '.join(absent)} "
                f"(it has {', '.join(loaded[split].column_names)}); GLUE {task.name} needs {', '.join(columns)}."
            )
    dev = {key: loaded[split].select_columns(columns) for split, _, key in task.dev_splits}
    return GlueData(
        task,
        loaded["train"].select_columns(columns),
        dev,
        source=f"{hub_dataset} ({task.config})",
        hub_dataset=hub_dataset,
    )


def load_glue_task(
    task: str | GlueTask, data_dir: str | os.PathLike | None = None, hub_dataset: str = GLUE_HUB_DATASET
) -> GlueData:
    """``task``'s data: from its folder in GLUE's layout under ``data_dir`` when there is one, else from the Hub
    (``datasets.load_dataset(hub_dataset, config)``; a local copy of the Hub dataset's folder works too)."""
    task = glue_task(task)
    if data_dir is not None and not os.path.isdir(data_dir):
        looked_in = f"the --data-dir {os.fspath(data_dir)} does not exist"
    elif data_dir is not None:
        folder = find_glue_folder(data_dir, task)
        if folder is not None:
            return _from_folder(task, folder)
        tried = [os.path.join(os.fspath(data_dir), root, task.name) for root in GLUE_ROOTS]
        looked_in = f"no folder holding train.tsv at {', '.join(os.path.normpath(path) for path in tried)}"
    else:
        looked_in = "no --data-dir was given"
    return _from_hub(task, hub_dataset, looked_in)


def load_glue_tasks(
    tasks: Sequence[str], data_dir: str | os.PathLike | None = None, hub_dataset: str = GLUE_HUB_DATASET
) -> dict[str, GlueData]:
    """`load_glue_task` for each of ``tasks``, all read before anything runs."""
    return {task: load_glue_task(task, data_dir, hub_dataset) for task in tasks}
