"""Pictures of a run: the alignment-uniformity plane (SimCSE's Figure 2, Gao et al., 2021), training curves, and
models' GLUE scores side by side.

Inputs are what training and ``contrastive-hf evaluate`` already write: a run's ``trainer_state.json`` (its
``log_history`` holds ``loss``, ``mlm_loss``, ``cl_loss``, every 2% of the steps by default, and
``eval_stsb_spearman``, ``eval_stsb_alignment`` and ``eval_stsb_uniformity`` per evaluation: the example scripts
record STS-B dev before training at step 0 and after it at the last step, beside any ``--eval_steps`` evaluation) and
the results JSON of ``contrastive-hf evaluate`` with alignment and uniformity (``--stsb-file``, or ``--tasks align``;
one point per model), and its GLUE figures (``--tasks glue``: a bar per model and task, the seeds as dots).
matplotlib draws without a display (Agg).
"""

from __future__ import annotations

import glob
import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._files import read_json_file
from .._optional import require

__all__ = [
    "TrainingRun",
    "ModelPoint",
    "GlueScores",
    "load_training_run",
    "load_model_point",
    "load_glue_scores",
    "plot_glue",
    "alignment_uniformity_trajectory",
    "plot_alignment_uniformity",
    "plot_training_curves",
]

LOSS_CURVES = ("loss", "mlm_loss", "cl_loss")
_LOSS_TITLES = {
    "loss": "loss = mlm_weight x mlm_loss + cl_weight x cl_loss",
    "mlm_loss": "mlm_loss (masked language modelling)",
    "cl_loss": "cl_loss (contrastive)",
}


@dataclass
class TrainingRun:
    """A run's logged history (``trainer_state.json``)."""

    name: str
    log_history: list[dict]
    best_global_step: int | None = None
    best_metric: float | None = None


@dataclass
class ModelPoint:
    """One model's alignment and uniformity (from ``contrastive-hf evaluate --tasks align``)."""

    name: str
    alignment: float
    uniformity: float


@dataclass
class GlueScores:
    """One model's GLUE results (from ``contrastive-hf evaluate --tasks glue``): per task its score (the median over
    seeds) and every seed's score, and the average."""

    name: str
    head: str
    tasks: dict[str, tuple[float, list[float]]]
    average: float


def _checkpoint_step(path: str) -> int:
    match = re.search(r"checkpoint-(\d+)$", os.path.dirname(path))
    return int(match.group(1)) if match else -1


def load_training_run(path: str | os.PathLike, name: str | None = None) -> TrainingRun:
    """Read a run: its output directory (``trainer_state.json``, else the latest ``checkpoint-*/``'s) or the file."""
    path = os.fspath(path)
    state_path = path
    if os.path.isdir(path):
        state_path = os.path.join(path, "trainer_state.json")
        if not os.path.isfile(state_path):
            checkpoints = sorted(
                glob.glob(os.path.join(path, "checkpoint-*", "trainer_state.json")), key=_checkpoint_step
            )
            if not checkpoints:
                raise FileNotFoundError(
                    f"No trainer_state.json in {path} or its checkpoint-*/ folders; give a training output directory."
                )
            state_path = checkpoints[-1]
    state = read_json_file(state_path)
    if "log_history" not in state:
        raise ValueError(f"{state_path} has no log_history; is it a transformers trainer_state.json?")
    run_dir = os.path.dirname(os.path.abspath(state_path))
    if re.search(r"checkpoint-\d+$", run_dir):
        run_dir = os.path.dirname(run_dir)
    best_step = state.get("best_global_step")
    if best_step is None and state.get("best_model_checkpoint"):
        best_step = _checkpoint_step(os.path.join(state["best_model_checkpoint"], "x")) or None
    return TrainingRun(
        name=name or os.path.basename(run_dir),
        log_history=state["log_history"],
        best_global_step=best_step,
        best_metric=state.get("best_metric"),
    )


def load_model_point(path: str | os.PathLike, name: str | None = None) -> ModelPoint:
    """One model's point from the results JSON of ``contrastive-hf evaluate --tasks align``."""
    results = read_json_file(path)
    align = results.get("align") if isinstance(results, dict) else None
    if not align or align.get("alignment") is None:
        raise ValueError(
            f"{path} holds no alignment/uniformity figures; write them with `contrastive-hf evaluate MODEL "
            "--stsb-file sts-dev.csv --output FILE` (or --tasks align with --data-dir DIR for STS-B test)."
        )
    if name is None:
        name = _model_name(results, path) + (f" ({align['data']})" if align.get("data") else "")
    return ModelPoint(name, float(align["alignment"]), float(align["uniformity"]))


def _model_name(results: dict, path: str | os.PathLike) -> str:
    """The last two parts of the model's path or Hub id ("org/model", "run/checkpoint-500")."""
    parts = os.path.normpath(str(results.get("model") or os.path.splitext(os.fspath(path))[0])).split(os.sep)
    return "/".join(parts[-2:])


def load_glue_scores(path: str | os.PathLike, name: str | None = None) -> GlueScores:
    """One model's GLUE scores from the results JSON of ``contrastive-hf evaluate --tasks glue``."""
    results = read_json_file(path)
    glue = results.get("glue") if isinstance(results, dict) else None
    if not glue or not glue.get("tasks"):
        raise ValueError(
            f"{path} holds no GLUE figures; write them with `contrastive-hf evaluate MODEL --tasks glue`."
        )
    tasks = {
        task: (float(result["score"]), list(result["spread"]["scores"])) for task, result in glue["tasks"].items()
    }
    name = name or f"{_model_name(results, path)} ({glue['head']} head)"
    return GlueScores(name, glue["head"], tasks, float(glue["avg"]["score"]))


def plot_glue(models: Sequence[GlueScores], path: str | os.PathLike) -> str:
    """Draw each model's GLUE scores: per task (and their average) a bar per model at the median over seeds, each
    seed's score a dot on it. Writes a PNG to ``path`` and returns it."""
    if not models:
        raise ValueError("No GLUE results to draw: give results of `contrastive-hf evaluate --tasks glue`.")
    tasks = list(dict.fromkeys(task for model in models for task in model.tasks))
    columns = [*tasks, "average"]
    figure = _figure(max(6.0, 1.1 * len(columns) * max(1, len(models)) ** 0.5 + 2), 4.8)
    axes = figure.add_subplot()
    width = 0.8 / len(models)
    for index, model in enumerate(models):
        color = f"C{index % 10}"
        offsets = [column + (index - (len(models) - 1) / 2) * width for column in range(len(columns))]
        heights = [model.tasks[task][0] if task in model.tasks else math.nan for task in tasks] + [model.average]
        axes.bar(offsets, heights, width=width * 0.9, color=color, alpha=0.75, label=model.name)
        for offset, task in zip(offsets, tasks, strict=False):
            seeds = model.tasks.get(task, (None, []))[1]
            axes.plot([offset] * len(seeds), seeds, "o", color="black", markersize=3, alpha=0.7)
        for offset, height in zip(offsets, heights, strict=True):
            if not math.isnan(height):
                axes.annotate(f"{height:.1f}", (offset, height), textcoords="offset points", xytext=(0, 3),
                              ha="center", fontsize=7)  # fmt: skip
    axes.set_xticks(range(len(columns)), columns)
    axes.set_ylabel("dev score x 100 (median over seeds; dots: seeds)")
    axes.set_title("GLUE dev, fine-tuned per task (CLEAR's metrics)")
    axes.grid(True, axis="y", alpha=0.3)
    figure.legend(fontsize=8, loc="outside lower center", ncols=min(len(models), 2))  # below, off the bars
    figure.savefig(path, dpi=150)
    return os.fspath(path)


def alignment_uniformity_trajectory(run: TrainingRun) -> list[tuple[int, float, float]]:
    """``(step, alignment, uniformity)`` of every evaluation of ``run`` that logged both, in step order."""
    points = []
    for entry in run.log_history:
        for key in entry:
            if key.endswith("_alignment"):
                prefix = key[: -len("_alignment")]
                if f"{prefix}_uniformity" in entry:
                    points.append((int(entry["step"]), float(entry[key]), float(entry[f"{prefix}_uniformity"])))
                    break
    return sorted(points)


MIN_UNIFORMITY_SPAN = 0.5
MIN_ALIGNMENT_SPAN = 0.2


def _at_least(
    limits: tuple[float, float], span: float, lowest: float = -math.inf, highest: float = math.inf
) -> tuple[float, float]:
    """``limits`` widened about their middle to ``span`` when narrower, kept within [``lowest``, ``highest``]."""
    low, high = limits
    if high - low < span:
        middle = (low + high) / 2
        low, high = middle - span / 2, middle + span / 2
    if low < lowest:
        low, high = lowest, high + lowest - low
    if high > highest:
        low, high = low - (high - highest), highest
    return low, high


def _figure(width: float, height: float):
    require("matplotlib", "plots", "Plotting")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def plot_alignment_uniformity(
    runs: Sequence[TrainingRun], models: Sequence[ModelPoint], path: str | os.PathLike
) -> str:
    """Draw ℓ_align against ℓ_uniform: one arrowed trajectory per run (a point per evaluation, in step order) and
    one star per model (models that share a name, such as one recipe's seeds, share a color and a legend entry).
    Writes a PNG to ``path`` and returns it."""
    trajectories = [(run, alignment_uniformity_trajectory(run)) for run in runs]
    trajectories = [(run, points) for run, points in trajectories if points]
    if not trajectories and not models:
        raise ValueError(
            "Nothing to draw on the alignment-uniformity plane: train with STS evaluation (eval_dataset={'stsb': "
            "...}, --eval_strategy steps --stsb_dev_file ...) or give results of `contrastive-hf evaluate --tasks "
            "align`."
        )
    grouped: dict[str, list[ModelPoint]] = {}
    for model in models:
        grouped.setdefault(model.name, []).append(model)
    figure = _figure(7.5, 5.5)
    axes = figure.add_subplot()
    # matplotlib's 10 default colors, or tab20's 20 where more entries than 10 would repeat a color
    if len(trajectories) + len(grouped) <= 10:
        colors = itertools.cycle(f"C{i}" for i in range(10))
    else:
        from matplotlib import colormaps

        colors = itertools.cycle(colormaps["tab20"].colors)
    for run, points in trajectories:
        color = next(colors)
        steps, alignments, uniformities = zip(*points, strict=True)
        axes.plot(
            uniformities,
            alignments,
            "o",
            color=color,
            markersize=5,
            label=f"{run.name} (steps {steps[0]}-{steps[-1]})",
        )
        for i in range(len(points) - 1):
            axes.annotate(
                "",
                xy=(uniformities[i + 1], alignments[i + 1]),
                xytext=(uniformities[i], alignments[i]),
                arrowprops={"arrowstyle": "->", "color": color, "lw": 1.3},
            )
        labelled = range(len(points)) if len(points) <= 10 else (0, len(points) - 1)
        for i in labelled:
            axes.annotate(
                f"{steps[i]}", (uniformities[i], alignments[i]), textcoords="offset points", xytext=(5, 4),
                fontsize=8, color=color,
            )  # fmt: skip
    for name, points in grouped.items():
        uniformities = [point.uniformity for point in points]
        alignments = [point.alignment for point in points]
        axes.plot(uniformities, alignments, "*", linestyle="none", color=next(colors), markersize=13, label=name)
    # matplotlib zooms onto a single point (axes of +/-0.008): show at least this much of the plane, so that a
    # small change looks small (SimCSE's Figure 2 spans about 3 in uniformity and 0.5 in alignment)
    axes.set_xlim(*_at_least(axes.get_xlim(), MIN_UNIFORMITY_SPAN, highest=0.0))  # uniformity <= 0
    axes.set_ylim(*_at_least(axes.get_ylim(), MIN_ALIGNMENT_SPAN, lowest=0.0))  # alignment >= 0
    axes.set_xlabel("ℓ_uniform  (uniformity; lower = more uniform)")
    axes.set_ylabel("ℓ_align  (alignment of positive pairs; lower = closer)")
    steps = " (numbers: training step)" if trajectories else ""
    axes.set_title(f"Alignment vs uniformity on STS-B{steps}\nlower left is better")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.savefig(path, dpi=150)
    return os.fspath(path)


def _curve(run: TrainingRun, key: str) -> tuple[list[int], list[float]]:
    points = sorted((entry["step"], entry[key]) for entry in run.log_history if key in entry and "step" in entry)
    return [step for step, _ in points], [value for _, value in points]


def _metric_title(key: str) -> str:
    match = re.fullmatch(r"eval_(\w+?)_spearman", key)
    data = {"stsb": "STS-B dev"}.get(match.group(1), match.group(1)) if match else key
    return f"{key} ({data}, cosine, Spearman x 100)"


def plot_training_curves(runs: Sequence[TrainingRun], path: str | os.PathLike) -> str:
    """Draw loss, mlm_loss, cl_loss and every ``eval_*_spearman`` against the training step, one panel each, one
    line per run, the best checkpoint marked. Writes a PNG to ``path`` and returns it."""
    from matplotlib.ticker import MaxNLocator

    keys = [key for key in LOSS_CURVES if any(_curve(run, key)[0] for run in runs)]
    metric_keys = sorted(
        {key for run in runs for entry in run.log_history for key in entry if re.fullmatch(r"eval_\w+_spearman", key)}
    )
    keys += metric_keys
    if not keys:
        raise ValueError("The run logged neither losses nor STS figures; train with --logging_steps set.")
    columns = 2 if len(keys) > 1 else 1
    rows = (len(keys) + columns - 1) // columns
    figure = _figure(6.0 * columns, 3.6 * rows)
    for index, key in enumerate(keys):
        axes = figure.add_subplot(rows, columns, index + 1)
        for number, run in enumerate(runs):
            steps, values = _curve(run, key)
            if not steps:
                continue
            color = f"C{number}"
            marker = "o" if key in metric_keys else None
            axes.plot(steps, values, color=color, marker=marker, markersize=4, label=run.name)
            if key in metric_keys and run.best_global_step in steps:
                best = values[steps.index(run.best_global_step)]
                axes.plot(
                    run.best_global_step, best, "*", color=color, markersize=14, label=f"{run.name}: best checkpoint"
                )
        axes.set_title(_LOSS_TITLES.get(key) or _metric_title(key), fontsize=11)
        axes.set_xlabel("training step")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylabel("loss (nats)" if key in LOSS_CURVES else "Spearman x 100")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    figure.savefig(path, dpi=150)
    return os.fspath(path)
