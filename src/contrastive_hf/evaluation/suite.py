"""The whole evaluation of one model, as ``contrastive-hf evaluate`` runs it, and its results table.

Task names: the groups ``sts`` (the seven STS tasks), ``transfer`` (the seven SentEval transfer tasks) and ``align``
(alignment and uniformity on STS-B), or single tasks (``STS12``, ``STS-B``/``stsb``, ``SICK-R``/``sickr``, ``MR``,
``SST2``, ...; letter case ignored). Each distinct sentence is encoded once per run, whatever tasks share it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .alignment import POSITIVE_THRESHOLD, evaluate_alignment_uniformity
from .encoders import CachedEncoder, as_encoder
from .sts import STS_TASKS, evaluate_sts_suite, load_sts_tasks
from .transfer import DEFAULT_PROTOCOL, TRANSFER_TASKS, evaluate_transfer, load_transfer_tasks

__all__ = ["TASK_GROUPS", "parse_tasks", "run_evaluation", "format_results"]

ALIGN = "align"
TASK_GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, ALIGN: (ALIGN,)}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


_NAMES = {_key(name): name for name in (*STS_TASKS, *TRANSFER_TASKS)}
_NAMES.update({"stsbenchmark": "STS-B", "sick": "SICK-R", "sickrelatedness": "SICK-R", "sst": "SST2"})


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
                f"{', '.join((*STS_TASKS, *TRANSFER_TASKS))}."
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
) -> dict:
    """Evaluate ``model`` (anything `as_encoder` takes) on ``tasks`` found under ``data_dir`` (SentEval's layout).

    Every data file is read and checked before the first sentence is encoded. Returns the results JSON of
    ``contrastive-hf evaluate``: ``{"model", "encoder", "sts": {...}, "transfer": {...}, "align": {...}}`` with the
    parts that were asked for (see `evaluate_sts_suite`, `evaluate_transfer`, `evaluate_alignment_uniformity`).
    ``transfer_protocol`` is the transfer tasks' classifier (``simcse`` or ``sklearn``, see `evaluate_transfer`).
    """
    tasks = parse_tasks(tasks)
    sts_tasks = [task for task in tasks if task in STS_TASKS]
    transfer_tasks = [task for task in tasks if task in TRANSFER_TASKS]
    sts_data = load_sts_tasks(data_dir, sts_tasks, stsb_split, sick_split, stsb_file) if sts_tasks else None
    align_data = None
    if ALIGN in tasks:
        (align_split, align_data), *_ = load_sts_tasks(data_dir, ["STS-B"], stsb_split, sick_split, stsb_file)[
            "STS-B"
        ].items()
    transfer_data = load_transfer_tasks(data_dir, transfer_tasks) if transfer_tasks else None

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
            encoder,
            data_dir,
            transfer_tasks,
            kfold=kfold,
            seed=seed,
            n_jobs=n_jobs,
            datasets=transfer_data,
            protocol=transfer_protocol,
            **common,
        )
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
    widths = [max(len(row[i]) for row in rows) for i in range(4)]

    def line(row):
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths[:3], strict=True)]
        return "  ".join([*cells, row[3].rjust(widths[3])])

    lines = [line(row) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
