"""The whole evaluation of one model, as ``contrastive-hf evaluate`` runs it, and its results table.

Task names: the groups ``sts`` (the seven STS tasks), ``transfer`` (the seven SentEval transfer tasks), ``align``
(alignment and uniformity on STS-B) and ``glue`` (CLEAR's eight GLUE tasks, each fine-tuned: `glue.evaluate_glue`), or
single tasks (``STS12``, ``STS-B``/``stsb``, ``SICK-R``/``sickr``, ``MR``, ``SST2``, ...; letter case ignored). A GLUE
task is ``glue/<task>`` (``glue/sst2``, ``glue/SST-2``, ``glue-mrpc``, ``glue/stsb``; also plain ``CoLA``, ``QQP``,
``MNLI``, ``QNLI``, ``RTE``, ``WNLI``, which name nothing else), since SST2, MRPC and STS-B name the embedding tasks.
Each distinct sentence is encoded once per run, whatever tasks share it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .alignment import POSITIVE_THRESHOLD, evaluate_alignment_uniformity
from .encoders import CachedEncoder, as_encoder, load_encoder
from .glue import GlueArguments, evaluate_glue
from .glue_data import load_glue_tasks
from .glue_tasks import GLUE_GROUP, GLUE_TASKS
from .sts import STS_TASKS, evaluate_sts_suite, load_sts_tasks
from .transfer import DEFAULT_PROTOCOL, evaluate_transfer
from .transfer_data import TRANSFER_TASKS, load_transfer_tasks

__all__ = ["TASK_GROUPS", "parse_tasks", "run_evaluation", "format_results"]

ALIGN = "align"
GLUE_PREFIX = "GLUE/"  # a GLUE task's name in a task list: "GLUE/SST-2"
TASK_GROUPS = {
    "sts": STS_TASKS,
    "transfer": TRANSFER_TASKS,
    ALIGN: (ALIGN,),
    "glue": tuple(GLUE_PREFIX + name for name in GLUE_GROUP),
}


def _key(name: str) -> str:
    return "".join(character for character in name.lower() if character not in "-_/: ")


_NAMES = {_key(name): name for name in (*STS_TASKS, *TRANSFER_TASKS)}
_NAMES.update({"stsbenchmark": "STS-B", "sick": "SICK-R", "sickrelatedness": "SICK-R", "sst": "SST2"})
_GLUE_ALIASES = [
    (_key(alias), GLUE_PREFIX + task.name) for task in GLUE_TASKS.values() for alias in (task.name, task.config)
]
_NAMES.update({f"glue{key}": name for key, name in _GLUE_ALIASES})
_NAMES.update({key: name for key, name in _GLUE_ALIASES if key not in _NAMES})  # CoLA, MNLI...; not SST2, MRPC, STS-B


def parse_tasks(tasks: str | Sequence[str]) -> list[str]:
    """Task names from a comma-separated string or a list: groups are expanded, duplicates dropped, order kept."""
    if isinstance(tasks, str):
        tasks = [part for part in tasks.split(",")]
    parsed = []
    for raw in tasks:
        name = raw.strip()
        if not name:
            continue
        if name.lower() in TASK_GROUPS:
            parsed += TASK_GROUPS[name.lower()]
        elif _key(name) in _NAMES:
            parsed.append(_NAMES[_key(name)])
        else:
            raise ValueError(
                f"Unknown task {name!r}. Use the groups {', '.join(TASK_GROUPS)} or tasks "
                f"{', '.join((*STS_TASKS, *TRANSFER_TASKS))}, or GLUE's "
                f"{', '.join(f'glue/{task.config}' for task in GLUE_TASKS.values())}."
            )
    if not parsed:
        raise ValueError("No task to run: give e.g. --tasks sts,transfer,align.")
    return list(dict.fromkeys(parsed))


def run_evaluation(
    model,
    data_dir: str | os.PathLike | None = None,
    tasks: str | Sequence[str] = "sts",
    tokenizer=None,
    aggregation: str = "all",
    stsb_split: str = "test",
    sick_split: str = "test",
    stsb_file: str | os.PathLike | None = None,
    kfold: int = 10,
    seed: int = 1111,
    n_jobs: int | None = None,
    transfer_protocol: str = DEFAULT_PROTOCOL,
    batch_size: int = 64,
    max_length: int | None = None,
    show_progress: bool = True,
    glue: GlueArguments | None = None,
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """Evaluate ``model`` on ``tasks``: the embedding tasks found under ``data_dir`` (SentEval's layout), and the GLUE
    tasks under ``data_dir`` (GLUE's layout) or from the Hub.

    ``model`` is anything `as_encoder` takes, or a checkpoint's folder or Hub id (loaded with `load_encoder`). GLUE
    fine-tunes ``checkpoint`` (default: ``model`` when it is a folder or Hub id) as ``glue`` says (default: RoBERTa's
    recipe, `GlueArguments`) and prints a line per run. Every data file is read and checked before the first
    sentence is encoded. Returns the results JSON of ``contrastive-hf evaluate``: ``{"model", "encoder", "sts":
    {...}, "transfer": {...}, "align": {...}, "glue": {...}}`` with the parts that were asked for (see
    `evaluate_sts_suite`, `evaluate_transfer`, `evaluate_alignment_uniformity`, `evaluate_glue`).
    ``transfer_protocol`` is the transfer tasks' classifier (``simcse`` or ``sklearn``, see `evaluate_transfer`).
    """
    tasks = parse_tasks(tasks)
    sts_tasks = [task for task in tasks if task in STS_TASKS]
    transfer_tasks = [task for task in tasks if task in TRANSFER_TASKS]
    glue_tasks = [task[len(GLUE_PREFIX) :] for task in tasks if task.startswith(GLUE_PREFIX)]
    if checkpoint is None and isinstance(model, (str, os.PathLike)):
        checkpoint = model
    if glue_tasks and checkpoint is None:
        raise ValueError(
            "GLUE fine-tunes the checkpoint afresh for each task, configuration and seed: pass its folder or Hub id "
            "(model='path' or checkpoint='path'), not a loaded model."
        )
    glue = glue or GlueArguments()
    sts_data = load_sts_tasks(data_dir, sts_tasks, stsb_split, sick_split, stsb_file) if sts_tasks else None
    align_data = None
    if ALIGN in tasks:
        (align_split, align_data), *_ = load_sts_tasks(data_dir, ["STS-B"], stsb_split, sick_split, stsb_file)[
            "STS-B"
        ].items()
    transfer_data = load_transfer_tasks(data_dir, transfer_tasks) if transfer_tasks else None
    glue_data = load_glue_tasks(glue_tasks, data_dir, glue.hub_dataset) if glue_tasks else None

    results = {"model": os.fspath(checkpoint) if checkpoint is not None else None}
    if sts_data is not None or align_data is not None or transfer_data is not None:
        if isinstance(model, (str, os.PathLike)):
            model = load_encoder(os.fspath(model), max_length=max_length)
        encoder = CachedEncoder(as_encoder(model, tokenizer=tokenizer, max_length=max_length))
        results = {"model": encoder.name, "encoder": encoder.describe()}
        common = {"batch_size": batch_size, "show_progress": show_progress}
        if sts_data is not None:
            results["sts"] = evaluate_sts_suite(encoder, data_dir, sts_tasks, aggregation, datasets=sts_data, **common)
        if align_data is not None:
            results["align"] = {
                **evaluate_alignment_uniformity(encoder, align_data, **common),
                "data": f"STS-B {align_split}",
                "positive_threshold": POSITIVE_THRESHOLD,
            }
        if transfer_data is not None:
            results["transfer"] = evaluate_transfer(
                encoder, data_dir, transfer_tasks, kfold=kfold, seed=seed, n_jobs=n_jobs, datasets=transfer_data,
                protocol=transfer_protocol,
                **common,
            )  # fmt: skip
    if glue_data is not None:
        results["glue"] = evaluate_glue(
            checkpoint, glue_tasks, data_dir, glue, datasets=glue_data, show_progress=show_progress, report=print
        )  # a line per fine-tuning run, progress bars or not: a run takes minutes
    return results


def format_results(results: dict) -> str:
    """The results as a plain-text table (what ``contrastive-hf evaluate`` prints)."""
    rows = [("task", "data", "metric", "score")]
    sts = results.get("sts")
    if sts:
        for task, scores in sts["tasks"].items():
            data = scores.get("split") or f"test ({scores.get('aggregation', 'all')})"
            rows.append((task, data, "spearman x 100", f"{scores['spearman']:.2f}"))
        tasks = sts["avg"]["tasks"]
        rows.append((f"STS avg ({len(tasks)})", "", "spearman x 100", f"{sts['avg']['spearman']:.2f}"))
    transfer = results.get("transfer")
    if transfer:
        for task, scores in transfer["tasks"].items():
            rows.append((task, "", "accuracy %", f"{scores['accuracy']:.2f}"))
            if "f1" in scores:
                rows.append((task, "", "F1 x 100", f"{scores['f1']:.2f}"))
        tasks = transfer["avg"]["tasks"]
        rows.append((f"transfer avg ({len(tasks)})", "", "accuracy %", f"{transfer['avg']['accuracy']:.2f}"))
    align = results.get("align")
    if align:
        rows.append(("alignment", align["data"], "lower is better", f"{align['alignment']:.4f}"))
        rows.append(("uniformity", align["data"], "lower is better", f"{align['uniformity']:.4f}"))
    glue = results.get("glue")
    if glue:
        for task, result in glue["tasks"].items():
            spread = result["spread"]
            seeds = len(spread["scores"])
            data = f"dev, median of {seeds} seed{'s' * (seeds > 1)}, {spread['min']:.2f}-{spread['max']:.2f}"
            rows.append((f"GLUE {task}", data, f"{result['metric']} x 100", f"{result['score']:.2f}"))
        tasks = glue["avg"]["tasks"]
        rows.append((f"GLUE avg ({len(tasks)})", f"{glue['head']} head", "x 100", f"{glue['avg']['score']:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]

    def line(row):
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths[:3], strict=True)]
        return "  ".join([*cells, row[3].rjust(widths[3])])

    lines = [line(row) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
